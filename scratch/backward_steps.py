"""The words of the backward steps (9-16): when a call has each, what it reads, its formula.

`scratch.steps` builds the registry entries from these functions; each takes the registry's
`Call` (with `backward` set when the trace was given a grad_output). The math, for one head
(scratch.backward): dV = P^T dO, dP = dO V^T, D_i = sum_c dO_ic O_ic, dS = P * (dP - D),
dQ = scale * dS K, dK = scale * dS^T Q; then the projections' gradients and the inputs'.
"""

from __future__ import annotations

GRAD_OF = {"q": "grad_query", "k": "grad_key", "v": "grad_value"}


def _h(call) -> str:
    """'[h]' when the per-head backward steps have a head axis."""
    return "[h]" if call.multi else ""


def head_grad(call) -> str:
    """The step holding each head's dO: grad_head_outputs with a head axis, else grad_output."""
    return "grad_head_outputs" if call.multi else "grad_output"


def head_output(call) -> str:
    """The step holding each head's O: head_outputs with a head axis, else output."""
    return "head_outputs" if call.multi else "output"


def projected(call) -> bool:
    """Whether any input projection (w_q, w_k, w_v) was given."""
    return bool({"w_q", "w_k", "w_v"} & call.given)


def backward(call) -> bool:
    """The trace holds the backward steps (a grad_output was given)."""
    return call.backward


def given_and_backward(name: str):
    """A backward step present when argument `name` (w_o, b_q, ...) was given."""
    return lambda call: call.backward and name in call.given


def multi_backward(call) -> bool:
    """grad_head_outputs: backward with a head axis."""
    return call.backward and call.multi


def input_grad_present(step: str):
    """grad_x, grad_key_input, grad_value_input: with a projection, when that input exists."""
    need = {"x": lambda c: True, "key_input": lambda c: c.cross,
            "value_input": lambda c: c.separate_value}[step]  # fmt: skip
    return lambda call: call.backward and projected(call) and need(call)


def input_paths(call, step: str) -> list[tuple[str, str | None]]:
    """(gradient step, weight or None) for each of q, k, v computed from input `step`."""
    return [
        (GRAD_OF[out], f"w_{out}" if f"w_{out}" in call.given else None)
        for out in ("q", "k", "v")
        if call.source(out) == step
    ]


def reads(name: str):
    """The steps backward step `name` reads, for a call."""

    def of(call) -> tuple[str, ...]:
        g = head_grad(call)
        fixed = {
            "grad_output": (),
            "grad_w_o": ("concat", "grad_output"),
            "grad_b_o": ("grad_output",),
            "grad_head_outputs": ("grad_output", "w_o") if "w_o" in call.given
            else ("grad_output",),
            "grad_value": ("weights", g),
            "grad_weights": (g, "v"),
            "row_dot": (g, head_output(call)),
            "grad_scores": (("masked",) if call.dropout_p else ()) + ("weights", "grad_weights",
                                                                      "row_dot"),
            "grad_query": ("grad_scores", "k"),
            "grad_key": ("grad_scores", "q"),
        }  # fmt: skip
        if name in fixed:
            return fixed[name]
        if name.startswith("grad_w_"):
            out = name[-1]
            return (call.source(out), GRAD_OF[out])
        if name.startswith("grad_b_"):
            return (GRAD_OF[name[-1]],)
        step = name.removeprefix("grad_")  # x, key_input, value_input
        return tuple(s for pair in input_paths(call, step) for s in pair if s is not None)

    return of


def _group_heads(call, what: str) -> str:
    """'h' or 'h // g': which query heads share a key/value head."""
    return f"{what}_{{h // {call.group}}}" if call.num_kv_heads < call.num_heads else f"{what}_h"


def formula(name: str):
    """The formula line of backward step `name`, for a call."""

    def of(call) -> str:
        h, g = _h(call), head_grad(call)
        if name == "grad_output":
            return "grad_output = dO = d loss / d output (given)"
        if name == "grad_w_o":
            return "grad_w_o = concat^T @ grad_output"
        if name == "grad_head_outputs":
            if "w_o" in call.given:
                return "grad_head_outputs[h] = (grad_output @ w_o^T)[:, head h's columns]"
            return "grad_head_outputs[h] = grad_output[:, head h's columns]"
        if name == "grad_value":
            if not call.multi:
                return "grad_value = weights^T @ grad_output"
            return (
                "grad_value[:, kv head] = sum over the heads h reading it of "
                "weights[h]^T @ grad_head_outputs[h]"
            )
        if name == "grad_weights":
            v = f"{_group_heads(call, 'v')}^T" if call.multi else "v^T"
            return f"grad_weights{h} = {g}{h} @ {v}"
        if name == "row_dot":
            i = f"{h}[i]"
            return f"row_dot{i} = sum_c {g}{i}[c] * {head_output(call)}{i}[c]"
        if name == "grad_scores":
            if call.dropout_p:  # the weights before dropout, and dropout's factor on dP
                return (
                    f"grad_scores{h} = softmax(masked{h}) * (grad_weights{h} * keep - row_dot{h}),"
                    " keep = 1/(1-p) where weights kept the entry, 0 where dropout dropped it"
                )
            return f"grad_scores{h} = weights{h} * (grad_weights{h} - row_dot{h}) (row by row)"
        if name == "grad_query":
            if not call.multi:
                return "grad_query = scale * grad_scores @ k"
            return f"grad_query[:, head h] = scale * grad_scores[h] @ {_group_heads(call, 'k')}"
        if name == "grad_key":
            if not call.multi:
                return "grad_key = scale * grad_scores^T @ q"
            return (
                "grad_key[:, kv head] = scale * sum over the heads h reading it of "
                "grad_scores[h]^T @ q_h"
            )
        if name.startswith("grad_w_"):
            return f"{name} = {call.source(name[-1])}^T @ {GRAD_OF[name[-1]]}"
        if name.startswith("grad_b_"):
            src = "grad_output" if name == "grad_b_o" else GRAD_OF[name[-1]]
            return f"{name} = sum_i {src}[i] (column sums)"
        paths = input_paths(call, name.removeprefix("grad_"))
        terms = [f"{grad} @ {w}^T" if w else grad for grad, w in paths]
        return f"{name} = " + " + ".join(terms)

    return of


NOTES = {
    "grad_output": "how the loss changes with each output entry: where the backward starts",
    "grad_w_o": "how the loss changes with each entry of the output projection",
    "grad_b_o": "how the loss changes with each entry of the output bias",
    "grad_head_outputs": "dO carried back through the output projection, split by heads",
    "grad_value": "each value row's gradient: the dO rows of the queries that used it, weighted",
    "grad_weights": "how the loss changes with each attention weight (dP)",
    "row_dot": "D, one number per query row: the weights' average of grad_weights on the row",
    "grad_scores": (
        "dS, softmax's Jacobian row by row: 0 where a weight is 0 and on a fully masked row "
        "(NaN there under masked_rows='nan')"
    ),
    "grad_query": "each query's gradient: the keys, weighted by grad_scores, times the scale",
    "grad_key": "each key's gradient: the queries, weighted by grad_scores, times the scale",
    "grad_x": "the gradient of the input: every projection it fed, carried back",
    "grad_key_input": "the gradient of the key-side input",
    "grad_value_input": "the gradient of the value-side input",
}


def note(name: str):
    """The note of backward step `name` (weights and biases: one sentence for all)."""
    if name in NOTES:
        text = NOTES[name]
    elif name.startswith("grad_w_"):
        text = f"how the loss changes with each entry of w_{name[-1]}"
    else:
        text = f"how the loss changes with each entry of b_{name[-1]}"
    return lambda call: text

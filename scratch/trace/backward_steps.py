"""The words of the backward steps (9-16): when a call has each, what it reads, its formula.

`scratch.trace.steps` builds one registry entry per backward step from the `Words` made here (and
writes its forward words with the same helpers: fixed, said, h_suffix, kv_name): each
entry gets its own reads, formula and note functions (families such as grad_w_q/k/v are built
from what the entry is given: the weight, its input, its gradient), so nothing here looks a step
up by its name. Each function takes the registry's `Call` (with `backward` set when the trace was
given a grad_output). The math, for one head (scratch.backward.sdpa): dV = P^T dO, dP = dO V^T,
D_i = sum_c dO_ic O_ic, dS = P * (dP - D), dQ = scale * dS K, dK = scale * dS^T Q; then the
projections' gradients and the inputs'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

GRAD_OF = {"q": "grad_query", "k": "grad_key", "v": "grad_value"}


@dataclass(frozen=True)
class Words:
    """What one backward step reads, its formula and its note, each a function of the call."""

    reads: Callable[..., tuple[str, ...]]
    formula: Callable[..., str]
    note: Callable[..., str]


def fixed(*names: str) -> Callable[..., tuple[str, ...]]:
    """Reads that do not depend on the call."""
    return lambda call: names


def said(text: str) -> Callable[..., str]:
    """Words that do not depend on the call."""
    return lambda call: text


def h_suffix(call) -> str:
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


def input_grad_present(has_input: Callable[..., bool]):
    """grad_x, grad_key_input, grad_value_input: with a projection, when the call has the input."""
    return lambda call: call.backward and projected(call) and has_input(call)


def input_paths(call, step: str) -> list[tuple[str, str | None]]:
    """(gradient step, weight or None) for each of q, k, v computed from input `step`."""
    return [
        (GRAD_OF[out], f"w_{out}" if f"w_{out}" in call.given else None)
        for out in ("q", "k", "v")
        if call.source(out) == step
    ]


def kv_name(call, what: str) -> str:
    """'k_h', or 'k_{h // g}' under GQA: the key/value head (of `what`) query head h reads."""
    return f"{what}_{{h // {call.group}}}" if call.num_kv_heads < call.num_heads else f"{what}_h"


# step 9: grad_output, the dO the backward starts from
GRAD_OUTPUT = Words(
    fixed(),
    said("grad_output = dO = d loss / d output (given)"),
    said("how the loss changes with each output entry: where the backward starts"),
)


def weight_grad(weight: str, source: Callable[..., str], grad: str, what: str) -> Words:
    """grad_w = source^T @ grad, for the weight `weight` (w_o, w_q, ...) that is `what`."""
    return Words(
        lambda call: (source(call), grad),
        lambda call: f"grad_{weight} = {source(call)}^T @ {grad}",
        said(f"how the loss changes with each entry of {what}"),
    )


def bias_grad(bias: str, grad: str, what: str) -> Words:
    """grad_b = the column sums of `grad`, for the bias `bias` (b_o, b_q, ...) that is `what`."""
    return Words(
        fixed(grad),
        said(f"grad_{bias} = sum_i {grad}[i] (column sums)"),
        said(f"how the loss changes with each entry of {what}"),
    )


def projection_weight_grad(out: str) -> Words:
    """grad_w_q, grad_w_k or grad_w_v (`out` is q, k or v): its input^T @ its output's gradient."""
    return weight_grad(f"w_{out}", lambda call: call.source(out), GRAD_OF[out], f"w_{out}")


def projection_bias_grad(out: str) -> Words:
    """grad_b_q, grad_b_k or grad_b_v (`out` is q, k or v): the column sums of its gradient."""
    return bias_grad(f"b_{out}", GRAD_OF[out], f"b_{out}")


# step 10: through w_o
GRAD_W_O = weight_grad("w_o", lambda call: "concat", "grad_output", "the output projection")
GRAD_B_O = bias_grad("b_o", "grad_output", "the output bias")


def _head_outputs_reads(call) -> tuple[str, ...]:
    """dO, and w_o when the heads were mixed by it."""
    return ("grad_output", "w_o") if "w_o" in call.given else ("grad_output",)


def _head_outputs_formula(call) -> str:
    """dO back through w_o (when given), cut into the heads' columns."""
    if "w_o" in call.given:
        return "grad_head_outputs[h] = (grad_output @ w_o^T)[:, head h's columns]"
    return "grad_head_outputs[h] = grad_output[:, head h's columns]"


GRAD_HEAD_OUTPUTS = Words(
    _head_outputs_reads,
    _head_outputs_formula,
    said("dO carried back through the output projection, split by heads"),
)


# step 11: grad_value and grad_weights
def _value_formula(call) -> str:
    """dV = P^T dO, summed over the query heads that read each kv head."""
    if not call.multi:
        return "grad_value = weights^T @ grad_output"
    return (
        "grad_value[:, kv head] = sum over the heads h reading it of "
        "weights[h]^T @ grad_head_outputs[h]"
    )


GRAD_VALUE = Words(
    lambda call: ("weights", head_grad(call)),
    _value_formula,
    said("each value row's gradient: the dO rows of the queries that used it, weighted"),
)


def _weights_formula(call) -> str:
    """dP = dO V^T, per head."""
    h = h_suffix(call)
    v = f"{kv_name(call, 'v')}^T" if call.multi else "v^T"
    return f"grad_weights{h} = {head_grad(call)}{h} @ {v}"


GRAD_WEIGHTS = Words(
    lambda call: (head_grad(call), "v"),
    _weights_formula,
    said("how the loss changes with each attention weight (dP)"),
)


# step 12: row_dot (D)
def _row_dot_formula(call) -> str:
    """D_i = sum_c dO_ic O_ic."""
    i = f"{h_suffix(call)}[i]"
    return f"row_dot{i} = sum_c {head_grad(call)}{i}[c] * {head_output(call)}{i}[c]"


ROW_DOT = Words(
    lambda call: (head_grad(call), head_output(call)),
    _row_dot_formula,
    said("D, one number per query row: the weights' average of grad_weights on the row"),
)


# step 13: grad_scores (dS)
def _scores_reads(call) -> tuple[str, ...]:
    """P, dP and D; with dropout also masked (P before dropout comes from it)."""
    return (("masked",) if call.dropout_p else ()) + ("weights", "grad_weights", "row_dot")


def _scores_formula(call) -> str:
    """dS = P * (dP - D), with dropout's factor on dP when asked."""
    h = h_suffix(call)
    if call.dropout_p:  # the weights before dropout, and dropout's factor on dP
        return (
            f"grad_scores{h} = softmax(masked{h}) * (grad_weights{h} * keep - row_dot{h}),"
            " keep = 1/(1-p) where weights kept the entry, 0 where dropout dropped it"
        )
    return f"grad_scores{h} = weights{h} * (grad_weights{h} - row_dot{h}) (row by row)"


GRAD_SCORES = Words(
    _scores_reads,
    _scores_formula,
    said(
        "dS, softmax's Jacobian row by row: 0 where a weight is 0 and on a fully masked row "
        "(NaN there under masked_rows='nan')"
    ),
)


# step 14: grad_query and grad_key
def _query_formula(call) -> str:
    """dQ = scale * dS K, per head."""
    if not call.multi:
        return "grad_query = scale * grad_scores @ k"
    return f"grad_query[:, head h] = scale * grad_scores[h] @ {kv_name(call, 'k')}"


def _key_formula(call) -> str:
    """dK = scale * dS^T Q, summed over the query heads that read each kv head."""
    if not call.multi:
        return "grad_key = scale * grad_scores^T @ q"
    return (
        "grad_key[:, kv head] = scale * sum over the heads h reading it of grad_scores[h]^T @ q_h"
    )


GRAD_QUERY = Words(
    fixed("grad_scores", "k"),
    _query_formula,
    said("each query's gradient: the keys, weighted by grad_scores, times the scale"),
)
GRAD_KEY = Words(
    fixed("grad_scores", "q"),
    _key_formula,
    said("each key's gradient: the queries, weighted by grad_scores, times the scale"),
)


# step 16: the inputs' gradients
def input_grad(step: str, note: str) -> Words:
    """grad_x, grad_key_input or grad_value_input: the paths of q, k, v computed from `step`."""

    def reads(call) -> tuple[str, ...]:
        return tuple(s for pair in input_paths(call, step) for s in pair if s is not None)

    def formula(call) -> str:
        terms = [f"{grad} @ {w}^T" if w else grad for grad, w in input_paths(call, step)]
        return f"grad_{step} = " + " + ".join(terms)

    return Words(reads, formula, said(note))


GRAD_X = input_grad("x", "the gradient of the input: every projection it fed, carried back")
GRAD_KEY_INPUT = input_grad("key_input", "the gradient of the key-side input")
GRAD_VALUE_INPUT = input_grad("value_input", "the gradient of the value-side input")

"""One registry of the trace's steps: what each step is, reads, means, and how it is checked.

`STEPS` lists every step a trace can hold, in trace order. An entry (`StepSpec`) says when a call
has the step, its number, axes, formula and note (built from what the call had: heads,
projections and biases given, mask kind), which steps it reads, how its error bound propagates
(`scratch.bounds.step_bounds`) and how one of its entries is explained
(`scratch.trace.step_explain`).
`layout_trace`, `explain`, `compare_traces` and the window all read it; a new step is one entry.

The numbers are the computation's steps, the same in every comment of the code base:
0 the inputs and weights given, 1 the projections q, k, v, 2 scores, 3 scaled, 4 masked,
5 weights (softmax, then dropout when asked: the weights a call returns are the dropped ones),
6 weights @ v (output, or head_outputs with several heads), 7 the heads side by side, 8 @ w_o.
With a grad_output (dO) the trace goes on backward (`StepSpec.backward`, words in
`scratch.trace.backward_steps`): 9 grad_output, 10 through w_o (grad_w_o, grad_b_o,
grad_head_outputs),
11 grad_value and grad_weights, 12 row_dot (D), 13 grad_scores, 14 grad_query and grad_key,
15 the projections' gradients, 16 the inputs' gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from scratch.bounds import step_bounds as bounds
from scratch.trace import backward_steps as back
from scratch.trace import step_explain as explains
from scratch.trace.backward_steps import fixed, h_suffix, kv_name, said
from scratch.trace.mask_words import MASK_WORDS
from scratch.trace.trace_types import Step

AXES = ("head", "query", "key", "model", "feature")


@dataclass(frozen=True)
class Call:
    """What one call had, as far as the registry needs it (counts and words, no values)."""

    num_heads: int = 1
    num_kv_heads: int = 1
    given: frozenset[str] = frozenset()  # of w_q w_k w_v w_o b_q b_k b_v b_o key value
    multi: bool = False  # the trace keeps a head axis (several heads, or an output projection)
    mask: str = "none"  # none, causal, bool or float
    tokens: int = 0  # L, for the notes
    key_tokens: int = 0  # S
    scale_note: str = ""
    masked_rows: str = "zero"
    fully_masked: int = 0  # rows where every key is masked
    backward: bool = False  # a grad_output was given: the backward steps follow the forward
    dropout_p: float = 0.0  # dropout on the weights (the ground truth's traces only)
    rotary: bool = False  # a variant with RoPE: q_rotated and k_rotated follow q, k, v
    sinks: bool = False  # a variant with learned sinks: sink_weights follow weights
    rule: str = ""  # the variant's mask rule in words (mask "variant")
    score_rule: str = ""  # the variant's score change in words ("" for none)

    @property
    def cross(self) -> bool:
        """Whether keys (and values) come from their own input."""
        return "key" in self.given

    @property
    def separate_value(self) -> bool:
        """Whether values come from an input of their own (not the key input)."""
        return self.cross and "value" in self.given

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.num_kv_heads

    def source(self, out: str) -> str:
        """The input step that q, k or v is computed from."""
        if out == "q" or not self.cross:
            return "x"
        return "value_input" if out == "v" and self.separate_value else "key_input"


Words = Callable[[Call], str]


@dataclass(frozen=True)
class StepSpec:
    """One step of the registry; `present`, `reads`, `formula` and `note` read the call."""

    name: str
    number: float  # an int; 1.5 for RoPE's q_rotated, k_rotated (between 1 and 2)
    axes: tuple[str, ...]  # without the head axis that `per_head` adds to several heads
    present: Callable[[Call], bool]
    reads: Callable[[Call], tuple[str, ...]]
    formula: Words
    note: Words
    bound: bounds.Bound
    explain: explains.Explainer
    per_head: bool = False  # scores..weights: (H, L, S) with several heads, (L, S) with one
    arrow: str = ""  # the operation on the window's arrow into this step ("q @ k^T")
    biased: str = ""  # the bias argument added to this step, if any
    backward: bool = False  # a gradient (steps 9-16), shown in the window's Backward view
    sentence: str = (
        ""  # the kind of sentence the window writes about it (gui.present.sentences.KINDS)
    )

    def axes_for(self, call: Call) -> tuple[str, ...]:
        """The step's axes in this call."""
        return (("head",) if self.per_head and call.multi else ()) + self.axes


def _always(call: Call) -> bool:
    """Every call has this step."""
    return True


# steps present when the call has key_input, value_input, a variant with RoPE, learned sinks
_cross = attrgetter("cross")
_separate_value = attrgetter("separate_value")
_rotary = attrgetter("rotary")
_sinks = attrgetter("sinks")


def _count(n: int, noun: str) -> str:
    """'1 token', '6 tokens'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _input(name: str, axes: tuple[str, ...], present, formula: str, note, arrow="") -> StepSpec:
    """An input (x, key_input, value_input) or a weight (w_q, w_k, w_v, w_o, arrow 'with')."""
    note = note if callable(note) else said(note)
    return StepSpec(
        name, 0, axes, present, fixed(), said(formula), note, bounds.given, explains.given,
        arrow=arrow,
    )  # fmt: skip


def _projection(out: str, what: str) -> StepSpec:
    """q, k or v: the source input @ w (+ b), or the input itself with no w."""

    def reads(call: Call) -> tuple[str, ...]:
        w = (f"w_{out}",) if f"w_{out}" in call.given else ()
        return (call.source(out), *w)

    def formula(call: Call) -> str:
        if f"w_{out}" not in call.given:
            return f"{out} = {call.source(out)} (no projection)"
        bias = f" + b_{out}" if f"b_{out}" in call.given else ""
        return f"{out} = {call.source(out)} @ w_{out}{bias}"

    side = "query" if out == "q" else "key"
    return StepSpec(
        out, 1, (side, "feature"), _always, reads, formula, said(what),
        bounds.projection, explains.projection, biased=f"b_{out}", arrow="x @ W",
    )  # fmt: skip


def _scores_formula(call: Call) -> str:
    """scores = q @ k^T, per head with the kv head each query head reads (rotated by RoPE)."""
    q, k = _scores_reads(call)
    if not call.multi:
        return f"scores = {q} @ {k}^T"
    return f"scores[h] = {q}_h @ {kv_name(call, k)}^T"


def _scores_reads(call: Call) -> tuple[str, ...]:
    """q and k, or their rotated forms under RoPE."""
    return ("q_rotated", "k_rotated") if call.rotary else ("q", "k")


def _scaled_formula(call: Call) -> str:
    """scaled = scores * scale, then the variant's score change when it has one."""
    inner = f"scores{h_suffix(call)} * scale"
    return f"scaled{h_suffix(call)} = " + (f"score_mod({inner})" if call.score_rule else inner)


def _scaled_note(call: Call) -> str:
    """Where the scale came from, and the score change in words."""
    return call.scale_note + (f"; score_mod = {call.score_rule}" if call.score_rule else "")


def _masked_formula(call: Call) -> str:
    """masked = scaled with the call's kind of mask."""
    h = h_suffix(call)
    return f"masked{h} = " + MASK_WORDS[call.mask].formula.format(s=f"scaled{h}")


def _weights_formula(call: Call) -> str:
    """weights = softmax(masked) along each row (then dropout, when asked)."""
    text = f"weights{h_suffix(call)} = softmax(masked{h_suffix(call)}) along each row"
    if call.dropout_p:
        text += f", then dropout (p = {call.dropout_p:g}): kept x 1/(1-p), dropped 0"
    return text


def _weights_note(call: Call) -> str:
    """Rows sum to 1; how many rows are fully masked and what fills them."""
    note = "each row sums to 1: how much each query attends to each key"
    if call.dropout_p:
        note = "before dropout each row sums to 1: how much each query attends to each key"
    if call.sinks:
        note = "each row sums to 1 - sink_weights: how much each query attends to each key"
    if call.fully_masked:
        note += f"; {call.fully_masked} fully masked row(s) follow masked_rows={call.masked_rows!r}"
    return note


def _head_outputs_formula(call: Call) -> str:
    """head_outputs[h] = weights[h] @ the v head it reads."""
    return f"head_outputs[h] = weights[h] @ {kv_name(call, 'v')}"


def _single(call: Call) -> bool:
    """One head and no output projection: weights @ v is the output."""
    return not call.multi


def _heads_only(call: Call) -> bool:
    """Several heads and no output projection: the heads side by side are the output."""
    return call.multi and "w_o" not in call.given


def _projected(call: Call) -> bool:
    """An output projection w_o was given."""
    return "w_o" in call.given


_QK = ("query", "key")


def _backward(name, number, axes, present, words, kind, per_head=False) -> StepSpec:
    """A backward step with its own words (reads, formula, note) from scratch.trace.backward_steps;
    its bound and explanation are the functions named `kind` in scratch.bounds.step_bounds and
    scratch.trace.step_explain (never looked up by the step's own name)."""
    return StepSpec(
        name, number, axes, present, words.reads, words.formula, words.note,
        getattr(bounds, kind), getattr(explains, kind), per_head=per_head, backward=True,
    )  # fmt: skip


STEPS: tuple[StepSpec, ...] = (
    # step 0: the inputs and the projection weights
    _input(
        "x", ("query", "model"), _always, "x",
        lambda call: f"input: {_count(call.tokens, 'token')}, "
        + ("a row of numbers" if call.tokens == 1 else "each a row of numbers"),
    ),
    _input(
        "key_input", ("key", "model"), _cross, "key input",
        lambda call: f"key-side input: {_count(call.key_tokens, 'token')} (cross-attention)",
    ),
    _input(
        "value_input", ("key", "model"), _separate_value, "value input",
        "value-side input",
    ),
    *(
        _input(
            f"w_{n}", ("model", "feature"), lambda call, n=n: f"w_{n}" in call.given,
            f"w_{n}", f"projection that turns inputs into {what}", arrow="with",
        )
        for n, what in (("q", "queries"), ("k", "keys"), ("v", "values"))
    ),
    # step 1: q, k, v = projections     (L, d_model) @ (d_model, H * d_head) -> (L, H * d_head)
    _projection("q", "queries: what each token is looking for"),
    _projection("k", "keys: what each token offers to be found by"),
    _projection("v", "values: what each token passes on"),
    # step 1.5: RoPE turns q and k by their positions (a variant with Rotary)
    StepSpec(
        "q_rotated", 1.5, ("query", "feature"), _rotary, fixed("q"),
        said("q_rotated = RoPE(q, positions i + S - L)"),
        said("queries turned by their positions: each pair of features by its angle"),
        bounds.rotated, explains.rotated, arrow="RoPE",
    ),
    StepSpec(
        "k_rotated", 1.5, ("key", "feature"), _rotary, fixed("k"),
        said("k_rotated = RoPE(k, positions j)"),
        said("keys turned by their positions: each pair of features by its angle"),
        bounds.rotated, explains.rotated, arrow="RoPE",
    ),
    # step 2: scores = q @ k^T          (L, d_head) @ (d_head, S) -> (L, S) per head
    StepSpec(
        "scores", 2, _QK, _always, _scores_reads, _scores_formula,
        said("dot product of each query with each key: high = similar"),
        bounds.scores, explains.scores, per_head=True, arrow="q @ k^T", sentence="match",
    ),
    # step 3: scaled = scores * scale
    StepSpec(
        "scaled", 3, _QK, _always, fixed("scores"), _scaled_formula, _scaled_note,
        bounds.scaled, explains.scaled, per_head=True,
        arrow="x scale", sentence="match",
    ),
    # step 4: masked = scaled + mask (-inf where a key may not be attended)
    StepSpec(
        "masked", 4, _QK, _always, fixed("scaled"), _masked_formula,
        lambda call: MASK_WORDS[call.mask].note.format(rule=call.rule), bounds.masked,
        explains.masked, per_head=True,
        arrow="mask", sentence="mask",
    ),
    # step 5: weights = softmax(masked) along each row (then dropout, when asked)
    StepSpec(
        "weights", 5, _QK, _always, fixed("masked"),
        _weights_formula, _weights_note, bounds.weights, explains.weights, per_head=True,
        arrow="softmax", sentence="attention",
    ),
    # step 5, with learned sinks: the sink's share of each row (its column in the denominator)
    StepSpec(
        "sink_weights", 5, ("query",), _sinks, fixed("masked"),
        lambda call: f"sink_weights{h_suffix(call)} = exp(sink[h]) / (sum_j exp(masked[i][j]) + "
        "exp(sink[h])) along each row",
        said("the learned sink's column: the share of each row that goes to no key "
              "(its weights sum to 1 minus this)"),
        bounds.sink_weights, explains.sink_weights, per_head=True, arrow="sink",
    ),
    # step 6: weights @ v               (L, S) @ (S, d_v) -> (L, d_v) per head
    StepSpec(
        "output", 6, ("query", "feature"), _single, fixed("weights", "v"),
        said("output = weights @ v"),
        said("each output row is a weighted average of the value rows"),
        bounds.weighted_values, explains.weighted_values, arrow="@ v", sentence="mix",
    ),
    StepSpec(
        "head_outputs", 6, ("head", "query", "feature"), lambda call: call.multi,
        fixed("weights", "v"), _head_outputs_formula,
        said("each head's weighted average of its value rows"),
        bounds.weighted_values, explains.weighted_values, arrow="weights @ v", sentence="mix",
    ),
    # step 7: the heads side by side    (H, L, d_v) -> (L, H * d_v)
    StepSpec(
        "output", 7, ("query", "feature"), _heads_only, fixed("head_outputs"),
        said("output = concat(head_outputs[0], ..., head_outputs[H-1])"),
        said("the heads side by side"), bounds.side_by_side, explains.side_by_side,
        arrow="concat", sentence="heads",
    ),
    StepSpec(
        "concat", 7, ("query", "feature"), _projected, fixed("head_outputs"),
        said("concat = [head_outputs[0] | ... | head_outputs[H-1]]"),
        said("the heads side by side"), bounds.side_by_side, explains.side_by_side,
        arrow="concat",
    ),
    _input(
        "w_o", ("feature", "feature"), _projected, "w_o",
        "output projection that mixes the heads", arrow="with",
    ),
    # step 8: output = concat @ w_o (+ b_o)   (L, H * d_v) @ (H * d_v, d_out) -> (L, d_out)
    StepSpec(
        "output", 8, ("query", "feature"), _projected, fixed("concat", "w_o"),
        lambda call: "output = concat @ w_o" + (" + b_o" if "b_o" in call.given else ""),
        said("the heads mixed by the output projection"),
        bounds.output_projection, explains.projection, biased="b_o", arrow="@ W_o",
        sentence="heads",
    ),
    # step 9: grad_output = dO, the gradient the backward starts from   (L, d_out)
    _backward("grad_output", 9, ("query", "feature"), back.backward, back.GRAD_OUTPUT, "given"),
    # step 10: grad_w_o = concat^T @ grad_output, and back through w_o   (L, d_out) -> (H, L, d_v)
    _backward("grad_w_o", 10, ("feature", "feature"), back.given_and_backward("w_o"),
              back.GRAD_W_O, "weight_grad"),
    _backward("grad_b_o", 10, ("feature",), back.given_and_backward("b_o"), back.GRAD_B_O,
              "bias_grad"),
    _backward("grad_head_outputs", 10, ("head", "query", "feature"), back.multi_backward,
              back.GRAD_HEAD_OUTPUTS, "grad_head_outputs"),
    # step 11: grad_value = weights^T @ dO, grad_weights = dO @ v^T    (S, L) @ (L, d_v) -> (S, d_v)
    _backward("grad_value", 11, ("key", "feature"), back.backward, back.GRAD_VALUE, "grad_value"),
    _backward("grad_weights", 11, _QK, back.backward, back.GRAD_WEIGHTS, "grad_weights",
              per_head=True),
    # step 12: row_dot = sum_c dO * O along each row (D)               (L, d_v) -> (L,)
    _backward("row_dot", 12, ("query",), back.backward, back.ROW_DOT, "row_dot", per_head=True),
    # step 13: grad_scores = weights * (grad_weights - row_dot)        (L, S)
    _backward("grad_scores", 13, _QK, back.backward, back.GRAD_SCORES, "grad_scores",
              per_head=True),
    # step 14: grad_query = scale * dS @ k, grad_key = scale * dS^T @ q  (L, S) @ (S, E) -> (L, E)
    _backward("grad_query", 14, ("query", "feature"), back.backward, back.GRAD_QUERY, "grad_query"),
    _backward("grad_key", 14, ("key", "feature"), back.backward, back.GRAD_KEY, "grad_key"),
    # step 15: grad_w_q = x^T @ grad_query (k, v alike), grad_b = column sums   (d, L) @ (L, m)
    *(
        _backward(f"grad_w_{n}", 15, ("model", "feature"), back.given_and_backward(f"w_{n}"),
                  back.projection_weight_grad(n), "weight_grad")
        for n in ("q", "k", "v")
    ),
    *(
        _backward(f"grad_b_{n}", 15, ("feature",), back.given_and_backward(f"b_{n}"),
                  back.projection_bias_grad(n), "bias_grad")
        for n in ("q", "k", "v")
    ),
    # step 16: grad_x = grad_query @ w_q^T (+ the paths of k and v)   (L, m) @ (m, d) -> (L, d)
    _backward("grad_x", 16, ("query", "model"), back.input_grad_present(_always), back.GRAD_X,
              "input_grad"),
    _backward("grad_key_input", 16, ("key", "model"), back.input_grad_present(_cross),
              back.GRAD_KEY_INPUT, "input_grad"),
    _backward("grad_value_input", 16, ("key", "model"), back.input_grad_present(_separate_value),
              back.GRAD_VALUE_INPUT, "input_grad"),
)  # fmt: skip


def steps_of(call: Call) -> tuple[StepSpec, ...]:
    """The registry entries a call has, in trace order."""
    return tuple(spec for spec in STEPS if spec.present(call))


def lay_out(call: Call, values: dict[str, object], backward: bool = False) -> tuple[Step, ...]:
    """The call's forward steps (or its backward steps), each its value in `values` (per-head
    stacks (H, ...) given for every call: one head without a head axis keeps (...)), named,
    worded and with axes as the registry says."""
    steps = []
    for spec in steps_of(call):
        if spec.backward != backward:
            continue
        value = values[spec.name]
        if spec.per_head and not call.multi:
            value = value[0]  # (H, ...) -> (...) for one head
        steps.append(
            Step(spec.name, spec.formula(call), value, spec.note(call), spec.axes_for(call))
        )
    return tuple(steps)


def spec_for(call: Call, name: str) -> StepSpec:
    """The registry entry of step `name` in a call; KeyError naming the steps it has."""
    for spec in steps_of(call):
        if spec.name == name:
            return spec
    have = ", ".join(spec.name for spec in steps_of(call))
    raise KeyError(f"no registry entry for step {name!r} in this call; it has: {have}")


def heading(call: Call, names: Sequence[str], name: str) -> str:
    """'step 2: scores (5/9)': the registry's number, then the place among `names` (the
    terminal's heading and the window's, so both count alike)."""
    place = list(names).index(name) + 1
    return f"step {spec_for(call, name).number}: {name} ({place}/{len(names)})"


def call_of(trace: object) -> Call:
    """The Call a trace was made by, read from its steps, heads, options and source."""
    return call_of_names(
        trace.names(),
        trace.num_heads,
        trace.num_kv_heads,
        biases=trace.source.biases,
        mask=trace.source.mask,
        masked_rows=trace.options.masked_rows,
        dropout_p=trace.options.dropout_p,
    )


def arrow_of(call: Call, name: str) -> str:
    """The words on the window's arrow into step `name`: its spec's, but q, k and v with no
    w at all (q = k = v = x, or given directly) are the inputs themselves, not "x @ W" (one
    stage holds the three, so one w among them keeps "x @ W")."""
    spec = spec_for(call, name)
    if name in ("q", "k", "v") and not back.projected(call):
        return f"= {call.source(name)}"
    return spec.arrow


def call_of_names(
    names: Sequence[str],
    num_heads: int = 1,
    num_kv_heads: int = 1,
    *,
    biases: Sequence[str] = (),
    mask: str = "none",
    masked_rows: str = "zero",
    dropout_p: float = 0.0,
) -> Call:
    """The Call that lays out steps `names` (which weights and inputs were given, head axis)."""
    given = {name for name in ("w_q", "w_k", "w_v", "w_o") if name in names}
    given.update(arg for arg, step in (("key", "key_input"), ("value", "value_input"))
                 if step in names)  # fmt: skip
    given.update(biases)
    multi = "head_outputs" in names
    return Call(
        num_heads, num_kv_heads, frozenset(given), multi, mask, masked_rows=masked_rows,
        backward="grad_output" in names, dropout_p=dropout_p, rotary="q_rotated" in names,
        sinks="sink_weights" in names,
    )  # fmt: skip


__all__ = [
    "AXES",
    "STEPS",
    "Call",
    "StepSpec",
    "arrow_of",
    "call_of",
    "call_of_names",
    "heading",
    "spec_for",
    "steps_of",
]

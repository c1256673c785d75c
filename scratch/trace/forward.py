"""A worked example of attention: every intermediate matrix, named, with its formula and a note.

`trace_attention` returns a `Trace`; `trace["weights"].value` looks a step up by name. The
desktop app and the terminal trace render nothing but traces, so everything they show is here.
With a grad_output the trace goes on backward: every number from
`scratch.backward.multihead.run_backward` (the ground truth's backward, fsum everywhere), named
and ordered as the registry's steps 9-16 say (`add_backward`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Callable

from scratch.backward.multihead import run_backward
from scratch.core.example import Example, check_trace_call
from scratch.core.front_doors import trace_door
from scratch.core.multihead import Projected, concat_heads, run_multi_head
from scratch.core.options import Options
from scratch.core.variant_steps import Pieces, head_steps, pieces
from scratch.ops.plan import PARAMS, HeadPlan
from scratch.ops.validate import _describe
from scratch.trace.mask_words import trace_mask_kind
from scratch.trace.steps import AXES, Call, call_of, lay_out
from scratch.trace.trace_types import MayAttend, Source, Step, Trace

__all__ = [
    "AXES",
    "MayAttend",
    "Source",
    "Step",
    "Trace",
    "check_one_example",
    "layout_trace",
    "mask_rule",
    "trace_attention",
    "trace_example",
    "trace_of",
]


def _labels(tokens: object, n: int, name: str, prefix: str) -> tuple[str, ...]:
    """Token labels: given strings of the right count, or prefix0, prefix1, ..."""
    if tokens is None:
        return tuple(f"{prefix}{i}" for i in range(n))
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{name}: expected a list of {n} strings, found {_describe(tokens)}")
    tokens = tuple(tokens)
    if len(tokens) != n:
        raise ValueError(f"{name}: expected {n} labels (one per row), found {len(tokens)}")
    return tokens


def _scale_note(scale: object, value: float, d_head: int) -> str:
    """Where the scale came from, in words."""
    if scale is None:
        return f"scale = 1/sqrt(d_k) = 1/sqrt({d_head}) = {value:.6g}"
    return f"scale = {value:.6g} (given)"


def _may_attend(masked: object, want_grids: bool) -> tuple[int, list | None]:
    """(rows where every key is -inf, the may-attend grids when wanted: one per head, or one
    when every head's is the same).

    Arrays and tensors are compared whole (16.7 M cells at 4096 tokens: milliseconds, where a
    Python loop takes seconds), and their grids stay arrays, read as tuples (MayAttend)."""
    if hasattr(masked, "shape") and callable(getattr(masked, "tolist", None)):
        may = masked != -math.inf  # (H, L, S) bools, the array's own type
        n_full = int((~may.any(-1)).sum())
        if not want_grids:
            return n_full, None
        if bool((may == may[:1]).all()):  # every head sees the same grid (a mask, no -inf
            may = may[:1]  # in the data): one grid kept, not one per head
        # copies: a view would keep the whole (H, L, S) array alive (268 MB at 4096 tokens
        # and 16 heads)
        return n_full, [MayAttend(g.clone() if hasattr(g, "clone") else g.copy()) for g in may]
    grids = [tuple(tuple(x != -math.inf for x in row) for row in m) for m in masked]
    return sum(not any(row) for grid in grids for row in grid), grids if want_grids else None


def variant_words(p: Pieces) -> dict:
    """The Call's fields for a variant: RoPE and sinks present, the mask and score rules."""
    masks = [part.rule() for part in p.rules if part.mask_mod is not None]
    scores = [part.rule() for part in p.rules if part.score_mod is not None]
    return dict(
        rotary=p.rotary is not None,
        sinks=p.sinks is not None,
        rule=" and ".join(masks),
        score_rule=", then ".join(scores),
    )


def mask_rule(variant: object) -> str:
    """The words a trace's masked step gives a variant's mask rule.

    Args:
        variant: a scratch.variants object, or None.

    Returns:
        The rule in words ('j <= i', rules joined by 'and'); '' for None or a variant
        without a mask.

    Examples:
        >>> from scratch import mask_rule
        >>> from scratch.variants import SlidingWindow
        >>> mask_rule(SlidingWindow(2))
        'window (2, 0): key j seen by query i iff i - 2 <= j <= i'
    """
    return variant_words(pieces(Options(variant=variant)))["rule"] if variant is not None else ""


def layout_trace(
    values: dict[str, object],
    plan: HeadPlan,
    options: Options,
    scale: float,
    *,
    is_bool: bool | None,
    tokens: object,
    key_tokens: object,
    source: tuple[str, ...],
) -> Trace:
    """Name, order and describe the matrices a backend computed (its own arrays, untouched).

    Only the words are shared between backends; every number comes from the caller. `values`
    holds x, [key_input, value_input,] w_q ... b_o (None where not given), q, k, v, per-head
    stacks (H, L, S) of scores, scaled, masked and weights, head_outputs (H, L, d_v), concat and
    output; key_input and value_input are there only when the user passed key and value.
    `source` is (backend, dtype) or (backend, dtype, kernel).
    """
    L, S = plan.L, plan.S
    labels = _labels(tokens, L, "tokens", "t")
    given = {name for name in PARAMS if values.get(name) is not None}
    given |= {name for name in ("key", "value") if f"{name}_input" in values}
    cross = "key" in given
    key_labels = _labels(key_tokens, S, "key_tokens", "k") if cross or key_tokens else labels
    kind = trace_mask_kind(options.mask_kind, is_bool)
    p = pieces(options) if options.variant is not None else None
    if p is not None:  # a variant: the mask is its rule (causal and attn_mask joined in)
        kind = "variant" if p.rule is not None and p.rule.mask_mod is not None else "none"
    n_full, grids = _may_attend(values["masked"], kind != "none")
    call = Call(
        plan.num_heads,
        plan.num_kv_heads,
        frozenset(given),
        plan.num_heads > 1 or "w_o" in given,
        kind,
        tokens=L,
        key_tokens=S,
        scale_note=_scale_note(options.scale, scale, plan.d_head),
        masked_rows=options.masked_rows,
        fully_masked=n_full,
        dropout_p=options.dropout_p,
        **({} if p is None else variant_words(p)),
    )
    steps = lay_out(call, values)  # the registry's steps 0 to 8, in trace order
    allowed = None
    if kind != "none":
        allowed = grids[0] if all(g == grids[0] for g in grids) else tuple(grids)
    backend, dtype, kernel = (*source, "explicit")[:3]
    biases = tuple(sorted(name for name in given if name.startswith("b_")))
    made = Source(backend, dtype, kernel, kind, cross, biases)
    return Trace(
        steps, labels, key_labels, scale, plan.num_heads, plan.num_kv_heads, allowed,
        options, made,
    )  # fmt: skip


def check_one_example(x_dims: int) -> None:
    """A trace is one worked example: x (L, d_model), no leading dims."""
    if x_dims != 2:
        raise ValueError(
            f"x: a trace is one worked example, expected shape (L, d_model), found {x_dims} dims"
        )


def trace_of(
    example: Example, options: Options, plan: HeadPlan, scale: float, values: dict, *,
    params: dict, extras: dict, join_heads: Callable, is_bool: bool | None,
    source: tuple[str, ...],
) -> Trace:  # fmt: skip
    """The Trace of a backend's arrays: `values` holds x, key_input, value_input, q, k, v, the
    per-head scores, scaled, masked, weights (H, L, S), head_outputs, concat and output; params
    the projections given (w_q ... b_o); extras the variant's per-head q_rotated, k_rotated
    (joined side by side by join_heads) and sink_weights (H, L)."""
    values = dict(values)
    values.update({name: params.get(name) for name in PARAMS})
    for name, per_head in extras.items():  # q_rotated (H, L, d) -> (L, H * d)
        values[name] = per_head if name == "sink_weights" else join_heads(per_head)
    for name in ("key", "value"):  # only an input the user passed is a step of the trace
        if getattr(example, name) is None:
            values.pop(f"{name}_input")
    # the numbers are all the backend's; scratch.trace.forward only names and describes them
    return layout_trace(
        values, plan, options, scale, is_bool=is_bool, tokens=example.tokens,
        key_tokens=example.key_tokens, source=source,
    )  # fmt: skip


def trace_example(
    example: Example,
    options: Options,
    *,
    dtype: object = None,
    on_projected: object = None,
    grad_output: object = None,
) -> Trace:
    """The ground truth's worked example of `example` under `options`, every step kept.

    The same signature as every backend's `trace_example`, plus `grad_output`: `dtype` may only
    be None or "float64" (the only one here), and `on_projected` (None or a function) is called
    with the nested lists q, k, v and the scale once the projections exist, before attention.
    Options read: attn_mask, is_causal, scale, masked_rows, dropout_p, rng (GQA comes from
    example.num_kv_heads; a trace has no lse step, so return_lse=True is refused).

    Args:
        example: the inputs: x (L, d_model), key, value, projections, tokens, heads.
        options: the call's Options (mask, scale, masked_rows, dropout).
        dtype: None or "float64".
        on_projected: None, or a function called with (q, k, v, scale) before attention.
        grad_output: None, or dO (L, d_out): the trace goes on with the backward steps.

    Returns:
        The Trace: steps x, q, k, v, scores, scaled, masked, weights, output (and the
        projections' and the backward's where they apply), each a Step.

    Examples:
        >>> import scratch
        >>> trace = scratch.trace_attention([[1.0, 0.0], [0.0, 1.0]], is_causal=True)
        >>> trace.names()
        ['x', 'q', 'k', 'v', 'scores', 'scaled', 'masked', 'weights', 'output']
        >>> round(trace["weights"].value[1][0], 4)
        0.3302
    """
    check_trace_call(example, options, on_projected)
    if dtype not in (None, "float64"):
        raise ValueError(f"dtype: expected None or 'float64' (the ground truth), found {dtype!r}")
    if grad_output is not None and options.variant is not None:
        raise ValueError(
            "variant: the backward trace takes no variant yet; "
            "scratch.flex_attention_backward computes a variant's gradients"
        )
    replay = replay_of(options.rng) if grad_output is not None and options.dropout_p else None
    heads = (example.num_heads, example.num_kv_heads)
    run = run_multi_head(
        example.x, example.key, example.value, example.projections(), heads, options, on_projected
    )
    check_one_example(len(run.lead) + 2)
    per_head = head_steps(run.heads, run.plan.group)  # (H, L, S) each; RoPE's and sinks' too
    found = [n for n in ("q_rotated", "k_rotated", "sink_weights") if n in per_head]
    extras = {n: per_head.pop(n) for n in found}
    values = {**run.inputs, "q": run.q, "k": run.k, "v": run.v, **per_head}
    values.update(head_outputs=values.pop("output"), concat=run.concat, output=run.output)
    is_bool = None if run.mask is None else run.mask.is_bool  # read by run_multi_head
    trace = trace_of(
        example, options, run.plan, run.scale, values, params=run.params, extras=extras,
        join_heads=lambda m: concat_heads(m, ()), is_bool=is_bool, source=("scratch", "float64"),
    )  # fmt: skip
    return trace if grad_output is None else add_backward(trace, run, grad_output, replay)


def replay_of(rng: object) -> object:
    """A copy of `rng` (None: Python's global generator) in its present state: taken before the
    forward draws its dropout mask, it draws the same mask again for the backward."""
    if rng is None:
        replay = random.Random()
        replay.setstate(random.getstate())
        return replay
    return copy.deepcopy(rng)


def add_backward(trace: object, run: Projected, grad_output: object, replay: object = None):
    """`trace` (the forward of `run`) followed by its backward steps for dO = `grad_output`;
    with dropout, `replay` draws the forward's mask again (see `replay_of`)."""
    back = run_backward(run, grad_output, replay)
    heads = back.heads  # one Gradients per head, in head order
    values = {
        "grad_output": back.grad_output,  # (L, d_out)
        "grad_head_outputs": [g.grad_output for g in heads],  # (H, L, d_v)
        "grad_value": back.grad_v,  # (S, Hkv * d_v), each kv head summed over its group
        "grad_weights": [g.grad_dropped for g in heads],  # (H, L, S), d loss / d weights
        "row_dot": [g.row_dot for g in heads],  # (H, L)
        "grad_scores": [g.grad_scores for g in heads],  # (H, L, S)
        "grad_query": back.grad_q,  # (L, H * d_head)
        "grad_key": back.grad_k,  # (S, Hkv * d_head)
        "grad_x": back.grad_inputs["query"],
        "grad_key_input": back.grad_inputs["key"],
        "grad_value_input": back.grad_inputs["value"],
        **back.grad_params,  # grad_w_q ... grad_b_o, those given
    }
    call = dataclasses.replace(
        call_of(trace), backward=True, tokens=len(trace.tokens), key_tokens=len(trace.key_tokens)
    )
    return dataclasses.replace(trace, steps=trace.steps + lay_out(call, values, backward=True))


trace_attention = trace_door(trace_example)

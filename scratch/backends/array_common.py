"""What the NumPy and torch backends share: reading a multi-head call's inputs and planning it,
and a variant's trace steps around the backend's own explicit flex kernel (scratch.trace.forward's
trace_of lays out the values). Written once; `xp` is numpy or torch, passed in (neither is
imported here).

A variant (Options.variant, with is_causal and attn_mask joined in) is taken apart as the ground
truth takes it (scratch.core.variant_steps.pieces): RoPE turns q and k (Rotary.turn_array), the mask
and score changes run in the backend's explicit flex kernel (numpy_flex.variant_steps,
torch_flex_explicit.variant_steps), which puts the learned sinks in each row's denominator. Then
the options' masked_rows policy, as the ground truth applies it (a row that sees no key and has
no sink). Every number is the backend's; this module only orders the steps and names them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from scratch.core.options import Options
from scratch.core.variant_steps import pieces
from scratch.ops.plan import HeadPlan, plan_multi_head
from scratch.variants import Rotary


@dataclass(frozen=True)
class Steps:
    """Every intermediate of a backend's explicit kernel: NumPy arrays or torch tensors (torch:
    scores, scaled, masked and lse in the math dtype, weights and output in storage)."""

    scores: object  # (..., L, S)
    scaled: object  # (..., L, S)
    masked: object  # (..., L, S)
    weights: object  # (..., L, S), after dropout
    output: object  # (..., L, Ev)
    lse: object = None  # (..., L) with options.return_lse: row max + log(row sum)


def multi_head_inputs(
    query, key, value, params: dict, heads: tuple, read: Callable
) -> tuple[object, object, object, dict, HeadPlan]:
    """(x, key_input, value_input, projections, plan): each input read by the backend's
    read(obj, name, min_dims) (as the ground truth reads them: inputs and projections at least
    2-D, biases 1-D; key and value default to x and key), the heads planned once from the
    shapes. projections: w_q ... b_o as given, None where not."""
    x = read(query, "query", 2)
    key_input = x if key is None else read(key, "key", 2)
    value_input = key_input if value is None else read(value, "value", 2)
    arrays = {
        name: None if obj is None else read(obj, name, 1 if name[0] == "b" else 2)
        for name, obj in params.items()
    }
    shapes = {name: tuple(a.shape) for name, a in arrays.items() if a is not None}
    plan = plan_multi_head(
        tuple(x.shape),
        None if key is None else tuple(key_input.shape),
        None if value is None else tuple(value_input.shape),
        num_heads=heads[0],
        num_kv_heads=heads[1],
        **shapes,
    )
    return x, key_input, value_input, arrays, plan


@dataclass(frozen=True)
class HeadOps:
    """A backend's own pieces of a multi-head call (NumPy arrays or torch tensors)."""

    read: Callable  # read(obj, name, min_dims) -> the input as the backend's array
    project: Callable  # project(x, w, b) -> x @ w + b, rounded as the backend rounds
    attend: Callable  # attend(q, k, v, scale, plan) -> (Steps or None, head outputs, mask,
    # kernel, detail): q (..., H, L, E), k, v (..., Hkv, S, E / Ev); Steps when weights are kept
    variant: Callable = None  # variant(q, k, v, scale) -> attend_variant's (steps, extras)


@dataclass(frozen=True)
class HeadsRun:
    """The inputs and every intermediate of one multi-head call."""

    plan: HeadPlan
    params: dict  # the projections and biases: w_q, ..., b_o (None where not given)
    inputs: dict  # x (..., L, d_model), key_input (..., S, d_key), value_input (..., S, d_value)
    q: object  # (..., L, H * d_head)
    k: object  # (..., S, Hkv * d_head)
    v: object  # (..., S, Hkv * d_v)
    scale: float
    steps: Steps | None  # per-head steps (..., H, L, S); None from a kernel that keeps none
    head_outputs: object  # (..., H, L, d_v)
    concat: object  # (..., L, H * d_v)
    output: object  # (..., L, d_out)
    mask: object  # the SDPA mask the kernel read (None: none, or a variant's rule)
    kernel: str
    detail: str
    extras: dict  # a variant's q_rotated, k_rotated, sink_weights, per head


def split_heads(m, heads: int):
    """(..., n, heads * d) -> (..., heads, n, d): head h is the column block h*d:(h+1)*d."""
    *lead, n, width = m.shape
    return m.reshape(*lead, n, heads, width // heads).swapaxes(-2, -3)


def concat_heads(m):
    """(..., heads, n, d) -> (..., n, heads * d): split_heads undone, the heads side by side."""
    *lead, _, n, _ = m.shape
    return m.swapaxes(-2, -3).reshape(*lead, n, -1)


def run_heads(
    query, key, value, params: dict, heads: tuple, options: Options, ops: HeadOps, *,
    on_projected: Callable = None, variant: bool = False,
) -> HeadsRun:  # fmt: skip
    """Read, plan once, project, split heads, attend (a variant: ops.variant, every step kept),
    concatenate, project out: the one multi-head flow of the NumPy and torch backends."""
    x, xk, xv, arrays, plan = multi_head_inputs(query, key, value, params, heads, ops.read)
    # step 1: projections (an input without one is used as it is, as in a trace)
    q, k, v = (
        t if arrays[f"w_{n}"] is None else ops.project(t, arrays[f"w_{n}"], arrays[f"b_{n}"])
        for n, t in zip("qkv", (x, xk, xv))
    )  # (..., n, d_in) @ (d_in, heads * d) -> (..., n, heads * d)
    scale = options.scale_for(plan.d_head)
    if on_projected is not None:  # before attention: a caller can start work on them
        on_projected(q, k, v, scale)
    # steps 2-6: split heads and attend          # (..., H, L, d_head), (..., Hkv, S, d_head)
    H, Hkv = plan.num_heads, plan.num_kv_heads
    q_h, k_h, v_h = split_heads(q, H), split_heads(k, Hkv), split_heads(v, Hkv)
    extras, mask, kernel, detail = {}, None, "explicit", ""
    if variant:  # the backend's explicit flex kernel, every step kept
        found, extras = ops.variant(q_h, k_h, v_h, scale)
        steps, head_outputs = Steps(**found), found["output"]
    else:
        steps, head_outputs, mask, kernel, detail = ops.attend(q_h, k_h, v_h, scale, plan)
    # step 7: concatenate heads                  # (..., H, L, d_v) -> (..., L, H * d_v)
    concat = concat_heads(head_outputs)
    # step 8: output projection                  # (..., L, H * d_v) @ (H * d_v, d_out)
    w_o = arrays["w_o"]
    output = concat if w_o is None else ops.project(concat, w_o, arrays["b_o"])
    inputs = {"x": x, "key_input": xk, "value_input": xv}
    return HeadsRun(
        plan, arrays, inputs, q, k, v, scale, steps, head_outputs, concat, output, mask, kernel,
        detail, extras,
    )  # fmt: skip


def attend_variant(
    q, k, v, scale: float, options: Options, xp, explicit: Callable, stored: Callable = None
) -> tuple[dict, dict]:
    """(steps, extras) of one example's heads: q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev).

    explicit(q, k, v, scale, rule, sinks): the backend's explicit flex kernel on these heads, a
    dict of scores, scaled, masked, weights (H, L, S), output (H, L, Ev), v_all (H, S, Ev: each
    query head's values) and sink_weights (H, L) or None. stored: the storage dtype's rounding
    of a result (torch's 16-bit storage; None: none). steps: scores, scaled, masked, weights and
    output; extras: q_rotated (H, L, E) and k_rotated (Hkv, S, E) under RoPE, sink_weights (H, L)
    with learned sinks."""
    stored = stored or (lambda t: t)
    if options.dropout_p:
        raise ValueError("dropout_p: a variant's trace has no dropout; expected 0.0")
    p = pieces(options)
    L, S = q.shape[1], k.shape[1]
    extras = {}
    if p.rotary is not None:  # step 1.5: RoPE, queries at positions i + S - L, keys at j
        q_pos, k_pos = Rotary.positions(L, S)
        q, k = p.rotary.turn_array(q, q_pos, xp), p.rotary.turn_array(k, k_pos, xp)
        extras.update(q_rotated=stored(q), k_rotated=stored(k))
    # steps 2-6: scores, scaled (score_mod of scores * scale), masked (-inf where not seen),
    # weights (each row's softmax with the sink in its denominator), output
    s = explicit(q, k, v, scale, p.rule, p.sinks)
    weights, output = s["weights"], s["output"]
    full = xp.all(xp.isneginf(s["masked"]), axis=-1, keepdims=True)  # (H, L, 1): no key seen
    if p.sinks is None and options.masked_rows != "zero" and bool(full.any()):
        # the policy on rows that see nothing, and their output from those weights
        fill = math.nan if options.masked_rows == "nan" else 1.0 / S
        weights = xp.where(full, fill, weights)
        output = weights @ s["v_all"]  # (H, L, S) @ (H, S, Ev) -> (H, L, Ev)
    if options.masked_rows == "zero" or p.sinks is not None:  # exactly 0, whatever v holds
        output = xp.where(full, 0.0, output)
    if s["sink_weights"] is not None:
        extras["sink_weights"] = stored(s["sink_weights"])  # (H, L)
    steps = dict(scores=s["scores"], scaled=s["scaled"], masked=s["masked"])
    steps.update(weights=stored(weights), output=stored(output))
    return steps, extras


__all__ = [
    "HeadOps",
    "HeadsRun",
    "Steps",
    "attend_variant",
    "concat_heads",
    "multi_head_inputs",
    "run_heads",
    "split_heads",
]

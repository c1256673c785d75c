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


__all__ = ["Steps", "attend_variant", "multi_head_inputs"]

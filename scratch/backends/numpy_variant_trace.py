"""A variant's steps for the NumPy trace: numpy_flex's explicit kernel, every step kept.

The variant (Options.variant, with is_causal and attn_mask joined in) is taken apart as the
ground truth takes it (scratch.variant_steps.pieces): RoPE turns q and k (Rotary.turn_array),
the mask and score changes run as their array forms inside numpy_flex (its block mask from
numpy_flex_plan.create_block_mask, the same rule object), and numpy_flex's softmax puts the
learned sinks in each row's denominator. Then the options' masked_rows policy, as the ground
truth applies it (a row that sees no key and has no sink).
"""

from __future__ import annotations

import numpy as np

from ..options import FlexOptions, Options
from ..variant_steps import pieces
from ..variants import Rotary
from .numpy_flex import FlexProblem, explicit_softmax, explicit_steps
from .numpy_flex_plan import create_block_mask


def attend_variant(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, options: Options
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(steps, extras) of one example's heads: q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev).

    steps: scores, scaled, masked, weights (H, L, S) and output (H, L, Ev); extras: the
    per-head q_rotated (H, L, E) and k_rotated (Hkv, S, E) under RoPE, sink_weights (H, L) with
    learned sinks."""
    if options.dropout_p:
        raise ValueError("dropout_p: a variant's trace has no dropout; expected 0.0")
    p = pieces(options)
    H, L, S = q.shape[0], q.shape[1], k.shape[1]
    extras = {}
    if p.rotary is not None:  # step 1.5: RoPE, queries at positions i + S - L, keys at j
        q_pos, k_pos = Rotary.positions(L, S)
        q, k = p.rotary.turn_array(q, q_pos, np), p.rotary.turn_array(k, k_pos, np)
        extras.update(q_rotated=q, k_rotated=k)
    mask_mod = None if p.rule is None else p.rule.mask_mod
    score_mod = None if p.rule is None else p.rule.score_mod
    block_mask = None if mask_mod is None else create_block_mask(mask_mod, 1, H, L, S)
    flex = FlexOptions(score_mod, block_mask, scale, H != k.shape[0], sinks=p.sinks)
    x = FlexProblem(q[None], k[None], v[None], flex)  # (1, H, L, E), (1, Hkv, S, E|Ev)
    # steps 2-4: scores, scaled (score_mod of scores * scale), masked (-inf where not seen)
    scores, _, scaled, masked = (m[0] for m in explicit_steps(x))  # (H, L, S) each
    # step 5: weights, each row's softmax with the sink in its denominator
    weights, lse = (m[0] for m in explicit_softmax(x, masked[None]))  # (H, L, S), (H, L)
    if p.sinks is not None:  # the sink's share of each row: exp(sink[h] - lse)
        sink = np.asarray(p.sinks.logits, dtype=x.dtype)[:, None]  # (H, 1)
        extras["sink_weights"] = np.exp(sink - lse).astype(x.dtype, copy=False)
    full = np.isneginf(masked).all(axis=-1, keepdims=True)  # (H, L, 1): no key seen
    if p.sinks is None and options.masked_rows != "zero":  # the policy on rows that see nothing
        fill = np.nan if options.masked_rows == "nan" else 1.0 / S
        weights = np.where(full, x.dtype.type(fill), weights)
    # step 6: output = weights @ v          (H, L, S) @ (H, S, Ev) -> (H, L, Ev)
    output = weights @ x.repeat_kv(x.v)[0]
    if options.masked_rows == "zero" or p.sinks is not None:  # exactly 0, whatever v holds
        output = np.where(full, x.dtype.type(0), output)
    steps = dict(scores=scores, scaled=scaled, masked=masked, weights=weights, output=output)
    return steps, extras


__all__ = ["attend_variant"]

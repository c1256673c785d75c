"""A variant's steps for the torch trace: torch_flex's explicit path, every step kept.

The variant (Options.variant, with is_causal and attn_mask joined in) is taken apart as the
ground truth takes it (scratch.variant_steps.pieces): RoPE turns q and k (Rotary.turn_array),
the mask and score changes run as their torch forms on the whole grid (torch_flex_mods), and the
learned sinks sit in each row's denominator (torch_flex_explicit.explicit_steps). Then the
options' masked_rows policy, as the ground truth applies it (a row that sees no key and has no
sink). Math in the placement's wide dtype (float32 for 16-bit storage), steps stored as the
plain torch trace stores them.
"""

from __future__ import annotations

import math

import torch

from ..options import Options
from ..variant_steps import pieces
from ..variants import Rotary
from .torch_flex_explicit import explicit_steps
from .torch_flex_mods import torch_form
from .torch_inputs import Placement


def attend_variant(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, options: Options,
    place: Placement,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:  # fmt: skip
    """(steps, extras) of one example's heads: q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev).

    steps: scores, scaled, masked (H, L, S) in the math dtype, weights (H, L, S) and output
    (H, L, Ev) in storage; extras: the per-head q_rotated (H, L, E) and k_rotated (Hkv, S, E)
    under RoPE, sink_weights (H, L) with learned sinks, in storage."""
    if options.dropout_p:
        raise ValueError("dropout_p: a variant's trace has no dropout; expected 0.0")
    p = pieces(options)
    q, k, v = q.to(place.wide), k.to(place.wide), v.to(place.wide)
    H, L, S = q.shape[0], q.shape[1], k.shape[1]
    extras = {}
    if p.rotary is not None:  # step 1.5: RoPE, queries at positions i + S - L, keys at j
        q_pos, k_pos = Rotary.positions(L, S)
        q, k = p.rotary.turn_array(q, q_pos, torch), p.rotary.turn_array(k, k_pos, torch)
        extras.update(q_rotated=q.to(place.storage), k_rotated=k.to(place.storage))
    mask_mod = None if p.rule is None else torch_form(p.rule.mask_mod, "mask")
    score_mod = None if p.rule is None else torch_form(p.rule.score_mod, "score")
    sinks = None
    if p.sinks is not None:
        sinks = torch.tensor(p.sinks.logits, dtype=place.wide, device=q.device)  # (H,)
    # steps 2-6 on (1, H, L, .): scores, scaled, masked, weights with the sinks, output
    s = explicit_steps(q[None], k[None], v[None], scale, score_mod, mask_mod, sinks)
    weights, output = s.weights[0], s.output[0]  # (H, L, S), (H, L, Ev)
    full = torch.isneginf(s.scores[0]).all(-1, keepdim=True)  # (H, L, 1): no key seen
    if p.sinks is None and options.masked_rows != "zero" and bool(full.any()):
        # the policy on rows that see nothing, and their output from those weights
        fill = math.nan if options.masked_rows == "nan" else 1.0 / S
        weights = weights.masked_fill(full, fill)
        output = weights @ v.repeat_interleave(H // v.shape[0], 0)  # (H, L, S) @ (H, S, Ev)
    if options.masked_rows == "zero" or p.sinks is not None:  # exactly 0, whatever v holds
        output = output.masked_fill(full, 0.0)
    if s.sink_weights is not None:
        extras["sink_weights"] = s.sink_weights[0].to(place.storage)  # (H, L)
    steps = dict(
        scores=s.dots[0], scaled=s.changed[0], masked=s.scores[0],
        weights=weights.to(place.storage), output=output.to(place.storage),
    )  # fmt: skip
    return steps, extras


__all__ = ["attend_variant"]

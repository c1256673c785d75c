"""FlexAttention written out in torch: scores, score_mod, mask, softmax with sinks, weights @ v;
and the torch forms of a call's score_mod and mask_mod, and the grid they fill.

The path that runs where FlexAttention cannot (any gradient on CPU: torch 2.13's FlexAttention
"does not support backward on CPU"), and the one torch.autograd differentiates for the backward.
Every step is an ordinary differentiable torch operation; the mods are evaluated on the whole
(B, H, L, S) grid as FlexAttention calls them (`on_grid`). Memory: O(B H L S).

A mod that belongs to a scratch variant (its bound `mask_mod`/`score_mod`, combined ones too) is
replaced by the variant's array form with xp=torch (scratch.variants.base.array_form). Any
other function is the user's own and is used as it is: torch calls it as FlexAttention does,
with 0-d index tensors under torch.func.vmap, so it must use torch operations (no Python `if`
on an index). The same torch form serves FlexAttention, torch's create_block_mask (the tiles
to visit) and the explicit path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from scratch.variants.base import array_form


def torch_form(mod: Callable | None, kind: str) -> Callable | None:
    """mod as FlexAttention takes it: kind 'mask' (b, h, q_idx, kv_idx) or 'score' (score, ...)."""
    form = array_form(mod, kind)
    if form is None:
        return mod  # None, or the user's own function written with torch operations
    if kind == "mask":
        return lambda b, h, q_idx, kv_idx: form(b, h, q_idx, kv_idx, torch)
    return lambda score, b, h, q_idx, kv_idx: form(score, b, h, q_idx, kv_idx, torch)


# in_dims of the four nested vmaps, innermost (kv_idx) first: each maps one index and one axis
_MASK_DIMS = (
    (None, None, None, 0),
    (None, None, 0, None),
    (None, 0, None, None),
    (0, None, None, None),
)
_SCORE_DIMS = tuple((0, *dims) for dims in _MASK_DIMS)


def on_grid(mod: Callable, shape: tuple[int, int, int, int], device, score=None) -> torch.Tensor:
    """mod at every (b, h, q_idx, kv_idx) of shape (B, H, L, S), called as FlexAttention calls it.

    A mask_mod gives bools (B, H, L, S); a score_mod (score given, (B, H, L, S)) the changed
    scores, differentiable in score (autograd passes through vmap)."""
    indices = [torch.arange(n, device=device) for n in shape]
    f = mod
    for dims in _MASK_DIMS if score is None else _SCORE_DIMS:
        f = torch.func.vmap(f, in_dims=dims)
    return f(*indices) if score is None else f(score, *indices)


@dataclass(frozen=True)
class FlexSteps:
    """Every intermediate of the explicit path, (B, H, L, .) tensors."""

    dots: torch.Tensor  # q @ k^T (B, H, L, S)
    changed: torch.Tensor  # score_mod(scale * dots)
    scores: torch.Tensor  # changed, -inf where mask_mod hides the key
    weights: torch.Tensor  # (B, H, L, S)
    output: torch.Tensor  # (B, H, L, Ev)
    lse: torch.Tensor  # (B, H, L)
    sink_weights: torch.Tensor | None  # (B, H, L): exp(sink[h] - lse); None without sinks


def explicit_steps(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    score_mod: Callable | None,
    mask_mod: Callable | None,
    sinks: torch.Tensor | None,
) -> FlexSteps:
    """Every step of the explicit flex attention, output (B, H, L, Ev) and lse (B, H, L) last;
    kv heads shared by groups of query heads (GQA)."""
    B, H, L, _ = q.shape
    S, group = k.shape[2], H // k.shape[1]
    k_all, v_all = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # (B, H, S, .)
    # step 1: scaled scores
    dots = q @ k_all.transpose(-1, -2)  # (B, H, L, E) @ (B, H, E, S) -> (B, H, L, S)
    scores = changed = scale * dots
    # step 2: the score change, then the mask (a score of -inf from score_mod masks too)
    if score_mod is not None:
        scores = changed = on_grid(score_mod, (B, H, L, S), q.device, changed)
    if mask_mod is not None:
        seen = on_grid(mask_mod, (B, H, L, S), q.device)  # (B, H, L, S) bools
        scores = torch.where(seen, changed, -math.inf)
    # step 3: softmax with the sink in the denominator; subtract the row max (sink included) so
    # exp never overflows; a row that sees nothing keeps max 0 and sum 0 (weights 0, lse -inf)
    top = scores.detach().amax(-1, keepdim=True)  # (B, H, L, 1)
    if sinks is not None:
        sink = sinks.view(1, H, 1, 1)
        top = torch.maximum(top, sink.detach())
    top = torch.where(torch.isinf(top), 0.0, top)
    e = torch.exp(scores - top)  # masked keys: exp(-inf) = 0
    total = e.sum(-1, keepdim=True)  # (B, H, L, 1)
    if sinks is not None:
        total = total + torch.exp(sink - top)  # the sink: a denominator term with no value
    empty = total == 0  # (B, H, L, 1); a 1 in their place keeps 0/0 and log 0 out of autograd
    safe = torch.where(empty, 1.0, total)
    weights = e / safe
    # step 4: output = weights @ v
    output = weights @ v_all  # (B, H, L, S) @ (B, H, S, Ev) -> (B, H, L, Ev)
    lse = torch.where(empty, -math.inf, top + torch.log(safe)).squeeze(-1)  # (B, H, L)
    sink_weights = None if sinks is None else (torch.exp(sink - top) / safe).squeeze(-1)
    return FlexSteps(dots, changed, scores, weights, output, lse, sink_weights)


def variant_steps(q, k, v, scale: float, rule, sinks, wide: torch.dtype) -> dict:
    """explicit_steps on one example's heads q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev) in the
    math dtype `wide`, under a variant's mask/score rule (its torch forms) and sinks: the dict
    array_common.attend_variant reads (scores = q k^T, scaled = score_mod of them times scale,
    masked, weights, output, each query head's values v_all, sink_weights)."""
    mask_mod = None if rule is None else torch_form(rule.mask_mod, "mask")
    score_mod = None if rule is None else torch_form(rule.score_mod, "score")
    logits = None
    if sinks is not None:
        logits = torch.tensor(sinks.logits, dtype=wide, device=q.device)  # (H,)
    # steps 2-6 on (1, H, L, .): scores, scaled, masked, weights with the sinks, output
    s = explicit_steps(q[None], k[None], v[None], scale, score_mod, mask_mod, logits)
    return dict(
        scores=s.dots[0], scaled=s.changed[0], masked=s.scores[0], weights=s.weights[0],
        output=s.output[0], v_all=v.repeat_interleave(q.shape[0] // v.shape[0], 0),
        sink_weights=None if s.sink_weights is None else s.sink_weights[0],
    )  # fmt: skip


__all__ = ["FlexSteps", "explicit_steps", "on_grid", "torch_form", "variant_steps"]

"""The torch forms of a flex_attention call's score_mod and mask_mod, and the grid they fill.

A mod that belongs to a scratch variant (its bound `mask_mod`/`score_mod`, combined ones too) is
replaced by the variant's array form with xp=torch (scratch.variants.base.array_form). Any
other function is the user's own and is used as it is: torch calls it as FlexAttention does,
with 0-d index tensors under torch.func.vmap, so it must use torch operations (no Python `if`
on an index). The same torch form serves FlexAttention, torch's create_block_mask (the tiles
to visit) and the explicit path (`on_grid`: every (b, h, q_idx, kv_idx) of the call at once).
"""

from __future__ import annotations

from collections.abc import Callable

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


__all__ = ["on_grid", "torch_form"]

"""Helpers for the array forms of the variants (NumPy or torch, passed in as `xp`).

A variant's `mask_mod_array(b, h, q_idx, kv_idx, xp)`, `score_mod_array(score, ..., xp)` and
`score_grad_array(score, ..., xp)` state the same rule as its plain-Python mods, on index
arrays that broadcast (a tile's rows[:, None] and cols[None, :], or FlexAttention's 0-d
tensors). Nothing here imports numpy or torch: the caller's module is the `xp` argument.
"""

from __future__ import annotations

from collections.abc import Callable


def is_torch(xp: object) -> bool:
    """True when xp is the torch module."""
    return getattr(xp, "__name__", "") == "torch"


def constant(
    owner: object, name: str, values: object, xp: object, like: object, *, own_dtype=False
) -> object:
    """`values` as an xp array of like's dtype (and device), made once per owner and kind.

    like: the array the constant meets (the score for a bias, an index array for ids); a
    plain Python number (no dtype), or own_dtype=True, leaves the dtype to xp."""
    dtype = None if own_dtype else getattr(like, "dtype", None)
    device = getattr(like, "device", None)
    if is_torch(xp) and xp.compiler.is_compiling():  # FlexAttention's trace: no cache writes
        return xp.as_tensor(values, dtype=dtype, device=device)
    key = (name, getattr(xp, "__name__", ""), str(dtype), str(device))
    cache = owner.__dict__.setdefault("_arrays", {})
    if key not in cache:
        if is_torch(xp):
            cache[key] = xp.as_tensor(values, dtype=dtype, device=device)
        else:
            cache[key] = xp.asarray(values, dtype=dtype)
    return cache[key]


def cells(q_idx: object, kv_idx: object) -> object:
    """True at every (q_idx, kv_idx) cell: a mask that broadcasts to both index arrays."""
    return (q_idx == q_idx) & (kv_idx == kv_idx)


def ones(score: object, xp: object) -> object:
    """d (score + c) / d score = 1, shaped like the score."""
    return xp.ones_like(score)


def array_form(mod: Callable | None, kind: str) -> Callable | None:
    """The array form of a variant's bound mod: kind 'mask' -> mask_mod_array, 'score' ->
    score_mod_array, 'grad' -> score_grad_array; None for a user's own plain function."""
    owner = getattr(mod, "__self__", None)
    from .base import Variant  # here: base imports this module

    if not isinstance(owner, Variant):
        return None
    plain = owner.mask_mod if kind == "mask" else owner.score_mod
    if plain is None or mod != plain:
        return None
    name = {"mask": "mask_mod_array", "score": "score_mod_array", "grad": "score_grad_array"}
    return getattr(owner, name[kind])


__all__ = ["array_form", "cells", "constant", "is_torch", "ones"]

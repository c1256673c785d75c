"""The array forms of the variants, derived from their own mods (NumPy or torch, as `xp`).

A variant's mods are written with operations that work elementwise on Python ints and on
NumPy or torch index arrays alike: comparisons (through causal.at_or_before), `&`, `|`, `//`,
`%`, `abs`, a table looked up with `entry`, a value clamped with `clamp`, and the dual module's
tanh, exp, log, sqrt and where. So `mask_mod(b, h, q_idx, kv_idx)` called with index arrays
that broadcast (a tile's rows[:, None] and cols[None, :], or FlexAttention's 0-d tensors) *is*
the array form, as FlexAttention's create_block_mask evaluates a mask_mod on index tensors;
base.Variant builds mask_mod_array, score_mod_array and score_grad_array from it (the last by
dual numbers whose values are arrays). Nothing here imports numpy or torch until an array
meets it (then the array's own module).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator

NUMBERS = (int, float, bool)
ROW_BY_ROW_FROM = 1 << 16  # cells


def module_of(x: object) -> object | None:
    """The numpy or torch module of an array, tensor or NumPy scalar (a Dual: its value's);
    None for a Python number."""
    if type(x) in NUMBERS:
        return None
    x = getattr(x, "value", x) if type(x).__name__ == "Dual" else x
    root = type(x).__module__.partition(".")[0]
    return sys.modules[root] if root in ("numpy", "torch") else None


def xp_of(*values: object) -> object | None:
    """The module of the first array or tensor among `values`; None when all are numbers."""
    for x in values:
        found = module_of(x)
        if found is not None:
            return found
    return None


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
        cache[key] = as_array(values, xp, dtype, device)
    return cache[key]


def as_array(values: object, xp: object, dtype: object = None, device: object = None) -> object:
    """A nested table as one xp array; a large one (ROW_BY_ROW_FROM cells) filled a row at a
    time: converting the 16.7 M Python bools of a 4096-token drawn mask in one call holds the
    GIL for about a second, and a window's event loop waits."""
    convert = (lambda v: xp.as_tensor(v, dtype=dtype, device=device)) if is_torch(xp) else (
        lambda v: xp.asarray(v, dtype=dtype))  # fmt: skip
    shape, leaf = [], values
    while isinstance(leaf, (list, tuple)) and leaf:
        shape.append(len(leaf))
        leaf = leaf[0]
    numpy = sys.modules.get("numpy")
    if len(shape) < 2 or math.prod(shape) < ROW_BY_ROW_FROM or numpy is None:
        return convert(values)
    if is_torch(xp):  # through NumPy's fill where it gives torch's dtype: bools
        filled = as_array(values, numpy) if type(leaf) is bool else None
        return convert(values if filled is None or filled.dtype != bool else filled)
    rows = _rows(values, len(shape) - 1)
    first = next(rows)
    kinds = set(map(type, first))
    out = xp.empty((math.prod(shape[:-1]), shape[-1]), dtype=xp.asarray(first, dtype=dtype).dtype)
    out[0] = first
    for i, row in enumerate(rows, 1):
        if len(row) != shape[-1] or not set(map(type, row)) <= kinds:
            return convert(values)  # ragged or mixed: the one call reads it in its own way
        out[i] = row  # assigned: np.asarray(row) lets go of the GIL and takes it straight back,
        # and the waiting thread starves (event-loop gaps of 100 ms measured)
    return out.reshape(shape)


def _rows(values: object, depth: int) -> Iterator:
    """The innermost rows of a nested table `depth` levels above its numbers."""
    if depth == 0:
        yield values
        return
    for part in values:
        yield from _rows(part, depth - 1)


def entry(
    owner: object, name: str, values: object, like: object, *index: object, own_dtype=False
) -> object:
    """values[index] of a nested table (slopes, ids, a bias): plain indexing for Python ints;
    for index arrays the table as one xp array in like's dtype (`constant`), indexed at once."""
    if type(like) is float and all(type(i) is int for i in index):  # the ground truth's cells
        for i in index:
            values = values[i]
        return values
    xp = xp_of(like, *index)
    if xp is None:
        for i in index:
            values = values[i]
        return values
    like = getattr(like, "value", like) if type(like).__name__ == "Dual" else like
    return constant(owner, name, values, xp, like, own_dtype=own_dtype)[index]


def clamp(x: object, lo: int, hi: int) -> object:
    """x cut to [lo, hi]: min/max for a Python number, xp.clip for an array."""
    xp = module_of(x)
    return min(max(x, lo), hi) if xp is None else xp.clip(x, lo, hi)


def cells(q_idx: object, kv_idx: object) -> object:
    """True at every (q_idx, kv_idx) cell: a mask that broadcasts to both index arrays."""
    return (q_idx == q_idx) & (kv_idx == kv_idx)


def spread(seen: object, q_idx: object, kv_idx: object, xp: object) -> object:
    """A mask_mod's answer on index arrays as bools at every (q_idx, kv_idx) cell (a rule that
    reads one index only, or none, answers with fewer axes)."""
    shape = tuple(getattr(seen, "shape", (None,)))
    axes = [tuple(getattr(x, "shape", ())) for x in (q_idx, kv_idx)]
    if None not in shape and tuple(xp.broadcast_shapes(shape, *axes)) == shape:
        return seen
    return seen & cells(q_idx, kv_idx)


__all__ = [
    "cells",
    "clamp",
    "constant",
    "entry",
    "is_torch",
    "module_of",
    "spread",
    "xp_of",
]

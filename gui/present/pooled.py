"""A large matrix as a screen-sized image: each pixel the largest-magnitude cell of its block.

A 4096-token step has 16.7 M cells; a heatmap on screen has about a million pixels, so drawing
every cell costs seconds and shows nothing more. Above MAX_SIDE cells along an axis, that axis
is max-pooled: a block of `block` cells becomes one pixel holding the cell of largest magnitude
(sign kept), so one sharp weight or one large score stays visible where a stride or a mean would
lose it. A masked cell (-inf) wins only when its whole block is masked (grey); NaN anywhere in a
block makes the pixel NaN. The cells themselves are never copied: hover and cell numbers read
the exact cell from the step's own array.
"""

from __future__ import annotations

import math

import numpy as np

MAX_SIDE = 1024  # an axis longer than this is pooled (an image fits a screen)


def block_for(n: int) -> int:
    """Cells per pixel along an axis of `n` cells (1: drawn cell by cell)."""
    return max(1, math.ceil(n / MAX_SIDE))


def _pool_axis(m: np.ndarray, block: int, axis: int, op) -> np.ndarray:
    """`op` (np.maximum or np.minimum) over blocks of `block` along `axis` (0 or 1)."""
    if block == 1:
        return m
    n = m.shape[axis]
    if n % block:  # repeat the last cell: it changes neither a max nor a min
        extra = block - n % block
        pad = [(0, 0), (0, 0)]
        pad[axis] = (0, extra)
        m = np.pad(m, pad, mode="edge")
    if axis == 0:  # rows: a reshape, reduced over its middle axis (contiguous, fast)
        rows, cols = m.shape
        return op.reduce(m.reshape(rows // block, block, cols), axis=1)
    out = m[:, 0::block].copy()  # columns: strided slices folded in one by one
    for k in range(1, block):
        op(out, m[:, k::block], out=out)
    return out


def pool(matrix: np.ndarray, blocks: tuple[int, int]) -> np.ndarray:
    """The (rows / br, cols / bc) image of `matrix` (rows, cols): per block, the cell of largest
    magnitude with its sign; -inf only where every cell of the block is -inf."""
    br, bc = blocks
    m = np.asarray(matrix)
    if (br, bc) == (1, 1):
        return m
    if not np.min(m) < 0:  # nothing negative (weights; or NaN): the largest is the maximum
        return maximum(m, blocks)
    hi = maximum(m, blocks)  # (R/br, C/bc)
    lo = _minimum(m, blocks)  # (R/br, C/bc)
    mixed = np.isneginf(lo) & ~np.isneginf(hi)  # blocks with masked and visible cells
    if mixed.any():  # their minimum again, the masked (-inf) cells left out
        lo[mixed] = _visible_minimum(m, blocks, *np.nonzero(mixed))
    # the block's (visible) minimum when it outweighs the maximum; a wholly masked block's
    # maximum is -inf, its minimum +inf
    return np.where(np.isfinite(lo) & (-lo > np.abs(hi)), lo, hi)


def _visible_minimum(
    m: np.ndarray, blocks: tuple[int, int], a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """The smallest cell other than -inf of blocks (a[n], b[n]) (+inf where there is none): read
    block by block, so a causal mask's diagonal costs its blocks only, not the whole matrix."""
    br, bc = blocks
    rows = np.minimum(a[:, None] * br + np.arange(br), m.shape[0] - 1)  # (n, br): the last
    cols = np.minimum(b[:, None] * bc + np.arange(bc), m.shape[1] - 1)  # cell repeats (padding)
    cells = m[rows[:, :, None], cols[:, None, :]]  # (n, br, bc)
    return np.where(np.isneginf(cells), np.inf, cells).min(axis=(1, 2))


def _minimum(m: np.ndarray, blocks: tuple[int, int]) -> np.ndarray:
    """The smallest cell of each block."""
    return _pool_axis(_pool_axis(m, blocks[0], 0, np.minimum), blocks[1], 1, np.minimum)


def maximum(matrix: np.ndarray, blocks: tuple[int, int]) -> np.ndarray:
    """The largest cell of each block (-inf where the whole block is -inf: masked)."""
    return _pool_axis(
        _pool_axis(np.asarray(matrix), blocks[0], 0, np.maximum), blocks[1], 1, np.maximum
    )


def blocks_for(shape: tuple[int, int]) -> tuple[int, int]:
    """(rows per pixel, columns per pixel) for a matrix of `shape`."""
    return block_for(shape[0]), block_for(shape[1])


def axis_note(block: int, why: bool = False) -> str:
    """' (4 cells a pixel)' after an axis's name when it is pooled ('' when drawn whole); `why`
    adds what the pixel shows."""
    if block == 1:
        return ""
    return f" ({block} cells a pixel{', the largest |value| drawn' if why else ''})"

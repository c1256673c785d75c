"""What a NumPy kernel needs of a flex_attention call's mods: array forms and the tiles to visit.

`FlexPlan` holds the score_mod, the mask_mod (of the block mask) and the score_mod's derivative
as functions of NumPy index arrays: a variant's array forms (scratch.variants), or for a user's
own plain-Python function that same function asked cell by cell (correct, slow: one Python call
per cell of every tile computed). `key_tiles` reads the block mask's tiles, so a kernel visits
only the key blocks some query of its rows may see, and skips the mask on tiles marked full.
`create_block_mask` is scratch.create_block_mask's NumPy twin (same BlockMask, same tiles),
evaluating the mask by row bands of array operations instead of one Python call per cell.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..flex import BlockMask, block_mask_sizes, modified
from ..variants.arrays import array_form
from ..variants.dual import derivative

Tile = tuple[int, int, bool]  # keys [j0, j1) and whether every cell of the tile is seen


def _cells(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The index arrays broadcast to one shape (the cells a cell-by-cell mod is asked about)."""
    return np.broadcast_arrays(*(np.asarray(a) for a in arrays))


def cellwise_mask(mask_mod: Callable[..., bool]) -> Callable[..., np.ndarray]:
    """A user's plain mask_mod as an array form: one Python call per cell (slow, exact)."""

    def array(b, h, q_idx, kv_idx, xp=np):
        b, h, q_idx, kv_idx = _cells(b, h, q_idx, kv_idx)
        seen = np.empty(b.shape, dtype=bool)
        for c in np.ndindex(b.shape):
            seen[c] = bool(mask_mod(int(b[c]), int(h[c]), int(q_idx[c]), int(kv_idx[c])))
        return seen

    return array


def cellwise_score(score_mod: Callable[..., float], grad: bool) -> Callable[..., np.ndarray]:
    """A user's plain score_mod (grad: its derivative, by dual numbers) asked cell by cell."""

    def array(score, b, h, q_idx, kv_idx, xp=np):
        score, b, h, q_idx, kv_idx = _cells(score, b, h, q_idx, kv_idx)
        out = np.empty(score.shape, dtype=score.dtype)
        for c in np.ndindex(score.shape):
            cell = (float(score[c]), int(b[c]), int(h[c]), int(q_idx[c]), int(kv_idx[c]))
            out[c] = derivative(score_mod, *cell) if grad else modified(score_mod, *cell)
        return out

    return array


class FlexPlan:
    """The mods of one call as NumPy functions, the block mask's tiles, the sinks."""

    def __init__(self, score_mod, block_mask: BlockMask | None, sinks: list[float] | None):
        self.block_mask = block_mask
        self.score = self.grad = self.mask = None
        if score_mod is not None:
            self.score = array_form(score_mod, "score") or cellwise_score(score_mod, False)
            self.grad = array_form(score_mod, "grad") or cellwise_score(score_mod, True)
        if block_mask is not None:
            mask_mod = block_mask.mask_mod
            self.mask = array_form(mask_mod, "mask") or cellwise_mask(mask_mod)
        self.sinks = None if sinks is None else np.asarray(sinks, dtype=np.float64)  # (H,)
        self.record: list | None = None  # a list: every tile computed is appended (tests, bench)

    def key_tiles(self, b: int, h: int, i0: int, i1: int, S: int, width: int) -> list[Tile]:
        """Tiles of at most `width` keys that rows i0:i1 of (b, h) must compute, in key order."""
        if self.block_mask is None:
            return [(j0, min(j0 + width, S), True) for j0 in range(0, S, width)]
        bm = self.block_mask
        (bq, bk), (mb, mh) = bm.block_size, bm.shape[:2]
        rows = bm.kv_blocks[b if mb > 1 else 0][h if mh > 1 else 0][i0 // bq : (i1 - 1) // bq + 1]
        listed: dict[int, int] = {}  # key block -> how many of the query blocks mark it full
        for tiles in rows:
            for kb, full in tiles:
                listed[kb] = listed.get(kb, 0) + int(full)
        found: list[Tile] = []
        for kb in sorted(listed):  # runs of consecutive key blocks, cut into tiles of `width`
            full = listed[kb] == len(rows)
            for j0 in range(kb * bk, min(kb * bk + bk, S), width):
                j1 = min(j0 + width, kb * bk + bk, S)
                last = found[-1] if found else None
                if last and last[1] == j0 and j1 - last[0] <= width:
                    found[-1] = (last[0], j1, last[2] and full)
                else:
                    found.append((j0, j1, full))
        return found

    def apply(self, s: np.ndarray, b: int, h: int, i0: int, j0: int, full: bool) -> None:
        """In place on a tile of scaled scores s (rows i0.., keys j0..): score_mod, then mask."""
        if self.record is not None:
            self.record.append((b, h, i0, i0 + s.shape[0], j0, j0 + s.shape[1]))
        if self.score is None and (full or self.mask is None):
            return
        rows = np.arange(i0, i0 + s.shape[0])[:, None]  # (n, 1)
        cols = np.arange(j0, j0 + s.shape[1])[None, :]  # (1, w)
        with np.errstate(all="ignore"):  # masked cells may hold anything: they become -inf
            if self.score is not None:
                np.copyto(s, self.score(s, b, h, rows, cols, np), casting="same_kind")
            if not full and self.mask is not None:
                np.copyto(s, -np.inf, where=np.logical_not(self.mask(b, h, rows, cols, np)))

    def score_grad(self, raw: np.ndarray, b: int, h: int, i0: int, j0: int) -> np.ndarray | float:
        """d score_mod / d score on a tile of raw scaled scores (1 without a score_mod)."""
        if self.grad is None:
            return 1.0
        rows = np.arange(i0, i0 + raw.shape[0])[:, None]
        cols = np.arange(j0, j0 + raw.shape[1])[None, :]
        with np.errstate(all="ignore"):
            return self.grad(raw, b, h, rows, cols, np)

    def sink(self, h: int) -> float | None:
        """Head h's sink logit (None without sinks)."""
        return None if self.sinks is None else float(self.sinks[h])


def create_block_mask(
    mask_mod: Callable[..., bool],
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    BLOCK_SIZE: int | tuple[int, int] = 128,
) -> BlockMask:
    """scratch.create_block_mask by NumPy row bands: the same BlockMask (B or H None: 1)."""
    nb, nh, L, S, bq, bk = block_mask_sizes(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE)
    mask = array_form(mask_mod, "mask") or cellwise_mask(mask_mod)
    starts = np.arange(0, S, bk)
    cols = np.arange(S)[None, :]  # (1, S)

    def tiles(b: int, h: int, qb: int) -> list[tuple[int, bool]]:
        rows = np.arange(qb * bq, min(qb * bq + bq, L))[:, None]  # (n, 1)
        seen = np.broadcast_to(mask(b, h, rows, cols, np), (len(rows), S))  # (n, S)
        some = np.logical_or.reduceat(seen, starts, axis=1).any(axis=0)  # (key blocks,)
        every = np.logical_and.reduceat(seen, starts, axis=1).all(axis=0)
        return [(int(kb), bool(every[kb])) for kb in np.flatnonzero(some)]

    kv_blocks = [
        [[tiles(b, h, qb) for qb in range(-(-L // bq))] for h in range(nh)] for b in range(nb)
    ]
    return BlockMask(mask_mod, (nb, nh, L, S), (bq, bk), kv_blocks)


__all__ = ["FlexPlan", "cellwise_mask", "cellwise_score", "create_block_mask"]

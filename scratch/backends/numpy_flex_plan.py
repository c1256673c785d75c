"""What a NumPy kernel needs of a flex_attention call's mods: array forms and the tiles to visit.

`FlexPlan` holds the score_mod, the mask_mod (of the block mask) and the score_mod's derivative
as functions of NumPy index arrays: a variant's array forms (scratch.variants), or for a user's
own plain-Python function that same function asked cell by cell (correct, slow: one Python call
per cell of every tile computed). `key_tiles` reads the block mask's tiles, so a kernel visits
only the key blocks some query of its rows may see, and skips the mask on tiles marked full.
`create_block_mask` is scratch.create_block_mask's NumPy twin (same tiles, full flags), evaluating
the mask by row bands of array operations instead of one Python call per cell; it keeps what it
found on the partial tiles (`ArrayBlockMask.unseen`, up to UNSEEN_BYTES), so a kernel masks such
a tile with one np.copyto instead of asking the mask_mod again on every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scratch.flex.forward import BlockMask, block_mask_sizes, modified, seen_by
from scratch.variants.base import array_form
from scratch.variants.dual import derivative

# rows r0:r1 and keys c0:c1 of a tile that are not all seen; True: ask the mask, False: none seen
Part = tuple[int, int, int, int, bool]
Tile = tuple[int, int, tuple[Part, ...]]  # keys [j0, j1) and its parts not all seen
UNSEEN_BYTES = 64 << 20  # create_block_mask keeps the partial tiles' cells up to this size
TILE_BYTES = 64 << 20  # ... and the kernels' tiles made of them, up to this size
BAND_SHAPES = 8  # distinct band cells shared between chunks (a window has one)


@dataclass(frozen=True)
class ArrayBlockMask(BlockMask):
    """A BlockMask that also keeps which cells are not seen: per partial tile (b, h, qb, kb)
    from create_block_mask (b < B, h < H of the mask: a broadcast b or h asks mask_mod), and
    per kernel tile (b, h, i0, i1, j0, j1) as the kernels first assemble them."""

    unseen: dict = field(default_factory=dict, repr=False)  # (b, h, qb, kb) -> bool (bq, bk)
    tiles: dict = field(default_factory=dict, repr=False)  # (b, h, i0, i1, j0, j1) -> bool
    room: list = field(default_factory=lambda: [TILE_BYTES], repr=False)  # bytes left for tiles


def _cells(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The index arrays broadcast to one shape (the cells a cell-by-cell mod is asked about)."""
    return np.broadcast_arrays(*(np.asarray(a) for a in arrays))


def cellwise_mask(mask_mod: Callable[..., bool]) -> Callable[..., np.ndarray]:
    """A user's plain mask_mod as an array form: one Python call per cell (slow, exact)."""

    def array(b, h, q_idx, kv_idx, xp=np):
        b, h, q_idx, kv_idx = _cells(b, h, q_idx, kv_idx)
        seen = np.empty(b.shape, dtype=bool)
        for c in np.ndindex(b.shape):
            seen[c] = seen_by(mask_mod, int(b[c]), int(h[c]), int(q_idx[c]), int(kv_idx[c]))
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
        self.kept_tiles = isinstance(block_mask, ArrayBlockMask)  # its cells kept, and tiles
        self.sinks = None if sinks is None else np.asarray(sinks, dtype=np.float64)  # (H,)
        self.record: list | None = None  # a list: every tile computed is appended (tests, bench)

    def key_tiles(self, b: int, h: int, i0: int, i1: int, S: int, width: int) -> list[Tile]:
        """Tiles of at most `width` keys that rows i0:i1 of (b, h) must compute, in key order,
        each with its parts not fully seen (per block-mask tile: ask the mask, or none seen)."""
        if self.block_mask is None:
            return [(j0, min(j0 + width, S), ()) for j0 in range(0, S, width)]
        if self.kept_tiles:  # planned once per block mask and chunk, kept with the block mask
            key = ("plan", b, h, i0, i1, width)
            found = self.block_mask.tiles.get(key)
            if found is None:
                found = self.block_mask.tiles[key] = self._key_tiles(b, h, i0, i1, S, width)
            return found
        return self._key_tiles(b, h, i0, i1, S, width)

    def _key_tiles(self, b: int, h: int, i0: int, i1: int, S: int, width: int) -> list[Tile]:
        """key_tiles, worked out from the block mask's lists."""
        bm = self.block_mask
        (bq, bk), (mb, mh) = bm.block_size, bm.shape[:2]
        first = i0 // bq
        rows = bm.kv_blocks[b if mb > 1 else 0][h if mh > 1 else 0][first : (i1 - 1) // bq + 1]
        # each query block's rows within i0:i1 and its key blocks: kb -> every cell seen
        bands = [
            (max(i0, (first + n) * bq), min(i1, (first + n) * bq + bq), dict(tiles))
            for n, tiles in enumerate(rows)
        ]
        spans: list[tuple[int, int]] = []  # runs of listed key blocks, cut at `width` keys
        for kb in sorted({kb for *_, listed in bands for kb in listed}):
            for j0 in range(kb * bk, min(kb * bk + bk, S), width):
                j1 = min(j0 + width, kb * bk + bk, S)
                if spans and spans[-1][1] == j0 and j1 - spans[-1][0] <= width:
                    spans[-1] = (spans[-1][0], j1)
                else:
                    spans.append((j0, j1))
        return [(j0, j1, self._parts(bands, j0, j1, bk)) for j0, j1 in spans]

    @staticmethod
    def _parts(bands: list, j0: int, j1: int, bk: int) -> tuple[Part, ...]:
        """The rectangles of keys j0:j1 that a query band does not see whole (merged along keys)."""
        parts: list[Part] = []
        for r0, r1, listed in bands:
            for kb in range(j0 // bk, (j1 - 1) // bk + 1):
                c0, c1 = max(j0, kb * bk), min(j1, kb * bk + bk)
                full = listed.get(kb)
                if full:
                    continue
                ask = full is not None  # listed but partial: ask the mask; absent: none seen
                last = parts[-1] if parts else None
                if last and last[:2] == (r0, r1) and last[3] == c0 and not (ask or last[4]):
                    parts[-1] = (r0, r1, last[2], c1, ask)
                else:
                    parts.append((r0, r1, c0, c1, ask))
        return tuple(parts)

    def apply(self, s: np.ndarray, b: int, h: int, i0: int, j0: int, parts: tuple) -> None:
        """In place on a tile of scaled scores s (rows i0.., keys j0..): score_mod, then the
        mask on the parts key_tiles gave (-inf where a part sees nothing)."""
        self.visit(b, h, i0, j0, s.shape)
        with np.errstate(all="ignore"):  # masked cells may hold anything: they become -inf
            if self.score is not None:
                rows = np.arange(i0, i0 + s.shape[0])[:, None]  # (n, 1)
                cols = np.arange(j0, j0 + s.shape[1])[None, :]  # (1, w)
                np.copyto(s, self.score(s, b, h, rows, cols, np), casting="same_kind")
            if parts:
                # without a score_mod the scores are finite: add 0 / -inf (a SIMD add, 30x
                # cheaper than a masked copy); a score_mod's inf or NaN must be overwritten
                bias = self.score is None
                unseen = self.tile_unseen(b, h, i0, j0, s, parts, "bias" if bias else "cells")
                if unseen is not None:  # the whole tile's mask in one pass
                    if bias:
                        np.add(s, unseen, out=s)
                    else:
                        np.copyto(s, -np.inf, where=unseen)
                    return
            for r0, r1, c0, c1, ask in parts:
                part = s[r0 - i0 : r1 - i0, c0 - j0 : c1 - j0]
                if not ask:
                    part.fill(-np.inf)
                    continue
                kept = self.kept(b, h, r0, r1, c0, c1)
                if kept is not None:  # the block mask's own record of this tile
                    np.copyto(part, -np.inf, where=kept)
                    continue
                rows, cols = np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :]
                np.copyto(part, -np.inf, where=np.logical_not(self.mask(b, h, rows, cols, np)))

    def kept(self, b: int, h: int, r0: int, r1: int, c0: int, c1: int) -> np.ndarray | None:
        """The unseen cells of rows r0:r1, keys c0:c1 (inside one block-mask tile) if the block
        mask kept them for this very (b, h), else None."""
        if not self.kept_tiles:
            return None
        (bq, bk) = self.block_mask.block_size
        qb, kb = r0 // bq, c0 // bk
        tile = self.block_mask.unseen.get((b, h, qb, kb))
        if tile is None:
            return None
        return tile[r0 - qb * bq : r1 - qb * bq, c0 - kb * bk : c1 - kb * bk]

    def keep(self, b, h, i0, j0, s, parts) -> np.ndarray | None:
        """A tile's 0/1 multiplier for exp(scores) (1: seen), in s's dtype, when the block mask
        kept the tile's cells and there is no score_mod (its values at unseen cells could
        overflow); None otherwise (then `apply` masks the tile with -inf)."""
        if self.score is not None or not parts:
            return None
        return self.tile_unseen(b, h, i0, j0, s, parts, "keep")

    def bands(self, b: int, h: int, i0: int, i1: int, S: int, dtype: np.dtype):
        """Rows i0:i1 cut into runs (r0, r1, band) when some of them form a band; None when none
        do, or the block mask is not an ArrayBlockMask (nowhere to keep the runs) or has
        tiles that are not square. Kept with the block mask.

        band (lo, W, cells): the whole query blocks of r0:r1, two or more, each see W keys
        starting one block further for each block (a window's band): block t sees keys
        lo + t * bq .. + W; cells (T, W, bq), keys first, is its keep array (1 / 0 in dtype;
        without a score_mod) or its unseen bools (with one), (1, W, bq) when every block's cells are
        alike (a window's are). band None: rows the tiles compute, one query block at a time
        (or blocks that see the same key blocks) so that no tile outside the block mask is
        computed: a window's first blocks, which see fewer keys, a block alone."""
        bm = self.block_mask
        if not self.kept_tiles or bm.block_size[0] != bm.block_size[1]:
            return None
        kind = "cells" if self.score is not None else "keep"
        key = ("band", b, h, i0, i1, kind, np.dtype(dtype).str)
        if key not in bm.tiles:
            bm.tiles[key] = self._bands(b, h, i0, i1, S, np.dtype(dtype), kind)
        return bm.tiles[key]

    def _bands(self, b, h, i0, i1, S, dtype, kind):
        """bands(), worked out from the block mask's lists and kept cells."""
        bm = self.block_mask
        n, (mb, mh) = bm.block_size[0], bm.shape[:2]
        lists = bm.kv_blocks[b if mb > 1 else 0][h if mh > 1 else 0]
        runs: list[list[int]] = []  # [first block, end block, its first key block, key blocks]
        for qb in range(-(-i0 // n), i1 // n):  # the whole query blocks within i0:i1
            kbs = [kb for kb, _ in lists[qb]]
            m = len(kbs)
            if not m or kbs != list(range(kbs[0], kbs[0] + m)) or (kbs[0] + m) * n > S:
                continue  # no keys, a gap, or the last key block cut short: tiles
            last = runs[-1] if runs else None
            if last and last[1] == qb and last[2] + qb - last[0] == kbs[0] and last[3] == m:
                last[1] = qb + 1
            else:
                runs.append([qb, qb + 1, kbs[0], m])
        bands = {}  # first query block of a band -> (its end block, (lo, W, cells))
        for qb0, qb1, kb0, m in runs:
            if qb1 - qb0 > 1:  # a block alone stays with the tiles
                cells = self._band_cells(lists, b, h, qb0, qb1, m, dtype, kind)
                bands[qb0] = (qb1, (kb0 * n, m * n, cells))
        if not bands:
            return None
        # the other rows by query block, so the tiles compute only each block's own key blocks
        # (adjacent blocks that see the same key blocks go together)
        segments: list[tuple] = []  # (r0, r1, band) or (r0, r1, None, the rows' key blocks)
        qb = i0 // n
        while qb * n < i1:
            if qb in bands:
                qb1, band = bands[qb]
                segments.append((qb * n, qb1 * n, band))
                qb = qb1
                continue
            r0, r1, kbs = max(i0, qb * n), min(i1, qb * n + n), [kb for kb, _ in lists[qb]]
            last = segments[-1] if segments else None
            if last and last[2] is None and last[1] == r0 and last[3] == kbs:
                segments[-1] = (last[0], r1, None, kbs)
            else:
                segments.append((r0, r1, None, kbs))
            qb += 1
        return tuple(segment[:3] for segment in segments)

    def _band_cells(self, lists, b, h, qb0, qb1, m, dtype, kind) -> np.ndarray:
        """The cells of query blocks qb0:qb1's band of m key blocks each, keys first as band_pass
        lays out its scores: (T, W, bq), or (1, W, bq) when alike for every block (one array
        shared by every chunk that has it):
        from the block mask's kept cells, or where it kept none for this (b, h) (a broadcast
        block mask's other heads) from its mask_mod."""
        n = self.block_mask.block_size[0]
        unseen = np.zeros((qb1 - qb0, n, m * n), dtype=bool)  # (T, bq, W)
        for t in range(qb1 - qb0):
            r0 = (qb0 + t) * n
            for c, (kb, full) in enumerate(lists[qb0 + t]):
                if full:
                    continue
                kept = self.kept(b, h, r0, r0 + n, kb * n, kb * n + n)
                if kept is None:
                    rows, cols = np.arange(r0, r0 + n)[:, None], np.arange(kb * n, kb * n + n)
                    kept = np.logical_not(self.mask(b, h, rows, cols[None, :], np))
                unseen[t, :, c * n : c * n + n] = kept
        if (unseen == unseen[:1]).all():
            unseen = unseen[:1]  # (1, bq, W): read from cache by every block, not T copies
        unseen = np.ascontiguousarray(unseen.transpose(0, 2, 1))  # (T or 1, W, bq): band_pass's
        cells = unseen if kind == "cells" else np.where(unseen, dtype.type(0), dtype.type(1))
        shared = self.block_mask.tiles.setdefault(("band cells", kind, dtype.str), [])
        for other in shared:
            if other.shape == cells.shape and np.array_equal(other, cells):
                return other
        if len(shared) < BAND_SHAPES:
            shared.append(cells)
        return cells

    def visit(self, b: int, h: int, i0: int, j0: int, shape: tuple[int, int]) -> None:
        """Note a tile computed (when `record` is a list: the tests and the bench count them)."""
        if self.record is not None:
            self.record.append((b, h, i0, i0 + shape[0], j0, j0 + shape[1]))

    def tile_unseen(self, b, h, i0, j0, s, parts, kind) -> np.ndarray | None:
        """The unseen cells of a whole kernel tile as kind "bias" (0 / -inf in s's dtype),
        "keep" (1 / 0 in s's dtype) or "cells" (bools), assembled once from the kept
        block-mask tiles and kept in the block mask (None: not kept, or a part must ask the
        mask_mod)."""
        if not self.kept_tiles:
            return None
        n, w = s.shape
        key = (b, h, i0, i0 + n, j0, j0 + w, kind, s.dtype.str)
        tiles = self.block_mask.tiles
        if key in tiles:
            return tiles[key]
        unseen = np.zeros((n, w), dtype=bool)
        for r0, r1, c0, c1, ask in parts:
            kept = self.kept(b, h, r0, r1, c0, c1) if ask else True
            if kept is None:
                return None
            unseen[r0 - i0 : r1 - i0, c0 - j0 : c1 - j0] = kept
        if kind != "cells":  # 0 / -inf to add, or 1 / 0 to multiply
            fill, other = (-np.inf, 0.0) if kind == "bias" else (0.0, 1.0)
            unseen = np.where(unseen, s.dtype.type(fill), s.dtype.type(other))
        room = self.block_mask.room
        if unseen.nbytes <= room[0]:
            room[0] -= unseen.nbytes
            tiles[key] = unseen
        return unseen

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
    mask_mod: Callable[..., bool], B: int | None, H: int | None, Q_LEN: int, KV_LEN: int,
    BLOCK_SIZE: int | tuple[int, int] = 128,
) -> BlockMask:  # fmt: skip
    """scratch.create_block_mask by NumPy row bands: the same BlockMask (B or H None: 1)."""
    nb, nh, L, S, bq, bk = block_mask_sizes(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE)
    mask = array_form(mask_mod, "mask") or cellwise_mask(mask_mod)
    starts = np.arange(0, S, bk)
    cols = np.arange(S)[None, :]  # (1, S)
    unseen: dict = {}
    room = [UNSEEN_BYTES]  # bytes left for kept partial tiles

    def tiles(b: int, h: int, qb: int) -> list[tuple[int, bool]]:
        rows = np.arange(qb * bq, min(qb * bq + bq, L))[:, None]  # (n, 1)
        seen = np.broadcast_to(mask(b, h, rows, cols, np), (len(rows), S))  # (n, S)
        some = np.logical_or.reduceat(seen, starts, axis=1).any(axis=0)  # (key blocks,)
        every = np.logical_and.reduceat(seen, starts, axis=1).all(axis=0)
        for kb in np.flatnonzero(some & ~every):  # partial tiles: keep their unseen cells
            cells = ~seen[:, kb * bk : kb * bk + bk]
            if cells.nbytes <= room[0]:
                room[0] -= cells.nbytes
                unseen[b, h, qb, int(kb)] = cells
        return [(int(kb), bool(every[kb])) for kb in np.flatnonzero(some)]

    kv_blocks = [
        [[tiles(b, h, qb) for qb in range(-(-L // bq))] for h in range(nh)] for b in range(nb)
    ]
    return ArrayBlockMask(mask_mod, (nb, nh, L, S), (bq, bk), kv_blocks, unseen)


__all__ = ["ArrayBlockMask", "FlexPlan", "cellwise_mask", "cellwise_score", "create_block_mask"]

"""The NumPy backend's output-only kernel: query chunks x key blocks, the (L, S) scores never built.

For each query chunk it streams over the key blocks the chunk may see (causal: blocks above
the diagonal are skipped) and keeps a running output (chunk, Ev) and a running denominator
(chunk,), so the extra memory is O(chunk * block). Two passes:

- fast: no max. A per-row bound |q_i| * max_j |k_j| >= every score of row i (Cauchy-Schwarz)
  says whether exp can overflow; rows whose bound is too large subtract (bound - LIMIT), the
  others nothing. One pass per tile: scores, exp, p @ v and p @ 1. Rows whose denominator
  ends below 1 (terms may have underflowed) or that overflowed anyway (float masks may add
  large values) are redone by the safe pass.
- safe: online softmax with a running max, rescaling what came before (also dropout).

With `options.return_lse` each row's log-sum-exp comes from what the passes already hold, no
extra pass over the scores: offset + log(denominator) from the fast pass, running max +
log(denominator) from the safe one (times ln 2 where exp2 was used: the running values are then
in base 2), -inf where the denominator is 0 (every key masked).

A flex_attention call (numpy_flex.py) gives a `plan` (numpy_flex_plan.FlexPlan) instead of a
mask: each query chunk then visits only the key tiles its block mask lists, applies the
score_mod and (on the parts whose block-mask tiles are not full) the mask_mod; a learned sink enters
both passes as a key seen by every row with that score and no value (the fast pass starts the
denominator at exp(sink - offset), the safe pass starts its running max at the sink with
denominator 1). In the fast pass a chunk's rows go by the runs FlexPlan.bands gives: query
blocks that form a band (each sees W keys starting one block further) take `band_pass`,
batched matmuls over strided views of k and v, BAND_ROWS rows per step; the others
`tile_pass`, tile by tile. A band's exp that overflows shows in its rows' acc (not finite):
those rows go to the safe pass, as rows whose denominator ends below 1 do.

On a host where NumPy has SIMD exp2 (AVX-512: NumPy's float32 exp2 costs half its exp),
scale * log2(e) is folded into q and exp2 is used; elsewhere scale alone and exp. Detected
once (`exp_choice`) and recorded in the Result's `detail`. Large problems spread query
chunks over one thread per core (the calling thread is one of them, each takes the next chunk
when it is free), with OpenBLAS held to one thread meanwhile. Each worker folds the scale into
its chunk of q in a buffer it keeps, and reads k^T as k[j0:j1].T: no per-call copy of q or k.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import math
import threading

import numpy as np

from scratch.backends.numpy_chunk_rows import finish, log_sum_exp, row_norms, safe_ranges
from scratch.backends.numpy_threads import cores, share, single_threaded_blas
from scratch.core.options import Options
from scratch.ops.plan import kv_index
from scratch.variants import Causal

# Query chunk and key block (how they were measured: docs/notes/numpy_chunked.md).
QUERY_CHUNK = 1024
KEY_BLOCK = 256
PARALLEL_MIN = 1 << 22  # L * S * batch from which query chunks go to worker threads
BAND_ROWS = 1024  # query rows per step of band_pass (their scores: 1.5 MiB at W = 384 float32)
LIMIT_LOG2 = 64.0  # largest exponent (base 2) the fast pass lets exp reach: 2^64 * S is finite
# Buffer sets each thread keeps, O(chunk * (block + E)) each: two, so calls that alternate
# between two shapes (window and global layers) each find theirs (docs/notes/numpy_chunked.md).
TILE_SETS = 2
_FAST_PASS = contextvars.ContextVar("fast_pass", default=True)
_LOCAL = threading.local()  # each thread's buffers, kept between calls


@contextlib.contextmanager
def fast_pass(on: bool):
    """Within the block, run with (True, the default) or without the no-max fast pass."""
    token = _FAST_PASS.set(bool(on))
    try:
        yield
    finally:
        _FAST_PASS.reset(token)


@functools.cache
def exp_choice() -> tuple[str, str]:
    """("exp2" or "exp", why): exp2 where NumPy has its SIMD (SVML, AVX512_SKX) float32 exp2."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    if features.get("AVX512_SKX"):
        return "exp2", "exp2 with scale*log2(e) folded into q (NumPy reports AVX512_SKX)"
    return "exp", "exp (no AVX512_SKX: NumPy's float32 exp2 has no SIMD path here)"


def kernel_detail(dtype: np.dtype, float_mask: bool) -> tuple[str, str]:
    """The exponential this call uses and the sentence recorded in the Result (float_mask: a
    float mask or a score_mod, which must see the scores in natural units)."""
    name, why = exp_choice()
    if name == "exp2" and (dtype != np.float32 or float_mask):
        reason = "float64" if dtype != np.float32 else "a float mask or score_mod (in base e units)"
        return "exp", f"exp ({reason}; exp2 is used for float32 on this host)"
    return name, why


class _Tiles:
    """Buffers for one worker, reused across every tile of every problem it is given."""

    def __init__(self, chunk: int, block: int, width: int, dtype: np.dtype, features: int):
        self.block = block
        self.q_buf = np.empty((chunk, features), dtype=dtype)  # the chunk's q * scale
        self.q_abs = np.empty((chunk, features), dtype=dtype)  # |q * scale| (underflow test)
        self.q_tiny = np.empty((chunk, features), dtype=bool)
        self.s_buf = np.empty((chunk, block), dtype=dtype)  # scores of one tile
        self.tile = np.empty((chunk, width), dtype=dtype)  # one tile's p @ v
        self.acc = np.empty((chunk, width), dtype=dtype)  # running output (not yet divided)
        self.ones = np.ones(block, dtype=dtype)  # p @ 1 = the tile's row sums
        self.m_run, self.m_new, self.base, self.alpha, self.denom, self.part = (
            np.empty(chunk, dtype=dtype) for _ in range(6)
        )

    def fold(self, q_rows: np.ndarray, factor: float) -> tuple[np.ndarray, float | None]:
        """(q_rows * factor, None) in this worker's buffer, or (q_rows, factor) when the product
        overflows, or underflows where q @ k^T * factor would not: then each tile is scaled."""
        n = len(q_rows)
        folded = self.q_buf[:n]
        with np.errstate(over="ignore", under="ignore"):
            np.multiply(q_rows, folded.dtype.type(factor), out=folded)  # (n, E)
        if abs(factor) >= 1.0:  # max and min are NaN or +-inf exactly when some element is
            fits = bool(np.isfinite(folded.max()) and np.isfinite(folded.min()))
        else:  # |q * factor|: its max is NaN or inf as above; below tiny only where q was 0
            magnitude = np.abs(folded, out=self.q_abs[:n])
            fits = bool(np.isfinite(magnitude.max()))
            tiny = np.finfo(folded.dtype).tiny
            if fits and magnitude.min() < tiny:  # were they all zeros in q? (count them)
                below = np.less(magnitude, tiny, out=self.q_tiny[:n])
                fits = np.count_nonzero(below) == q_rows.size - np.count_nonzero(q_rows)
        return (folded, None) if fits else (q_rows, factor)

    def bind(
        self, q_rows, i0, k_b, v_b, mask_b, causal, scale, offset, exp, plan=None, where=(0, 0),
        sink=None,
    ) -> _Tiles:  # fmt: skip
        """Work on rows i0:i0+n of one (batch, head) problem: q_rows (n, E), k (S, E), v (S, Ev).

        causal is the Causal variant (None: not causal); scale is None when
        q_rows already carries it, else each tile of scores is scaled;
        offset (n,) is subtracted from the fast pass's scores (None: nothing); exp is np.exp
        or np.exp2, matching what q carries. plan: a flex call's FlexPlan (then mask_b and
        causal are None), where = (b, h) for its mods, sink = h's sink logit in exp's base."""
        self.q, self.first, self.k, self.v, self.mask = q_rows, i0, k_b, v_b, mask_b
        self.causal, self.S, self.scale = causal, k_b.shape[0], scale
        self.offset, self.exp = offset, exp
        self.plan, self.where, self.sink = plan, where, sink
        self.band_buf = getattr(self, "band_buf", None)  # band_pass's scores, grown as needed
        self.band_ones = getattr(self, "band_ones", None)
        return self

    def scores(self, i0: int, i1: int, j0: int, j1: int) -> np.ndarray:
        """The tile of scaled scores of rows i0:i1 and keys j0:j1, in this worker's buffer."""
        s = self.s_buf[: i1 - i0, : j1 - j0]
        q_rows = self.q[i0 - self.first : i1 - self.first]
        np.matmul(q_rows, self.k[j0:j1].T, out=s)  # (n, E) @ (E, b) -> (n, b)
        if self.scale is not None:
            s *= s.dtype.type(self.scale)
        return s

    def blocks(self, i0: int, i1: int, keep: bool = False):
        """(j0, j1, masked scores of the tile, None) for the key blocks rows i0:i1 may see.

        keep=True (the fast pass) lets a flex call's tile and a causal tile crossing the diagonal
        come unmasked with its 0/1 `keep` array instead (4th item), to multiply after exp:
        NumPy's exp of -inf takes a slow path (measured 6x the time of a finite argument; exp2
        12x). The fast pass's offset bounds every key's score, seen or not: no exp overflows.
        A causal tile then starts at its first row that sees a key of the block."""
        if self.plan is not None:  # a flex call: the block mask's tiles, the mods on each
            b, h = self.where
            for j0, j1, parts in self.plan.key_tiles(b, h, i0, i1, self.S, self.block):
                s = self.scores(i0, i1, j0, j1)
                kept = self.plan.keep(b, h, i0, j0, s, parts) if keep else None
                if kept is None:
                    self.plan.apply(s, b, h, i0, j0, parts)
                else:
                    self.plan.visit(b, h, i0, j0, s.shape)
                yield j0, j1, s, kept
            return
        causal = self.causal
        # causal: blocks past the keys rows i0:i1 may see are skipped
        stop = causal.keys_seen(i0, i1, self.S) if causal is not None else self.S
        for j0 in range(0, stop, self.block):
            j1 = min(stop, j0 + self.block)
            rows, cols = range(i0, i1), range(j0, j1)
            if keep and causal is not None and not causal.sees_whole_tile(rows, cols):
                # the fast pass: rows that see none of these keys are not computed (s has
                # fewer rows: the top ones skipped), the rest times 0/1 after exp
                r0 = max(i0, causal.first_query(j0))
                yield j0, j1, self.scores(r0, i1, j0, j1), causal.tile(range(r0, i1), cols)
                continue
            s = self.scores(i0, i1, j0, j1)
            if causal is not None and not causal.sees_whole_tile(rows, cols):  # crosses it
                tile = causal.tile(rows, cols)  # (n, b) bool
                np.copyto(s, -np.inf, where=~tile)
            elif self.mask is not None:
                m_tile = self.mask[i0:i1, j0:j1]
                if m_tile.dtype == np.bool_:
                    np.copyto(s, -np.inf, where=~m_tile)
                else:
                    np.add(s, m_tile, out=s)
            yield j0, j1, s, None

    def fully_masked(self, i0: int, i1: int) -> np.ndarray:
        """Rows of i0:i1 in which every key is masked (top-left causal rows always see key 0)."""
        if self.mask is None or self.causal is not None:
            return np.zeros(i1 - i0, dtype=bool)
        rows = self.mask[i0:i1]
        return ~rows.any(axis=1) if rows.dtype == np.bool_ else np.isneginf(rows).all(axis=1)

    def fast(self, i0: int, i1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """exp(scores - offset) with no max: (acc, denominator, rows that are ok) or None.

        Softmax does not depend on the offset subtracted, so this is exact whenever nothing
        overflows (every sum finite) and the denominator is >= 1 (then an underflowing term
        costs a weight no more than in the safe pass, whose denominator is >= 1 too). The
        offset keeps exp below 2^LIMIT_LOG2 wherever the bound allows; rows with only very
        negative scores (such as the first rows under a causal mask) go to `safe`. None when
        an exp overflowed (a float mask can add large values the bound does not see).
        """
        n = i1 - i0
        acc, den = self.acc[:n], self.denom[:n]
        den.fill(0)
        offset = None
        if self.offset is not None:
            offset = self.offset[i0 - self.first : i1 - self.first, None]  # (n, 1)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked, not warned
            if self.sink is not None:  # the sink's term exp(sink - offset) starts each row
                den += self.sink if offset is None else self.sink - offset[:, 0]
                self.exp(den, out=den)
                if not np.isfinite(den).all():
                    return None
            runs = None  # a flex call's rows cut into bands of query blocks and tiled rows
            if self.plan is not None:
                runs = self.plan.bands(*self.where, i0, i1, self.S, self.q.dtype)
            for r0, r1, band in runs or ((i0, i1, None),):
                rows = slice(r0 - i0, r1 - i0)
                off = None if offset is None else offset[rows]
                if band is not None:  # a band of query blocks: batched matmuls, its tiles only
                    self.band_pass(r0, r1, band, off, acc[rows], den[rows])  # sets acc
                    continue
                acc[rows].fill(0)  # the tiles add into acc
                # a flex chunk (large: one per task) in tiles of at most QUERY_CHUNK rows
                step = QUERY_CHUNK if self.plan is not None else r1 - r0
                for t0 in range(r0, r1, step):
                    t1 = min(r1, t0 + step)
                    part = slice(t0 - i0, t1 - i0)
                    off = None if offset is None else offset[part]
                    if not self.tile_pass(t0, t1, off, acc[part], den[part]):
                        return None
        ok = np.isfinite(acc).all(axis=1) & ((den >= 1) | self.fully_masked(i0, i1))
        return acc, den, ok

    def tile_pass(self, i0, i1, offset, acc, den) -> bool:
        """The fast pass over rows i0:i1 tile by tile, adding into acc (n, Ev) and den (n,).
        False when an exp overflowed."""
        n = i1 - i0
        tile, part = self.tile[:n], self.part[:n]
        for j0, j1, s, kept in self.blocks(i0, i1, keep=True):
            top = n - len(s)  # causal: the rows above it see none of these keys (skipped)
            if offset is not None:
                np.subtract(s, offset[top:], out=s)
            self.exp(s, out=s)  # step 4 without the max: one cheap pass over the tile
            if kept is not None:  # a flex or causal tile's mask, after exp (0: not seen)
                np.multiply(s, kept, out=s)
            np.matmul(s, self.ones[: j1 - j0], out=part[top:])  # (r, b) @ (b,) -> (r,)
            if not np.isfinite(part[top:]).all():  # an exp overflowed: give up early
                return False
            np.matmul(s, self.v[j0:j1], out=tile[top:])  # (r, b) @ (b, Ev) -> (r, Ev)
            acc[top:] += tile[top:]
            den[top:] += part[top:]
        return True

    def band_pass(self, i0, i1, band, offset, acc, den) -> None:
        """The fast pass over a band of T query blocks (numpy_flex_plan.FlexPlan.bands): block t
        sees keys lo + t * bq .. + W, read as strided views of k and v, so one batched matmul
        per step covers BAND_ROWS rows' blocks and no key outside the band is computed; acc
        (n, Ev) gets its p @ v, den (n,) its row sums. An exp that overflowed leaves inf or NaN in
        its rows' acc (p @ v with an inf in p): `fast` hands those rows to the safe pass.
        The scores are laid out keys first, (W, bq) per block, as k3 @ q3^T: an M of W = 384
        rather than bq = 128 rows suits OpenBLAS's sgemm (docs/notes/numpy_chunked.md)."""
        lo, width, cells = band
        bq = cells.shape[2]
        T = (i1 - i0) // bq
        q3 = self.q[i0 - self.first : i1 - self.first].reshape(T, bq, -1)  # (T, bq, E)
        k, v = self.k[lo:], self.v[lo:]
        k3 = np.lib.stride_tricks.as_strided(
            k, (T, width, k.shape[1]), (bq * k.strides[0], *k.strides)
        )  # (T, W, E): block t's keys
        v3 = np.lib.stride_tricks.as_strided(
            v, (T, width, v.shape[1]), (bq * v.strides[0], *v.strides)
        )  # (T, W, Ev)
        acc3, den2 = acc.reshape(T, bq, -1), den.reshape(T, bq)  # views of the band's rows
        step = max(1, min(T, BAND_ROWS // bq))  # blocks per step: the scores stay in cache
        if self.band_buf is None or self.band_buf.size < step * bq * width:
            self.band_buf = np.empty(step * bq * width, dtype=self.q.dtype)
        if self.band_ones is None or self.band_ones.size < width:
            self.band_ones = np.ones(width, dtype=self.q.dtype)
        b, h = self.where
        for t0 in range(0, T, step):
            t1 = min(T, t0 + step)
            s = self.band_buf[: (t1 - t0) * bq * width].reshape(t1 - t0, width, bq)
            np.matmul(k3[t0:t1], q3[t0:t1].transpose(0, 2, 1), out=s)  # (t, W, bq)
            if self.scale is not None:
                s *= s.dtype.type(self.scale)
            if self.plan.record is not None:
                for t in range(t0, t1):
                    self.plan.visit(b, h, i0 + t * bq, lo + t * bq, (bq, width))
            c = cells if len(cells) == 1 else cells[t0:t1]  # (1 or t, W, bq)
            if self.plan.score is not None:  # the score_mod, then -inf where not seen
                rows = (i0 + t0 * bq + np.arange((t1 - t0) * bq)).reshape(t1 - t0, 1, bq)
                cols = (lo + bq * np.arange(t0, t1)).reshape(-1, 1, 1) + np.arange(width)[:, None]
                np.copyto(s, self.plan.score(s, b, h, rows, cols, np), casting="same_kind")
                np.copyto(s, -np.inf, where=c)
            if offset is not None:
                np.subtract(s, offset[t0 * bq : t1 * bq].reshape(t1 - t0, 1, bq), out=s)
            self.exp(s, out=s)
            if self.plan.score is None:
                np.multiply(s, c, out=s)  # 0 where not seen (exp of -inf is slow, see blocks)
            ones = self.band_ones[:width]
            if self.sink is None:  # den starts at 0: the row sums go straight in
                np.matmul(ones, s, out=den2[t0:t1])  # (W,) @ (t, W, bq) -> (t, bq)
            else:
                den2[t0:t1] += np.matmul(ones, s)
            # (t, bq, W) @ (t, W, Ev) -> (t, bq, Ev)
            np.matmul(s.transpose(0, 2, 1), v3[t0:t1], out=acc3[t0:t1])

    def safe(self, i0: int, i1: int, draws, dropout_p: float) -> tuple[np.ndarray, np.ndarray]:
        """Online softmax: running max, rescaled running sums. Returns (acc, denominator)."""
        n = i1 - i0
        m_r, m_n, b_r = self.m_run[:n], self.m_new[:n], self.base[:n]
        a_r, d_r, acc, part = self.alpha[:n], self.denom[:n], self.acc[:n], self.part[:n]
        m_r.fill(-np.inf if self.sink is None else self.sink)  # the sink: a first key, value 0
        acc.fill(0)
        d_r.fill(0 if self.sink is None else 1)
        for j0, j1, s, _ in self.blocks(i0, i1):
            # step 3: new running max; rows masked so far use base 0 so nothing is NaN
            np.max(s, axis=1, out=m_n)
            np.maximum(m_n, m_r, out=m_n)
            np.copyto(b_r, m_n)
            b_r[np.isneginf(m_n)] = 0
            np.subtract(m_r, b_r, out=a_r)
            self.exp(a_r, out=a_r)  # exp(m_old - m_new) <= 1; 0 when m_old = -inf
            np.copyto(m_r, m_n)
            # step 4: exp of the tile relative to the running max
            np.subtract(s, b_r[:, None], out=s)
            self.exp(s, out=s)
            # step 5: rescale what came before and add this tile
            acc *= a_r[:, None]
            d_r *= a_r
            np.matmul(s, self.ones[: j1 - j0], out=part)  # (n, b) @ (b,): before dropout
            d_r += part
            if draws is not None:
                s *= draws[:, j0:j1] >= dropout_p
                s *= s.dtype.type(1.0 / (1.0 - dropout_p))
            np.matmul(s, self.v[j0:j1], out=self.tile[:n])  # (n, b) @ (b, Ev) -> (n, Ev)
            acc += self.tile[:n]
        return acc, d_r

    def safe_base(self, n: int) -> np.ndarray:
        """The safe pass's final running max per row, 0 where the row saw no key (its base)."""
        return np.where(np.isneginf(self.m_run[:n]), 0, self.m_run[:n])


def _tiles(chunk: int, block: int, width: int, dtype: np.dtype, features: int) -> _Tiles:
    """This thread's buffers for these sizes, made once (a fresh 1 MiB array costs page faults);
    the TILE_SETS sets used last are kept."""
    cache = getattr(_LOCAL, "tiles", None)
    if cache is None:
        cache = _LOCAL.tiles = {}
    key = (chunk, block, width, np.dtype(dtype).name, features)
    found = cache.pop(key, None)  # re-inserted below: the dict's order is the order of use
    if found is None:
        while len(cache) >= TILE_SETS:
            del cache[next(iter(cache))]  # the set used longest ago
        found = _Tiles(chunk, block, width, dtype, features)
    cache[key] = found
    return found


def chunked_output(
    q, k, v, scale, mask, options: Options, rng, group, chunk, block, plan=None, k_norm=None
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(attention output, lse or None, what the kernel chose) by query chunks and key blocks.

    plan: a flex_attention call's FlexPlan (q (B, H, L, E); mask None, no causal variant);
    k_norm: max_j |k_j| per (batch, kv head) when the caller has it (else worked out here)."""
    masked_rows, dropout_p = options.masked_rows, options.dropout_p
    *lead, L, E = q.shape
    S, Ev = v.shape[-2:]
    dtype = q.dtype
    causal = options.attention_variant  # the backend's build_mask refused other variants
    causal = causal if isinstance(causal, Causal) else None
    chunk, block = min(chunk, L), min(block, S)  # buffers no bigger than the problem
    if dropout_p > 0.0:  # random draws come a whole (chunk, S) row band at a time
        chunk = max(1, min(chunk, (1 << 22) // S))
    float_mask = mask is not None and mask.dtype != np.bool_
    float_mask = float_mask or (plan is not None and plan.score is not None)
    exp_name, detail = kernel_detail(dtype, float_mask)
    exp = np.exp2 if exp_name == "exp2" else np.exp
    factor = scale * (math.log2(math.e) if exp_name == "exp2" else 1.0)  # in float64
    v_c = np.ascontiguousarray(v)  # (..., S, Ev); k is read as k[j0:j1].T (BLAS transposes)
    # the fast pass's per-row offset: scores of row i are <= |q_i| max_j |k_j| |factor|
    limit = LIMIT_LOG2 if exp_name == "exp2" else LIMIT_LOG2 * math.log(2.0)
    if k_norm is None:
        k_norm = row_norms(k).max(axis=-1)  # (...,)
    if mask is not None:
        mask = np.broadcast_to(mask, tuple(lead) + (L, S))
    output = np.empty(tuple(lead) + (L, Ev), dtype=dtype)
    lse = np.empty(tuple(lead) + (L,), dtype=dtype) if options.return_lse else None
    to_natural = dtype.type(math.log(2.0) if exp_name == "exp2" else 1.0)  # base 2 -> base e
    try_fast = _FAST_PASS.get()  # read here: worker threads do not see this thread's context

    def run(tiles: _Tiles, index: tuple, i0: int, i1: int) -> None:
        """Rows i0:i1 of one (batch, head) problem into `output`."""
        kv = kv_index(index, group)
        mask_b = None if mask is None else mask[index]
        q_rows = q[index][i0:i1]  # (n, E)
        # step 0: fold scale (and log2(e)) into this chunk of q, in the worker's buffer
        q_rows, tile_scale = tiles.fold(q_rows, factor)
        # (1 + 1e-4) covers the rounding of the bound itself (float32 norms: E u < 1e-5)
        bound = row_norms(q[index][i0:i1]) * (k_norm[kv] * abs(factor) * (1 + 1e-4))  # (n,)
        offset = None
        if (bound > limit).any():
            offset = np.where(bound > limit, bound - limit, 0.0).astype(dtype)
            if not np.isfinite(offset).all():
                offset = None  # beyond float range: the fast pass overflows and gives up
        where = index[-2:] if plan is not None else (0, 0)  # (b, h) of a flex call
        sink = None if plan is None else plan.sink(where[1])
        if sink is not None:
            sink = sink / float(to_natural)  # in the exponential's base, as the scores
        tiles.bind(
            q_rows, i0, k[kv], v_c[kv], mask_b, causal, tile_scale, offset, exp, plan, where, sink
        )
        out = output[index][i0:i1]
        draws = rng((i1 - i0, S)) if dropout_p > 0.0 else None
        first = tiles.fast(i0, i1) if try_fast and draws is None else None
        redo = None  # the rows the safe pass computes: all of them
        if first is not None:
            acc, den, ok = first
            with np.errstate(invalid="ignore", over="ignore"):  # bad rows are redone below
                finish(acc, den, out, masked_rows, v[kv])
            if lse is not None:  # sum_j exp(s_ij - offset_i) = den_i
                base = 0 if offset is None else offset[: i1 - i0]
                log_sum_exp(base, den, to_natural, lse[index][i0:i1])
            if ok.all():
                return
            redo = i0 + np.flatnonzero(~ok)
        for r0, r1 in safe_ranges(i0, i1, redo, plan):
            acc, den = tiles.safe(r0, r1, draws, dropout_p)
            finish(acc, den, output[index][r0:r1], masked_rows, v[kv], draws, dropout_p)
            if lse is not None:  # sum_j exp(s_ij - max_i) = den_i, the max in the buffer m_run
                log_sum_exp(tiles.safe_base(r1 - r0), den, to_natural, lse[index][r0:r1])

    parallel = dropout_p == 0.0 and cores() > 1 and L * S * math.prod(lead) >= PARALLEL_MIN
    if parallel:  # at least one task per core: chunks of ceil(L / n) rows when there are few
        per_problem = -(-cores() // math.prod(lead))  # query chunks each (batch, head) needs
        chunk = min(chunk, -(-L // per_problem))
    tasks = [
        (index, i0, min(L, i0 + chunk))
        for index in itertools.product(*map(range, lead))  # np.ndindex costs ~40 us more
        for i0 in range(0, L, chunk)
    ]
    workers = min(cores(), len(tasks))
    with contextlib.ExitStack() as stack:
        single = parallel and workers > 1 and stack.enter_context(single_threaded_blas())
        if not single:  # one thread (with no BLAS control here, BLAS uses the cores)
            tiles = _tiles(chunk, block, Ev, dtype, E)
            for task in tasks:  # in order: dropout draws follow the row-major order
                run(tiles, *task)
            return output, lse, detail
        if causal is not None:  # later chunks see more keys: longest first, no long one last
            tasks.sort(key=lambda task: -causal.keys_seen(task[1], task[2], S))
        share(tasks, workers, lambda task: run(_tiles(chunk, block, Ev, dtype, E), *task))
    detail += f"; {workers} threads (this one included), OpenBLAS on one thread"
    return output, lse, detail

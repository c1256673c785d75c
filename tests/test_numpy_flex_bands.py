"""The NumPy flex kernel's band path (numpy_flex_plan.FlexPlan.bands, numpy_chunked.band_pass).

A chunk of query rows is cut into runs: whole query blocks that see equally many key blocks,
one further each block (a window's band), go through batched matmuls; the other rows (a
window's first blocks, a last block cut short) through the tiles. Checked here: the runs
themselves, that the band computes exactly the block mask's listed cells, and that its output
and lse equal the ground truth in float64 as the tile path's do (TOL, as tests/test_numpy_flex:
a few dozen roundings of values of size ~1; lse relative to its size).
"""

from __future__ import annotations

import numpy as np
import pytest

import scratch
from scratch.backends import numpy_chunked
from scratch.backends import numpy_flex as nf
from scratch.core.options import FlexOptions
from scratch.variants import ALiBi, SlidingWindow, Softcap, combine
from tests.error_bounds import lse_bound, output_bound

TOL = 1e-13
SIZE = 4  # block-mask tiles of 4 x 4: a window of 6 keys spans 3 key blocks


def inputs(seed, H, Hkv, L, S, E=4, Ev=3, magnitude=1.0, positive=False):
    """Seeded float64 q (1, H, L, E), k, v (1, Hkv, S, .); positive: every score > 0."""
    rng = np.random.default_rng(seed)
    q, k = (magnitude * rng.standard_normal((1, n, m, E)) for n, m in ((H, L), (Hkv, S)))
    if positive:
        q, k = np.abs(q), np.abs(k)
    return q, k, rng.standard_normal((1, Hkv, S, Ev))


def truth(variant, q, k, v, bm, sinks):
    """The ground truth's output and lse as float64 arrays."""
    out, lse = scratch.flex_attention(
        q.tolist(), k.tolist(), v.tolist(), variant.score_mod, bm, None, True, True, sinks=sinks
    )
    return np.array(out), np.array(lse)


def assert_close(got, want, what, tol=TOL):
    """Within tol (relative where a value exceeds 1), -inf in the same places."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    empty = np.isneginf(want)
    assert np.array_equal(np.isneginf(got), empty), f"{what}: rows that see nothing differ"
    got, want = np.where(empty, 0, got), np.where(empty, 0, want)
    gap = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)), initial=0)
    assert gap <= tol, f"{what}: differs by {gap:.3g} (relative)"


def test_a_window_chunk_is_tiles_then_one_band_with_one_blocks_cells():
    """Window (5, 0), L = S = 62, tiles of 4: block 0 sees key block 0, block 1 blocks 0-1,
    blocks 2-14 blocks b-2 .. b (12 keys from 4 (b - 2)), block 15 (rows 60, 61) is cut short.
    One chunk of 62 rows: rows 0-3, 4-7 and 60-61 by tiles, each block on its own (they see
    different key blocks), 8-59 one band whose cells (which keys each row of a block sees) are
    the same for every block, kept once and keys first as band_pass lays out its scores:
    (1, 12, 4)."""
    variant = SlidingWindow(5, 0)
    bm = nf.create_block_mask(variant.mask_mod, 1, 1, 62, 62, BLOCK_SIZE=SIZE)
    plan = nf.FlexProblem(*inputs(0, 1, 1, 62, 62), FlexOptions(block_mask=bm)).plan
    runs = plan.bands(0, 0, 0, 62, 62, np.dtype(np.float64))
    assert [(r0, r1) for r0, r1, _ in runs] == [(0, 4), (4, 8), (8, 60), (60, 62)]
    assert [band is None for *_, band in runs] == [True, True, False, True]
    lo, width, cells = runs[2][2]
    assert (lo, width, cells.shape) == (0, 12, (1, 12, 4))
    rows, keys = np.arange(4)[:, None], np.arange(12)[None, :]  # block 2: rows 8-11, keys 0-11
    seen = (keys <= rows + 8) & (keys >= rows + 8 - 5)
    assert np.array_equal(cells[0], seen.T.astype(np.float64))  # 1: seen, 0: not
    # a chunk that starts mid-band: its whole blocks 3-5 are the band, rows 10-11 tiles
    runs = plan.bands(0, 0, 10, 24, 62, np.dtype(np.float64))
    assert [(r0, r1, band is None) for r0, r1, band in runs] == [(10, 12, True), (12, 24, False)]
    assert runs[1][2][0] == 4  # block 3 sees keys from 4
    # a chunk of one whole block is no band (a block alone stays with the tiles)
    assert plan.bands(0, 0, 8, 12, 62, np.dtype(np.float64)) is None


def tiles_listed(bm):
    """(b, h, query block, key block) of every tile the block mask lists."""
    blocks = bm.kv_blocks
    return {
        (b, h, qb, kb)
        for b in range(len(blocks))
        for h in range(len(blocks[b]))
        for qb, tiles in enumerate(blocks[b][h])
        for kb, _ in tiles
    }


def listed_cells(bm, L, S):
    """Cells of the listed tiles (a last block cut short counts its rows and keys only)."""
    return sum(
        (min(L, qb * SIZE + SIZE) - qb * SIZE) * (min(S, kb * SIZE + SIZE) - kb * SIZE)
        for _, _, qb, kb in tiles_listed(bm)
    )


WINDOW_MODS = combine(SlidingWindow(5, 0), ALiBi((0.7, 0.3)), Softcap(2.0))  # mods of positions
VARIANTS = {
    "window": (SlidingWindow(5, 0), None),
    "window + mods + sinks": (WINDOW_MODS, [0.5, -1]),
}
STEPS = [8, numpy_chunked.BAND_ROWS]  # band_pass's rows per step: 2 blocks, or all of them


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("chunk", [62, 24, SIZE])
def test_bands_compute_exactly_the_listed_cells_and_equal_the_truth(name, chunk, step, monkeypatch):
    """L = S = 62, two heads on one kv head, chunks of 62 and 24 rows (bands) and of one block
    (tiles only). Every raw score > 0 and each row sees its own key unchanged (bias 0), so every
    row's fast pass stands (no rows redone): the cells computed are exactly those of the listed
    tiles, and the tiles they cover are the listed ones."""
    monkeypatch.setattr(numpy_chunked, "BAND_ROWS", step)
    variant, sinks = VARIANTS[name]
    L = S = 62
    q, k, v = inputs(3, 2, 1, L, S, positive=True)
    mask_mod = SlidingWindow(5, 0).mask_mod  # the block mask for head 0, read by both heads
    bm = nf.create_block_mask(mask_mod, 1, 1, L, S, BLOCK_SIZE=SIZE)
    x = nf.FlexProblem(
        q,
        k,
        v,
        FlexOptions(score_mod=variant.score_mod, block_mask=bm, enable_gqa=True, sinks=sinks),
    )
    x.plan.record = []
    output, lse = nf.chunked(x, chunk, SIZE)
    seen = {
        (b, 0, qb, kb)  # heads 0 and 1 read the block mask's head 0 (broadcast)
        for b, _, i0, i1, j0, j1 in x.plan.record
        for qb in range(i0 // SIZE, (i1 - 1) // SIZE + 1)
        for kb in range(j0 // SIZE, (j1 - 1) // SIZE + 1)
    }
    assert seen == tiles_listed(bm)
    cells = sum((i1 - i0) * (j1 - j0) for *_, i0, i1, j0, j1 in x.plan.record)
    assert cells == 2 * listed_cells(bm, L, S)  # two query heads
    if chunk != SIZE:  # the band's steps: one block of 4 rows x 12 keys each
        assert (0, 0, 8, 12, 0, 12) in x.plan.record
    want_out, want_lse = truth(variant, q, k, v, bm, sinks)
    assert_close(output, want_out, "output")
    assert_close(lse, want_lse, "lse")


def test_a_band_whose_blocks_see_keys_differently_keeps_each_blocks_cells():
    """A user's mask (window of 6 keys, and never a key j with j % 7 == 3), L = S = 48, tiles
    of 4: blocks 1-2 see 2 key blocks each, 3-8 three, block 9 two (the one key of block 7 it
    would see is 31, and 31 % 7 == 3), 10-11 three. Which cells are seen differs from block
    to block, so each band keeps one block's cells per block; output and lse equal the truth
    (sinks, GQA, and head 1 asks the mask_mod: the block mask was made for head 0 alone)."""

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx and q_idx - kv_idx <= 5 and kv_idx % 7 != 3

    variant = type("Mine", (), {"mask_mod": staticmethod(mask_mod), "score_mod": None})
    L = S = 48
    bm = nf.create_block_mask(mask_mod, 1, 1, L, S, BLOCK_SIZE=SIZE)
    q, k, v = inputs(5, 2, 1, L, S)
    x = nf.FlexProblem(q, k, v, FlexOptions(block_mask=bm, enable_gqa=True, sinks=[0.3, -0.2]))
    runs = x.plan.bands(0, 0, 0, L, S, np.dtype(np.float64))
    assert [(r0, r1, band and (band[0], band[2].shape)) for r0, r1, band in runs] == [
        (0, 4, None),
        (4, 12, (0, (2, 8, 4))),  # (blocks, keys, rows): keys first, as band_pass's scores
        (12, 36, (4, (6, 12, 4))),
        (36, 40, None),
        (40, 48, (32, (2, 12, 4))),
    ]
    output, lse = nf.chunked(x, L, SIZE)
    want_out, want_lse = truth(variant, q, k, v, bm, [0.3, -0.2])
    assert_close(output, want_out, "output")
    assert_close(lse, want_lse, "lse")


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("seed", range(4))
def test_large_scores_take_the_bands_offsets(seed, step, monkeypatch):
    """Scores up to ~10^3 (|q|, |k| ~ 20): the fast pass subtracts a per-row offset in the
    band too (exp would overflow without it), and its lse adds it back; output and lse equal
    the truth, chunks of 24 rows (bands) as of one block (tiles)."""
    monkeypatch.setattr(numpy_chunked, "BAND_ROWS", step)
    variant = combine(SlidingWindow(5, 0), ALiBi((0.7, 0.3)), Softcap(50.0))
    L = S = 40
    q, k, v = inputs(seed, 2, 2, L, S, magnitude=10.0)
    bm = nf.create_block_mask(variant.mask_mod, 1, 2, L, S, BLOCK_SIZE=SIZE)
    for mods in (SlidingWindow(5, 0), variant):  # without a score_mod, and with softcap
        want_out, want_lse = truth(mods, q, k, v, bm, None)
        for chunk in (24, SIZE):
            output, lse = nf.flex_attention(
                q, k, v, mods.score_mod, bm, return_lse=True, chunk=chunk
            )
            assert_close(output, want_out, f"output, chunk {chunk}")
            assert_close(lse, want_lse, f"lse, chunk {chunk}")


def test_an_exp_that_overflows_in_a_band_sends_its_rows_to_the_safe_pass():
    """A user's score_mod adding 800 to every third key: the per-row bound (from q and k) does
    not see it, so exp overflows in the band (float64: e^709 is the largest); those rows are
    redone by the safe pass (more cells computed than listed) and equal the truth. Chunks of
    2 blocks: rows 0-7 by tiles (which give up on their first overflow), the rest bands."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + 800.0 if kv_idx % 3 == 0 else score

    L = S = 40
    window = SlidingWindow(5, 0)
    variant = type("Mine", (), {"mask_mod": staticmethod(window.mask_mod), "score_mod": None})
    variant.score_mod = staticmethod(score_mod)
    q, k, v = inputs(7, 1, 1, L, S)
    bm = nf.create_block_mask(window.mask_mod, 1, 1, L, S, BLOCK_SIZE=SIZE)
    x = nf.FlexProblem(q, k, v, FlexOptions(score_mod=score_mod, block_mask=bm))
    x.plan.record = []
    output, lse = nf.chunked(x, 2 * SIZE, SIZE)  # chunks of 2 blocks: from row 8 all band
    assert (0, 0, 8, 12, 0, 12) in x.plan.record
    cells = sum((i1 - i0) * (j1 - j0) for *_, i0, i1, j0, j1 in x.plan.record)
    assert cells > listed_cells(bm, L, S)
    want_out, want_lse = truth(variant, q, k, v, bm, None)
    assert_close(output, want_out, "output")
    assert_close(lse, want_lse, "lse")


def window_problems(q, k, v, window, block=128):
    """Each query block of `block` rows as its own problem over the keys of the block-mask
    tiles it lists, in float64: block t's rows with keys t * block - W + block .. t * block +
    block - 1, W = window + 1 rounded up to whole blocks, plus one (zeros before key 0,
    masked): q (T, block, E), k (T, W', E), v (T, W', Ev); and each problem's weights
    (T, block, W'), output (T, block, Ev) and lse (T, block), dense: the masked scores, the
    row max subtracted, exp, their sum, weights @ v."""
    q, k, v = (a[0, 0].astype(np.float64) for a in (q, k, v))
    (L, E), T = q.shape, q.shape[0] // block
    width = -(-(window + 1) // block) * block + block  # 384: a window of 256 over 3 tiles
    back = width - block  # keys before a block's first row: 256
    k_pad, v_pad = (np.pad(a, ((back, 0), (0, 0))) for a in (k, v))  # key j at row j + back
    k_t, v_t = (
        np.stack([a[t * block : t * block + width] for t in range(T)]) for a in (k_pad, v_pad)
    )
    q_t = q.reshape(T, block, E)
    i = np.arange(L).reshape(T, block, 1)  # query positions
    j = (np.arange(T) * block - back).reshape(T, 1, 1) + np.arange(width)  # key positions
    seen = (j >= 0) & (j <= i) & (i - j <= window)  # (T, block, W')
    scores = q_t @ k_t.transpose(0, 2, 1) / np.sqrt(E)  # (T, b, E) @ (T, E, W') -> (T, b, W')
    masked = np.where(seen, scores, -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    e = np.exp(masked - top)
    total = e.sum(axis=-1, keepdims=True)
    weights = e / total
    output = weights @ v_t  # (T, b, W') @ (T, W', Ev) -> (T, b, Ev)
    return (q_t, k_t, v_t), weights, output, top[..., 0] + np.log(total[..., 0])


def assert_within(got, want, bound, what):
    """|got - want| <= bound element by element, naming the worst place."""
    gap = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(gap - bound), gap.shape)
    assert np.all(gap <= bound), f"{what}: {gap[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"


def test_threads_and_chunks_keep_the_window_output_within_its_bound(monkeypatch):
    """Window (255, 0) at L = 2048 (large enough for worker threads), float32: one thread with
    one chunk, two threads with chunks of 1024 rows and one thread with chunks of 512 each give
    output and lse within the float32 bound of the float64 values (tests/error_bounds: the
    output's scratch.tolerance plus one rescaling per key block a row visits, and the lse's
    bound), each query block of 128 rows taken as its own problem over the 384 keys of the 3
    tiles it lists, as the kernel's sums are (keys it does not see weigh exact zeros).
    The three are not bit-identical in general: one thread leaves OpenBLAS its own threads, two
    hold it to one, and OpenBLAS picks its sgemm kernel by shape, thread count and host. The call
    without return_lse, on one thread and one chunk as the first, gives that call's output to the
    bit: it makes the same BLAS calls on the same shapes on the same threads (the lse is worked
    out afterwards from the sums the passes already hold)."""
    L, E, window = 2048, 64, 255
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((1, 1, L, E), dtype=np.float32) for _ in range(3))
    bm = nf.create_block_mask(SlidingWindow(window, 0).mask_mod, 1, 1, L, L)
    blocks = max(len(tiles) for tiles in bm.kv_blocks[0][0])  # key blocks a query block visits
    assert blocks == 3 and bm.block_size == (128, 128)
    problems, weights, want_out, want_lse = window_problems(q, k, v, window)
    out_tol = output_bound(*problems, weights, E**-0.5, "float32", None, blocks)
    lse_tol = sum(lse_bound(*problems[:2], None, E**-0.5, t) for t in ("float32", "float64"))
    want_out, out_tol = want_out.reshape(L, E), out_tol.reshape(L, E)
    want_lse, lse_tol = want_lse.reshape(L), lse_tol.reshape(L)
    results = []
    for threads, chunk in ((1, None), (2, None), (1, 512)):
        monkeypatch.setattr(numpy_chunked, "cores", lambda threads=threads: threads)
        output, lse = nf.flex_attention(q, k, v, block_mask=bm, return_lse=True, chunk=chunk)
        assert output.dtype == lse.dtype == np.float32
        what = f"{threads} threads, chunk {chunk}"
        assert_within(output[0, 0], want_out, out_tol, f"output, {what}")
        assert_within(lse[0, 0], want_lse, lse_tol, f"lse, {what}")
        results.append(output)
    monkeypatch.setattr(numpy_chunked, "cores", lambda: 1)
    assert np.array_equal(nf.flex_attention(q, k, v, block_mask=bm), results[0])


@pytest.mark.parametrize("magnitude", [1.0, 10.0, "aligned"])
def test_a_large_chunk_without_bands_goes_by_tiles_of_at_most_query_chunk_rows(
    magnitude, monkeypatch
):
    """A causal block mask (each block sees one more key block: no band) at L = S = 2048 with
    one chunk of all rows (one thread): the tiles take 1024 rows at a time (the chunk's first
    half visits keys up to 1024 only; rows the safe pass redoes are ranges of their own);
    output and lse equal the explicit kernel's (float64), also with scores up to ~10^3 (each
    row's offset then goes with its rows: with k = q and norms 37-40 the rows' fast pass
    stands, each with its own offset)."""
    from scratch.variants import Causal

    L = 2048
    rng = np.random.default_rng(10)
    if magnitude == "aligned":  # k = q, row norms 37-40: a row's own score is near its bound
        q = rng.standard_normal((1, 1, L, 8))
        norms = rng.uniform(37.0, 40.0, (1, 1, L, 1))
        q = k = norms * q / np.linalg.norm(q, axis=-1, keepdims=True)
        v = rng.standard_normal((1, 1, L, 8))
    else:
        q, k, v = (magnitude * rng.standard_normal((1, 1, L, 8)) for _ in range(3))
    bm = nf.create_block_mask(Causal().mask_mod, 1, 1, L, L)
    x = nf.FlexProblem(q, k, v, FlexOptions(block_mask=bm))
    x.plan.record = []
    monkeypatch.setattr(numpy_chunked, "cores", lambda: 1)  # one task: the whole chunk
    output, lse = nf.chunked(x, L, 256)
    rows = {(int(i0), int(i1)) for _, _, i0, i1, _, _ in x.plan.record}  # (and rows redone)
    assert {(0, 1024), (1024, 2048)} <= rows
    assert max(j1 for *_, i0, i1, _, j1 in x.plan.record if (i0, i1) == (0, 1024)) == 1024
    if magnitude == 1.0:  # (large scores: the safe pass redoes a range of rows, any length)
        assert max(i1 - i0 for i0, i1 in rows) == 1024
    want_out, want_lse = nf.flex_attention(q, k, v, None, bm, kernel="explicit", return_lse=True)
    # each score carries a rounding of ~E eps |score| (here E = 8), each weight as much: both
    # kernels' outputs within 32 eps max|score| of the exact ones (1e-13 for scores of ~1)
    top = np.abs(q[0, 0] @ k[0, 0].T).max() / np.sqrt(8)
    tol = max(TOL, 32 * np.finfo(np.float64).eps * top)
    assert_close(output, want_out, "output", tol)
    assert_close(lse, want_lse, "lse", tol)


@pytest.mark.parametrize("fast", [True, False])
def test_rows_redone_by_the_safe_pass_go_block_by_block(fast):
    """Every score very negative (q > 0, k < 0: each row's denominator ends below 1), or the
    fast pass off: the safe pass computes every row of the one chunk of 64, one query block at
    a time, so again only the listed tiles; output and lse equal the truth."""
    L = S = 64
    window = SlidingWindow(5, 0)
    rng = np.random.default_rng(11)
    q = 3.0 + np.abs(rng.standard_normal((1, 1, L, 4)))
    k = -3.0 - np.abs(rng.standard_normal((1, 1, S, 4)))
    v = rng.standard_normal((1, 1, S, 3))
    bm = nf.create_block_mask(window.mask_mod, 1, 1, L, S, BLOCK_SIZE=SIZE)
    x = nf.FlexProblem(q, k, v, FlexOptions(block_mask=bm))
    x.plan.record = []
    with numpy_chunked.fast_pass(fast):
        output, lse = nf.chunked(x, L, SIZE)
    seen = {  # every block-mask tile that a computed tile covers, fast pass and safe pass
        (0, 0, qb, kb)
        for _, _, i0, i1, j0, j1 in x.plan.record
        for qb in range(i0 // SIZE, (i1 - 1) // SIZE + 1)
        for kb in range(j0 // SIZE, (j1 - 1) // SIZE + 1)
    }
    assert seen == tiles_listed(bm)
    rows = {(i0, i1) for _, _, i0, i1, _, _ in x.plan.record}
    assert rows >= {(i, i + SIZE) for i in range(0, L, SIZE)}  # the safe pass's blocks
    want_out, want_lse = truth(window, q, k, v, bm, None)
    assert_close(output, want_out, "output")
    assert_close(lse, want_lse, "lse")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads, L, E", [(1, 300, 8), (2, 301, 8), (2, 1025, 64), (3, 1025, 64)])
def test_inf_and_nan_are_refused_naming_the_argument(dtype, threads, L, E, monkeypatch):
    """FlexProblem checks key through its row norms (which the chunked kernel's bound uses):
    an inf, -inf or NaN anywhere in query, key or value is refused naming it; the largest
    finite numbers (whose squares overflow float32) are accepted. From PARALLEL_CHECK elements
    on, the cores share the reading (here 2 or 3 threads, each a share of the rows, the last
    share one row longer): a bad number in any share is found, and the key norms equal one
    thread's."""
    monkeypatch.setattr(nf, "cores", lambda: threads)
    rng = np.random.default_rng(12)
    fine = rng.standard_normal((1, 2, L, E)).astype(dtype)
    parallel = 3 * fine.size >= nf.PARALLEL_CHECK
    assert parallel == (E == 64)
    big = np.full_like(fine, np.finfo(dtype).max)
    nf.FlexProblem(big, big, big, FlexOptions())
    norms = nf.FlexProblem(fine, fine, fine, FlexOptions()).k_norm
    assert np.array_equal(norms, numpy_chunked.row_norms(fine).max(axis=-1))
    rows = {0, L // threads - 1, min(L - 1, L // threads), L // 2, L - 2, L - 1}  # shares' ends
    for name in ("query", "key", "value"):
        for bad in (np.inf, -np.inf, np.nan):
            for cell in [(0, 0, 0, 0), (0, 1, L - 1, E - 1)] + [(0, 1, r, 3) for r in sorted(rows)]:
                x = fine.copy()
                x[cell] = bad
                arrays = [x if n == name else fine for n in ("query", "key", "value")]
                with pytest.raises(ValueError, match=f"{name}: expected finite numbers"):
                    nf.FlexProblem(*arrays, FlexOptions())

"""The tiled backward's fast loop (numpy_backward_tiles) and forward_with_lse's one kernel."""

import random

import numpy as np
import pytest

from scratch.backends import get
from scratch.backends import numpy_backward as nb
from scratch.backends import numpy_backward_tiles as tiles
from scratch.backends import numpy_chunked as nc
from scratch.backends.numpy_threads import openblas_threads
from scratch.core.options import Options

pytest.importorskip("torch")  # test_backward_backends imports torch's backward at load
from tests.test_backward_backends import check_against_truth, problem  # noqa: E402

SHAPES = [(7, 9, 3, 2, (2, 2)), (11, 6, 4, 5, (4, 2)), (13, 13, 8, 8, (1, 1))]


def fast(rows, keys, parallel=False):
    """The fast loop alone (an AssertionError when it declines), (rows, keys) tiles."""

    def run(q, k, v, g, rng=None, **kwargs):
        options = Options(**kwargs)
        p = nb._Problem(q, k, v, options, None)
        keep = nb._keep_mask(p, rng)
        output, lse = (
            nb._forward_tiled(p, keep, 4)
            if keep is not None
            else nb.output_and_lse(q, k, v, options)
        )
        assert tiles.applies(p, lse)
        found = tiles.gradients(p, p.grad_output(g), keep, output, lse, rows, keys)
        assert found is not None
        dq, dk, dv, _ = found
        return dq, p.sum_groups(dk), p.sum_groups(dv)

    return run


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("sizes", [(3, 5), (4, 4), (64, 64)])
@pytest.mark.parametrize("seed", range(4))
def test_fast_loop_within_the_bound(dtype, mask, sizes, seed):
    L, S, E, Ev, heads = SHAPES[seed % len(SHAPES)]
    if mask == "causal" and L > S:
        S = L  # top-left causal: every row sees key 0 (the fast loop's case)
    inputs, kwargs = problem(seed, L, S, E, Ev, heads, mask, dtype=dtype)
    check_against_truth(fast(*sizes), inputs, kwargs, dtype)


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_fast_loop_with_dropout_reads_the_forwards_mask(mask):
    inputs, kwargs = problem(3, 9, 9, 4, 3, (4, 2), mask)
    check_against_truth(fast(4, 3), inputs, {**kwargs, "dropout_p": 0.3}, "float64", seed=7)


def test_fast_loop_on_worker_threads(monkeypatch):
    """Every problem spread over the workers: the per-worker dQ arrays summed, dK, dV per task."""
    monkeypatch.setattr(tiles, "PARALLEL_MIN", 0)
    monkeypatch.setattr(tiles, "cores", lambda: 3)
    for mask in ("none", "causal"):
        inputs, kwargs = problem(5, 12, 12, 4, 4, (2, 1), mask, dtype="float32")
        check_against_truth(fast(3, 2), inputs, kwargs, "float32")


@pytest.mark.parametrize("threads", [1, 3])
def test_fast_loop_keeps_no_state_between_calls(monkeypatch, threads):
    """The arrays each thread keeps between calls (widened q and dO, each worker's dQ) carry
    nothing over: after calls on other inputs and shapes, one thread gives the same bits again;
    three stay within the bound (which worker sums which key blocks into its dQ varies)."""
    monkeypatch.setattr(tiles, "PARALLEL_MIN", 0)
    monkeypatch.setattr(tiles, "cores", lambda: threads)
    first, kwargs = problem(8, 12, 10, 4, 3, (2, 1), "causal", dtype="float32")
    other, _ = problem(9, 12, 10, 4, 3, (2, 1), "causal", dtype="float32")
    shape, _ = problem(9, 7, 10, 4, 3, (2, 1), "causal", dtype="float32")
    run = fast(4, 3)
    before = run(*first, **kwargs)
    for inputs in (other, shape, other):
        run(*inputs, **kwargs)
    if threads == 1:  # bit for bit: the same calls on the same shapes and inputs, one thread
        for a, b in zip(run(*first, **kwargs), before):
            np.testing.assert_array_equal(a, b)
    else:
        check_against_truth(run, first, kwargs, "float32")


def test_general_loop_where_the_fast_one_does_not_apply():
    """A bool mask with fully masked rows: the general loop, its results to the last bit."""
    inputs, kwargs = problem(2, 8, 7, 3, 3, (2, 2), "bool")
    options = Options(**kwargs)
    p = nb._Problem(*inputs[:3], options, None)
    output, lse = nb.output_and_lse(*inputs[:3], options)
    assert not tiles.applies(p, lse)
    public = nb.scaled_dot_product_attention_backward(
        *inputs, **kwargs, kernel="tiled", output=output, lse=lse
    )
    general = nb._tiled_general(p, inputs[3], None, output, lse, nb.BLOCK)
    for a, b in zip(public, general):  # bit for bit: the very calls the public door makes
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"dropout_p": 0.2, "rng": 4}])
def test_forward_with_lse_is_the_chunked_forward(dtype, kwargs):
    """Bit for bit the backend's output-only kernel with return_lse, in the inputs' dtype."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 40, 8)).astype(dtype) for _ in range(3))
    output, lse = nb.forward_with_lse(q, k, v, **kwargs)
    chunked = get("numpy").scaled_dot_product_attention(
        q, k, v, need_weights=False, return_lse=True, **kwargs
    )
    assert chunked.kernel == "chunked-online-softmax"
    assert output.dtype == lse.dtype == np.dtype(dtype)
    # bit for bit: one kernel, the same calls on the same shapes (no worker threads at this size)
    np.testing.assert_array_equal(output, chunked[0])
    np.testing.assert_array_equal(lse, chunked[1])


def test_causal_forward_gives_workers_the_longest_chunks_first(monkeypatch):
    """Causal query chunks go to the workers longest first (later rows see more keys: no long
    chunk left for last); output and lse are those of the chunks in row order to the last bit."""
    if openblas_threads() is None:
        pytest.skip("no OpenBLAS thread control: the chunked forward stays on one thread")
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 40, 8)).astype(np.float32) for _ in range(3))
    monkeypatch.setattr(nc, "PARALLEL_MIN", 0)
    monkeypatch.setattr(nc, "cores", lambda: 4)  # four chunks of 10 rows
    given, share = [], nc.share

    def spy(tasks, *rest):
        given.append([i0 for _, i0, _ in tasks])
        share(tasks, *rest)

    monkeypatch.setattr(nc, "share", spy)
    threaded = nb.forward_with_lse(q, k, v, is_causal=True)
    assert given == [[30, 20, 10, 0]]
    monkeypatch.setattr(nc, "share", lambda tasks, *rest: share(sorted(tasks), *rest))
    in_row_order = nb.forward_with_lse(q, k, v, is_causal=True)
    # bit for bit: each chunk's rows take the same calls on the same shapes with OpenBLAS on one
    # thread, whichever worker runs it and whenever (only the order of the chunks differs)
    for a, b in zip(threaded, in_row_order):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [1.0, 30.0])  # 30: the fast pass subtracts an offset
def test_causal_fast_pass_multiplies_after_exp_to_the_last_bit(monkeypatch, dtype, size):
    """The fast pass's diagonal tiles: exp, then times the causal 0/1 tile, give the bits of
    exp with -inf where masked (the slow exp path it replaced); rows and keys off the grid."""
    rng = np.random.default_rng(4)
    q, k = (rng.standard_normal((2, 70, 8)).astype(dtype) * size for _ in range(2))
    v = rng.standard_normal((2, 70, 5)).astype(dtype)
    kwargs = {"is_causal": True, "block_size": (16, 12)}
    backend = get("numpy").scaled_dot_product_attention
    multiplied = backend(q, k, v, need_weights=False, return_lse=True, **kwargs)
    blocks = nc._Tiles.blocks

    def minus_inf(self, i0, i1, keep=False):  # the tile masked with -inf before exp
        for j0, j1, s, kept in blocks(self, i0, i1, keep):
            if kept is not None:
                np.copyto(s, -np.inf, where=~kept)
            yield j0, j1, s, None

    monkeypatch.setattr(nc._Tiles, "blocks", minus_inf)
    masked = backend(q, k, v, need_weights=False, return_lse=True, **kwargs)
    assert np.isfinite(masked[1]).all()
    # bit for bit: exp(x) * 1 = exp(x) and exp(x) * 0 = 0 = exp(-inf) exactly, so the same values
    # enter the same calls on the same shapes
    for a, b in zip(multiplied[:2], masked[:2]):
        np.testing.assert_array_equal(a, b)


def test_forward_with_lse_draws_the_backwards_dropout_mask():
    """rng=random.Random(s) gives the forward and the backward the same keep mask."""
    inputs, kwargs = problem(6, 6, 6, 3, 3, (2, 2))
    kwargs = {**kwargs, "dropout_p": 0.4}
    output, lse = nb.forward_with_lse(*inputs[:3], **kwargs, rng=random.Random(3))
    own = nb.scaled_dot_product_attention_backward(
        *inputs, **kwargs, kernel="tiled", rng=random.Random(3)
    )
    given = nb.scaled_dot_product_attention_backward(
        *inputs, **kwargs, kernel="tiled", rng=random.Random(3), output=output, lse=lse
    )
    for a, b in zip(own, given):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_dropout_factors_from_the_bool_mask_keep_every_bit():
    """x * keep * 1/(1-p) equals x * (1/(1-p) or 0), the float factors it replaced, to the bit:
    NaN, inf, -0 and subnormals included; the mask itself is one bool per weight."""
    inputs, kwargs = problem(1, 5, 6, 2, 2, (1, 1), dtype="float32")
    p = nb._Problem(*inputs[:3], Options(dropout_p=0.3, **kwargs), None)
    keep = nb._keep_mask(p, 11)
    assert keep.dtype == np.bool_ and keep.shape == (1, 5, 6)
    x = np.random.default_rng(2).standard_normal((1, 5, 6)).astype(np.float32) * 1e3
    x.flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-45, -2e38]
    factors = np.where(keep, np.float32(1 / 0.7), np.float32(0.0))
    np.testing.assert_array_equal(
        nb.dropped(x, keep, p).view(np.uint32), (x * factors).view(np.uint32)
    )

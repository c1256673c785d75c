"""scratch.learn.why: the numbers behind each step's reason, against NumPy and the ground truth."""

import math
import random
import statistics

import numpy as np
import pytest

from scratch import scaled_dot_product_attention
from scratch.learn.why import why_mask, why_max, why_scale
from scratch.ops.linalg import matmul, transpose


def example(seed: int, L: int = 6, S: int = 7, E: int = 16):
    rng = random.Random(seed)
    q = [[rng.gauss(0, 1) for _ in range(E)] for _ in range(L)]
    k = [[rng.gauss(0, 1) for _ in range(E)] for _ in range(S)]
    return q, k, matmul(q, transpose(k))  # scores (L, S)


def np_softmax(row) -> np.ndarray:
    e = np.exp(np.asarray(row) - np.max(row))
    return e / e.sum()


@pytest.mark.parametrize("seed", range(5))
def test_scale_variance_and_what_softmax_does(seed):
    q, k, scores = example(seed)
    scale = 1 / math.sqrt(16)
    why = why_scale(scores, scale, 16, row=2)
    flat = [s for r in scores for s in r]
    assert why.variance_unscaled == pytest.approx(statistics.pvariance(flat), rel=1e-13)
    assert why.variance_scaled == pytest.approx(
        statistics.pvariance([s * scale for s in flat]), rel=1e-13
    )
    np.testing.assert_allclose(why.unscaled.weights, np_softmax(scores[2]), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(
        why.scaled.weights, np_softmax(np.array(scores[2]) * scale), rtol=1e-12
    )
    p = np.asarray(why.scaled.weights)
    assert why.scaled.entropy == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    # a larger inverse temperature never raises entropy nor lowers the largest weight
    assert why.scaled.entropy > why.unscaled.entropy
    assert why.scaled.largest < why.unscaled.largest
    assert why.scaled.argmax == why.unscaled.argmax == int(np.argmax(scores[2]))


def test_scale_reads_only_visible_cells():
    _, _, scores = example(0)
    causal = [[j <= i for j in range(7)] for i in range(6)]
    why = why_scale(scores, 0.25, 16, row=0, allowed=causal)
    seen = [s for i, r in enumerate(scores) for j, s in enumerate(r) if j <= i]
    assert why.variance_unscaled == pytest.approx(statistics.pvariance(seen), rel=1e-13)
    assert why.scaled.weights[1:] == [0.0] * 6 and why.scaled.weights[0] == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_max_subtraction_and_overflow(seed):
    _, _, scores = example(seed)
    masked = [[s * 0.25 for s in r] for r in scores]
    why = why_max(masked, row=1)
    assert why.top == max(masked[1]) and max(why.shifted) == 0.0 and max(why.exps) == 1.0
    np.testing.assert_allclose(why.weights, np_softmax(masked[1]), rtol=1e-13)
    assert max(why.large) == 100.0 and why.shift == 100.0 - why.top
    for o in why.overflows:  # the naive softmax as NumPy computes it in that dtype
        t = np.dtype(o.dtype).type
        with np.errstate(all="ignore"):
            e = np.exp(np.asarray(why.large, dtype=t))
            naive = e / np.sum(e, dtype=t)
            stable = np.exp(np.asarray(why.large, dtype=t) - t(max(why.large)))
            stable = stable / np.sum(stable, dtype=t)
        assert o.limit == pytest.approx(math.log(float(np.finfo(t).max)), rel=1e-15)
        np.testing.assert_array_equal(np.isinf(o.exps), np.isinf(e))
        np.testing.assert_array_equal(np.isnan(o.naive), np.isnan(naive))
        assert any(math.isnan(w) for w in o.naive)  # logits of 100 overflow both dtypes
        assert all(math.isfinite(w) for w in o.stable)
        np.testing.assert_allclose(
            o.stable, stable, rtol=4 * np.finfo(t).eps, atol=np.finfo(t).tiny
        )


def test_mask_before_and_after_softmax():
    q, k, scores = example(3)
    scaled = [[s * 0.25 for s in r] for r in scores]
    grid = [[(i + j) % 3 != 0 for j in range(7)] for i in range(6)]
    why = why_mask(scaled, row=2, allowed=grid)
    v = [[float(j == c) for c in range(7)] for j in range(7)]  # weights @ I = weights
    _, w = scaled_dot_product_attention(q, k, v, attn_mask=grid, scale=0.25)
    np.testing.assert_allclose(why.before, w[2], rtol=1e-14)
    full = np_softmax(scaled[2])
    np.testing.assert_allclose(why.after, np.where(grid[2], full, 0.0), rtol=1e-14)
    assert why.sums[0] == pytest.approx(1.0, abs=1e-15) and why.sums[2] == pytest.approx(
        1.0, abs=1e-15
    )
    assert (
        why.sums[1] == pytest.approx(float(full[grid[2]].sum()), rel=1e-14) and why.sums[1] < 0.99
    )
    assert all(why.zero_score[j] > 0 for j in range(7) if not grid[2][j])  # 0 is not -inf
    assert not why.assumed_causal
    causal = why_mask(scaled, row=3)
    assert causal.assumed_causal and causal.allowed == [True] * 4 + [False] * 3


def test_bad_rows_are_named():
    _, _, scores = example(0)
    for fn in (
        lambda r: why_scale(scores, 0.25, 16, r),
        lambda r: why_max(scores, r),
        lambda r: why_mask(scores, r),
    ):
        with pytest.raises(ValueError, match="row"):
            fn(6)
    with pytest.raises(ValueError, match="row 0"):
        why_mask(scores, 0, allowed=[[False] * 7] * 6)

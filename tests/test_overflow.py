"""Data that overflow: rows the data (not the mask) empties follow masked_rows on the fused paths,
the overflow check stays out of ordinary data's way, and q @ k^T that overflows before the scale
follows the pipeline as written."""

import math

import pytest

import scratch

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
from scratch import backends  # noqa: E402

NB, TB = backends.get("numpy"), backends.get("torch")


@pytest.mark.parametrize("policy", scratch.MASKED_ROWS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_fast_paths_apply_the_policy_to_rows_the_data_empties(policy, causal, backend):
    # q . k = -1e400 overflows to -inf for every key of row 0; row 1 sees two equal scores
    q, k, v = [[1e200], [1.0]], [[-1e200], [-1e200]], [[1.0], [2.0]]
    want, _ = scratch.scaled_dot_product_attention(q, k, v, is_causal=causal, masked_rows=policy)
    be = backends.get(backend)
    with np.errstate(over="ignore"):
        got = be.scaled_dot_product_attention(
            q, k, v, is_causal=causal, masked_rows=policy, need_weights=False
        ).output
    got = np.asarray(got, dtype=np.float64).tolist()
    assert str(got) == str(want)  # nan == nan as text; 0.0, 1.5, 2.0 exactly


def test_the_overflow_check_stays_out_of_the_way_of_ordinary_data():
    from scratch.backends import torch_compat as tc

    q = torch.randn(1, 2, 64, 32)
    assert not tc._scores_may_overflow(q, q, 0.2)
    assert tc._scores_may_overflow(q * 1e300, q * 1e300, 0.2)
    # float16 data are summed in float32: scores of 1e7 are fine there, 1e39 are not
    assert not tc._scores_may_overflow(q.half() * 1e3, q.half() * 1e3, 1.0)
    assert tc._scores_may_overflow(q.half() * 6e4, q.half() * 6e4, 1e30)
    assert tc._scores_may_overflow(torch.full((1, 1), math.nan), q[0, 0, :1, :1], 1.0)


def test_scores_that_overflow_before_scaling_follow_the_pipeline_in_explicit_paths():
    # q . k = 4e308 overflows float64; scale * q . k = 4e307 would not. The ground truth and the
    # explicit paths compute scores = q @ k^T first (a step of its own): inf, then NaN weights.
    # The fused paths fold the scale into q first and give the finite answer (documented).
    q, k, v = [[1e154] * 4], [[1e154] * 4, [1.0] * 4], [[1.0], [2.0]]
    out, _ = scratch.scaled_dot_product_attention(q, k, v, scale=0.1)
    assert math.isnan(out[0][0])
    with np.errstate(over="ignore", invalid="ignore"):
        for be in (NB, TB):
            explicit = be.scaled_dot_product_attention(q, k, v, scale=0.1)[0]
            assert math.isnan(float(np.asarray(explicit)[0, 0]))
            fused = be.scaled_dot_product_attention(q, k, v, scale=0.1, need_weights=False)
            assert float(np.asarray(fused.output)[0, 0]) == 1.0

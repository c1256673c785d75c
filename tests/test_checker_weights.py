"""Weights a kernel returns beside its output: weights_tolerance's bound and the checker's use."""

import math

import numpy as np
import pytest

import scratch
import scratch.bounds.weights_tolerance as wt
from scratch.bounds.weights_tolerance import weights_tolerance
from scratch.core.options import Options

torch = pytest.importorskip("torch")


def softmax_kernel(upcast=False, change=None):
    """A plain torch kernel returning (output, weights); `change` alters the weights only."""

    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        dtype = q.dtype
        if upcast and dtype in (torch.float16, torch.bfloat16):  # float32 sums, 16-bit results
            q, k, v = q.float(), k.float(), v.float()
            if attn_mask is not None and attn_mask.dtype != torch.bool:
                attn_mask = attn_mask.float()
        if enable_gqa and k.shape[-3] != q.shape[-3]:
            group = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(group, -3), v.repeat_interleave(group, -3)
        s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
        L, S = s.shape[-2:]
        if is_causal:
            s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
        if attn_mask is not None:
            hidden = ~attn_mask if attn_mask.dtype == torch.bool else None
            s = s.masked_fill(hidden, float("-inf")) if hidden is not None else s + attn_mask
        w = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)  # fully masked rows: zeros
        out, w = (w @ v).to(dtype), w.to(dtype)
        return out, (w if change is None else change(w))

    return fn


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("upcast", [True, False])  # float32 sums, or 16-bit scores (native)
def test_a_right_kernel_returning_weights_passes(dtype, seed, upcast):
    report = scratch.check(softmax_kernel(upcast=upcast), array="torch", dtype=dtype, seed=seed)
    assert report.verdict.startswith("PASS"), report


@pytest.mark.parametrize(
    "name, change",
    [
        ("ones", torch.ones_like),
        (
            "transposed",
            lambda w: (
                w.transpose(-1, -2).contiguous() if w.shape[-1] == w.shape[-2] else w.flip(-1)
            ),
        ),
        ("0.1% large", lambda w: w * 1.001),
        ("rows swapped", lambda w: torch.cat([w[..., 1:2, :], w[..., :1, :], w[..., 2:, :]], -2)),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_wrong_weights_beside_a_right_output_fail(name, change, dtype):
    report = scratch.check(softmax_kernel(change=change), array="torch", dtype=dtype)
    failed = [case for case in report.cases if case.status == "fail"]
    assert len(failed) >= len(report.cases) - 2, report  # all, but rows that are alike
    assert all("the returned weights are not" in case.message for case in failed)


def test_weights_of_another_shape_fail_by_name():
    report = scratch.check(softmax_kernel(change=lambda w: w[..., :-1]), array="torch")
    assert report.verdict.startswith("FAIL") and all(
        "returned weights have shape" in case.message for case in report.cases
    )


def test_sampled_rows_check_their_weights_too():
    """cases="large" compares the sampled rows of the weights (checker's take_rows)."""
    report = scratch.check(softmax_kernel(change=torch.ones_like), array="torch", cases="large")
    assert [case.status for case in report.cases] == ["fail"] * 3
    assert all("the returned weights are not" in case.message for case in report.cases)


def _problem(seed, L=6, S=9, E=16, scale_spread=3.0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, n, E)) * rng.uniform(0.5, scale_spread) for n in (L, S, S)]


@pytest.mark.parametrize("seed", range(6))
def test_float16_scores_held_in_float16_need_stored_scores(seed):
    """A float16 softmax of float16 scores (what a native half kernel does) lands within the
    bound with stored_scores=True, the checker's setting, and can leave it without: scores of
    size ~10 rounded to float16 move a weight by about a percent."""
    q, k, v = (x.astype("float16") for x in _problem(seed))
    _, truth = scratch.scaled_dot_product_attention(
        q.astype(float).tolist(), k.astype(float).tolist(), v.astype(float).tolist()
    )
    truth = np.array(truth)
    s = (q @ np.swapaxes(k, -1, -2)) * np.float16(1 / 4)  # float16 products and scores
    e = np.exp(s.astype(np.float32) - s.max(-1, keepdims=True).astype(np.float32))
    got = (e / e.sum(-1, keepdims=True)).astype("float16").astype(float)
    wide = np.array(weights_tolerance(q, k, truth, Options(), "float16", stored_scores=True))
    assert (np.abs(got - truth) <= wide).all()
    assert (np.abs(got * 1.1 - truth) > wide).any()  # 10% off still fails
    narrow = np.array(weights_tolerance(q, k, truth, Options(), "float16"))
    assert (narrow < wide).all()


def test_weights_tolerance_numpy_and_plain_python_agree():
    q, k, _ = _problem(1)
    mask = np.ones((6, 9), bool)
    mask[2] = False  # a fully masked row: its weights are 0
    floats = np.where(mask, np.linspace(-2, 2, 54).reshape(6, 9), -np.inf)
    for given in (mask, floats):
        _, w = scratch.scaled_dot_product_attention(q.tolist(), k.tolist(), k.tolist(),
                                                    attn_mask=given.tolist())  # fmt: skip
        for dtype, stored in (("float32", False), ("bfloat16", True)):
            vectorised = weights_tolerance(q, k, w, Options(given), dtype, stored_scores=stored)
            plain = wt._weights_lists(q.tolist(), k.tolist(), w, None, dtype, given.tolist(), 1,
                                      3.0 if stored else 0.0)  # fmt: skip
            np.testing.assert_allclose(vectorised, plain, rtol=1e-12, atol=0)

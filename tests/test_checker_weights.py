"""Weights a kernel returns beside its output: weights_tolerance's bound and the checker's use."""

import importlib
import math

import numpy as np
import pytest

import scratch

tolerance = importlib.import_module("scratch.tolerance")  # the module
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
def test_a_right_kernel_returning_weights_passes(dtype, seed):
    report = scratch.check(softmax_kernel(upcast=True), array="torch", dtype=dtype,
                           seed=seed)  # fmt: skip
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


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("seed", range(6))
def test_weights_tolerance_holds_for_a_plain_softmax_and_can_fail(dtype, seed):
    """numpy's softmax on inputs rounded to dtype (float32 sums for float16) lands within the
    bound; weights 0.1% too large do not (10% in float16: scores of size ~10 stored in float16
    may move a weight by a few percent, and the bound allows that)."""
    q, k, v = (x.astype(dtype) for x in _problem(seed))
    _, truth = scratch.scaled_dot_product_attention(
        q.astype(float).tolist(), k.astype(float).tolist(), v.astype(float).tolist()
    )
    truth = np.array(truth)
    acc = np.dtype("float32" if dtype == "float16" else dtype).type
    s = (q.astype(acc) @ np.swapaxes(k.astype(acc), -1, -2)) * acc(1 / 4)
    e = np.exp(s - s.max(-1, keepdims=True))
    got = (e / e.sum(-1, keepdims=True)).astype(dtype).astype(float)
    bound = np.array(tolerance.weights_tolerance(q, k, v, truth.tolist(), dtype=dtype))
    assert (np.abs(got - truth) <= bound).all()
    off = 1.1 if dtype == "float16" else 1.001
    assert (np.abs(got * off - truth) > bound).any()


def test_weights_tolerance_numpy_and_lists_agree_and_zero_rows_allow_nothing():
    q, k, v = _problem(1)
    mask = np.ones((6, 9), bool)
    mask[2] = False  # a fully masked row
    _, w = scratch.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist(),
                                                attn_mask=mask.tolist())  # fmt: skip
    vectorised = np.array(tolerance.weights_tolerance(q, k, v, w, attn_mask=mask))
    plain = np.array(tolerance._weights_lists(q.tolist(), k.tolist(), w, None, "float32",
                                              mask.tolist(), 1))  # fmt: skip
    np.testing.assert_allclose(vectorised, plain, rtol=1e-12, atol=0)
    assert (vectorised[:, 2] == 0).all() and (vectorised[:, 3] > 0).all()


def test_weights_tolerance_refuses_bad_weights_by_name():
    q, k, v = _problem(2)
    with pytest.raises(ValueError, match="weights: expected shape"):
        tolerance.weights_tolerance(q, k, v, np.zeros((2, 6, 8)))

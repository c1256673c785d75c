"""The error bound (scratch.tolerance) and the reference-error rule; traces: test_compare.py.

Inputs are rounded to the dtype first; the ground truth runs on the rounded values, so what is
left is the kernel's own rounding. Each bound is shown to hold on seeded random cases, to fail on
a planted mistake, and to be far from vacuous (a float16 result fails the float32 bound).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch
from scratch.bounds.tolerance import (
    UNIT_ROUNDOFF,
    _tolerance_lists,
    gamma,
    reference_error_rule,
    tolerance,
    ulp,
)

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def plain_numpy(q, k, v, scale, mask=None, dtype=np.float32):
    """softmax(q @ k^T * scale + mask) @ v written out in numpy in `dtype`."""
    q, k, v = (np.asarray(a, dtype=dtype) for a in (q, k, v))
    scaled = (q @ np.swapaxes(k, -1, -2)) * dtype(scale)  # (..., L, E) @ (..., E, S) -> (L, S)
    if mask is not None:
        scaled = np.where(mask, scaled, -np.inf)
    e = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)


def random_case(seed: int, dtype=np.float32, size: float = 2.0):
    """Seeded q, k, v (rounded to dtype, as float64 arrays), a bool mask or None, and a scale."""
    rng = np.random.default_rng(seed)
    L, S, E, Ev = (int(n) for n in rng.integers(1, 17, size=4))
    lead = (int(rng.integers(1, 3)),) if seed % 3 == 0 else ()
    q, k, v = (
        rng.normal(0, size, lead + shape).astype(dtype).astype(np.float64)
        for shape in ((L, E), (S, E), (S, Ev))
    )
    mask = rng.random((L, S)) < 0.7 if seed % 2 else None
    if mask is not None:
        mask[np.arange(L), rng.integers(0, S, L)] = True  # every row keeps a key
    scale = float(rng.uniform(0.05, 1.5)) if seed % 4 == 1 else 1.0 / math.sqrt(E)
    return q, k, v, mask, scale


def truth(q, k, v, mask, scale):
    """The ground truth (output, weights) as float64 arrays and nested weights."""
    attn_mask = None if mask is None else mask.tolist()
    out, w = scratch.scaled_dot_product_attention(
        q.tolist(), k.tolist(), v.tolist(), attn_mask=attn_mask, scale=scale
    )
    return np.array(out), w


# ---------------------------------------------------------------- the bound holds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bound_holds_for_plain_numpy_on_random_cases(dtype):
    """softmax(QK^T)V in float32/float64 stays within the bound on 40 seeded cases."""
    name = np.dtype(dtype).name
    worst = 0.0
    for seed in range(40):
        q, k, v, mask, scale = random_case(seed, dtype)
        want, w = truth(q, k, v, mask, scale)
        got = plain_numpy(q, k, v, scale, mask, dtype).astype(np.float64)
        bound = np.array(tolerance(q, k, v, w, scale=scale, dtype=name))
        ratio = np.max(np.abs(got - want) / bound)
        assert ratio <= 1.0, f"seed {seed}: error is {ratio:.3g}x the {name} bound"
        worst = max(worst, ratio)
    # not vacuous: the bound is within a few thousand of the largest observed error
    assert worst > 1e-4, f"{name} bound looks vacuous: worst error/bound {worst:.2g}"


@given(
    dims=st.tuples(*[st.integers(1, 8)] * 4),
    size=st.integers(-75, 12),
    seed=st.integers(0, 2**32 - 1),
    masked=st.booleans(),
)
def test_bound_holds_for_any_magnitude(dims, size, seed, masked):
    """Values from 2^-75 to 2^12 (underflowing products, huge logits) stay within the bound."""
    L, S, E, Ev = dims
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.normal(0, 2.0**size, shape).astype(np.float32).astype(np.float64)
        for shape in ((L, E), (S, E), (S, Ev))
    )
    mask = None
    if masked:
        mask = rng.random((L, S)) < 0.5
        mask[:, 0] = True
    scale = 1.0 / math.sqrt(E)
    want, w = truth(q, k, v, mask, scale)
    got = plain_numpy(q, k, v, scale, mask).astype(np.float64)
    bound = np.array(tolerance(q, k, v, w, scale=scale, dtype="float32"))
    assert np.all(np.abs(got - want) <= bound)


def test_float64_bound_is_float64_tight():
    """The float64 bound is a few hundred float64 ulps relative to the output, no more."""
    q, k, v, mask, scale = random_case(5, np.float64)
    _, w = truth(q, k, v, mask, scale)
    bound = np.array(tolerance(q, k, v, w, scale=scale, dtype="float64"))
    size = np.array(w) @ np.abs(v)  # sum_j p_ij |v_jc|
    assert np.max(bound / size) < 1e-13


def test_planted_mistakes_fail_the_bound():
    """A 1e-3 error in the scale, or 10 float32 ulps beyond the bound, fail the float32 bound."""
    q, k, v, mask, scale = random_case(7)
    want, w = truth(q, k, v, mask, scale)
    bound = np.array(tolerance(q, k, v, w, scale=scale, dtype="float32"))
    wrong_scale = plain_numpy(q, k, v, scale * 1.001, mask).astype(np.float64)
    assert np.any(np.abs(wrong_scale - want) > bound)
    # one element pushed 10 float32 ulps past its bound
    got = plain_numpy(q, k, v, scale, mask).astype(np.float64)
    i = np.unravel_index(np.argmax(np.abs(want)), want.shape)
    got[i] = want[i] + bound[i] + 10 * ulp(want[i], "float32")
    assert np.abs(got[i] - want[i]) > bound[i]
    # a 1e-4 relative error in every element fails (the bound here is ~2e-5 relative)
    assert np.any(np.abs(want * (1 + 1e-4) - want) > bound)


def test_masked_rows_allow_no_difference():
    """Fully masked rows: bound 0 (zero policy rows must be exact; NaN rows compare NaN-ness)."""
    q, k, v = (np.ones((3, 2)) for _ in range(3))
    mask = [[True, True, True], [False, False, False], [True, False, True]]
    for policy in ("zero", "nan"):
        _, w = scratch.scaled_dot_product_attention(q, k, v, attn_mask=mask, masked_rows=policy)
        bound = tolerance(q, k, v, w, dtype="float32")
        assert bound[1] == [0.0, 0.0]
        assert min(bound[0]) > 0 and min(bound[2]) > 0


def test_plain_python_path_matches_numpy_path():
    """The stdlib fallback computes the same bound as the numpy path."""
    q, k, v, mask, scale = random_case(3)
    _, w = truth(q, k, v, mask, scale)
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        fast = np.array(tolerance(q, k, v, w, scale=scale, dtype=dtype))
        slow = np.array(
            _tolerance_lists(q.tolist(), k.tolist(), v.tolist(), w, scale, dtype, None, False)
        )
        np.testing.assert_allclose(slow, fast, rtol=1e-12, atol=0)


def test_float_mask_magnitude_enters_the_bound():
    """A float mask's rounding adds |mask| to S_i, so large finite masks widen the bound."""
    q, k, v, _, _ = random_case(2)
    mask = np.full((q.shape[-2], k.shape[-2]), -30.0)
    _, w = scratch.scaled_dot_product_attention(q, k, v, attn_mask=mask.tolist())
    without = np.array(tolerance(q, k, v, w, dtype="float32"))
    with_mask = np.array(tolerance(q, k, v, w, dtype="float32", attn_mask=mask))
    assert np.all(with_mask > without)


def test_bfloat16_bound_stays_finite_for_many_keys():
    """g(n) = n u / (1 - n u) breaks for bfloat16 at 256 keys; sums in float32 keep it finite."""
    assert gamma(300, UNIT_ROUNDOFF["bfloat16"]) == math.inf
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 8)), rng.normal(size=(600, 8)), rng.normal(size=(600, 4))
    _, w = scratch.scaled_dot_product_attention(q, k, v)
    bound = np.array(tolerance(q, k, v, w, dtype="bfloat16"))
    size = np.array(w) @ np.abs(v)
    assert np.all(np.isfinite(bound)) and np.max(bound / size) < 0.05


def test_bad_dtype_is_named():
    with pytest.raises(ValueError, match="dtype"):
        tolerance([[1.0]], [[1.0]], [[1.0]], [[1.0]], dtype="float8")


BAD_TOLERANCE_INPUTS = [  # (query, key, value, weights, keywords, error, argument named)
    ([1.0, 2.0], [[1.0, 2.0]], [[1.0]], [[1.0]], {}, ValueError, "query"),
    (None, [[1.0, 2.0]], [[1.0]], [[1.0]], {}, TypeError, "query"),
    ([[1.0, 2.0]], [[1.0, 2.0, 3.0]], [[1.0]], [[1.0]], {}, ValueError, "key"),
    ([[1.0, 2.0]], [[1.0, 2.0]], [[1.0], [2.0]], [[1.0]], {}, ValueError, "value"),
    ([[1.0, 2.0]], [[1.0, 2.0]], [[1.0]], [[1.0, 0.0]], {}, ValueError, "weights"),
    ([[1.0, 2.0]], [[1.0, 2.0]], [[1.0]], [[1.0]], {"scale": "x"}, TypeError, "scale"),
    ([[1.0]], [[1.0]], [[1.0]], [[1.0]], {"attn_mask": [[0.0, 1.0]]}, ValueError, "attn_mask"),
]


@pytest.mark.parametrize(("q", "k", "v", "w", "kwargs", "error", "named"), BAD_TOLERANCE_INPUTS)
def test_bad_tolerance_input_is_named(q, k, v, w, kwargs, error, named):
    """Shapes the ground truth refuses are refused here too (no silent bound, no IndexError)."""
    with pytest.raises(error, match=f"^{named}:"):
        tolerance(q, k, v, w, **kwargs)


# ---------------------------------------------------------------- PyTorch's own kernel


def torch_case(seed: int, dtype, L=9, S=13, E=16, Ev=8, masked=False, causal=False):
    """Seeded tensors in dtype, the ground truth on their values, and the bound."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(2, n, d, generator=gen).mul(2).to(dtype) for n, d in ((L, E), (S, E), (S, Ev))
    )
    mask = (torch.rand(L, S, generator=gen) < 0.7) | torch.eye(L, S, dtype=torch.bool)
    mask = mask if masked else None
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal).double()
    qd, kd, vd = (t.double().tolist() for t in (q, k, v))
    want, w = scratch.scaled_dot_product_attention(
        qd, kd, vd, attn_mask=None if mask is None else mask.tolist(), is_causal=causal
    )
    return q, k, v, got.numpy(), np.array(want), w


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (False, True)])
def test_torch_sdpa_passes_its_dtype_bound(dtype, masked, causal):
    for seed in range(3):
        q, k, v, got, want, w = torch_case(
            seed, getattr(torch, dtype), masked=masked, causal=causal
        )
        bound = np.array(tolerance(q, k, v, w, dtype=dtype))
        ratio = np.max(np.abs(got - want) / bound)
        assert ratio <= 1.0, f"seed {seed}: torch {dtype} error is {ratio:.3g}x the bound"


@needs_torch
@pytest.mark.parametrize("gap", [14.0, 17.0, 20.0])
def test_torch_float16_with_underflowing_weights(gap):
    """One key dominates by `gap` logits and carries v = 0; 63 keys with weights ~e^-gap (float16
    subnormals) carry v = 1. Their rounding is absolute, not relative: the floors cover it."""
    S = 64
    q = torch.zeros(1, 4)
    q[0, 0] = 1.0
    k = torch.zeros(S, 4)
    k[0, 0] = 2 * gap  # scale 1/sqrt(4) = 1/2
    k[1:, 0] = torch.linspace(0, 0.5, S - 1)
    v = torch.ones(S, 3)
    v[0] = 0.0
    q, k, v = (t.half() for t in (q, k, v))
    got = F.scaled_dot_product_attention(q, k, v).double().numpy()
    want, w = scratch.scaled_dot_product_attention(*(t.double().tolist() for t in (q, k, v)))
    bound = np.array(tolerance(q, k, v, w, dtype="float16"))
    assert np.all(np.abs(got - np.array(want)) <= bound)


@needs_torch
def test_float16_results_fail_the_float32_bound():
    """The float32 bound is much smaller than float16 rounding: float16 output fails it."""
    q, k, v, got, want, w = torch_case(0, torch.float16)
    assert np.any(np.abs(got - want) > np.array(tolerance(q, k, v, w, dtype="float32")))
    assert np.all(np.abs(got - want) <= np.array(tolerance(q, k, v, w, dtype="float16")))


@needs_torch
def test_reference_error_rule():
    """torch SDPA in float16 is within 2x the plain float16 kernel; a 3x worse output is not."""
    q, k, v, got, want, _ = torch_case(1, torch.float16)
    scaled = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))  # float16 all the way
    plain = (torch.softmax(scaled, dim=-1) @ v).double().numpy()
    rule = reference_error_rule(got, plain, want, dtype="float16")
    assert rule.ok and rule.error <= rule.allowed
    worse = want + 3 * (plain - want) + 8 * ulp(np.max(np.abs(want)), "float16")
    assert not reference_error_rule(worse, plain, want, dtype="float16").ok


@pytest.mark.parametrize(
    "query, error, match",
    [
        (np.zeros((2, 0)), ValueError, r"^query: expected a non-empty array.*\(2, 0\)"),
        (np.array([[1j, 0]]), TypeError, "^query: expected real numbers, found an array of dtype"),
        (np.array([[1 + 0j, 0]]), TypeError, "^query: expected real numbers"),
        ("meta", TypeError, "^query: a tensor on the meta device"),
        ([[1j, 0.0]], TypeError, r"^query: expected a number at query\[0\]\[0\]"),
    ],
)
def test_tolerance_refuses_empty_complex_and_valueless_inputs(query, error, match):
    if isinstance(query, str):  # a tensor without values (needs torch)
        query = pytest.importorskip("torch").ones(2, 2, device="meta")
    rows = 1 if isinstance(query, list) else query.shape[0]
    k = np.ones((3, 2))
    with pytest.raises(error, match=match):
        scratch.tolerance(query, k, np.ones((3, 1)), np.ones((rows, 3)) / 3)


@pytest.mark.parametrize("with_numpy", [True, False], ids=["numpy", "plain-python"])
@pytest.mark.parametrize("bad", [-1e-300, 1.0 + 2**-52, -math.inf, math.inf])
def test_tolerance_refuses_weights_that_are_not_probabilities(monkeypatch, with_numpy, bad):
    """The bound is derived for softmax weights: a negative, infinite or > 1 weight is refused,
    naming where it is; NaN rows (masked_rows='nan') and exact 0 and 1 are accepted."""
    if not with_numpy:
        monkeypatch.setitem(sys.modules, "numpy", None)  # tolerance's `import numpy` fails
    q, k, v = [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[1.0], [2.0], [3.0]]
    good = [[1.0, 0.0, 0.0], [math.nan] * 3]
    assert len(scratch.tolerance(q, k, v, good)) == 2
    bad_weights = [[0.5, 0.5, 0.0], [0.25, bad, 0.25]]
    with pytest.raises(ValueError, match=r"weights\[1\]\[1\]: expected the ground truth's softmax"):
        scratch.tolerance(q, k, v, bad_weights)

"""return_lse=True: each row's log-sum-exp of the masked scores, on every backend and kernel.

The reference is an fsum log-sum-exp written here, independently of the code under test, over
the ground truth's masked scores (and torch.logsumexp in float64 over torch's own). The bound is
derived in `lse_bound`'s docstring (tests/error_bounds.py); the planted-mistake tests show it
rejects the usual slips.
"""

from __future__ import annotations

import math
import random

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import scratch  # noqa: E402
from scratch.backends import get, torch_compat  # noqa: E402
from scratch.backends import numpy_backward as nbw  # noqa: E402
from scratch.backends import numpy_chunked as nc  # noqa: E402
from scratch.bounds.grad_tolerance import compare, gradient_tolerance  # noqa: E402
from scratch.core import attention  # noqa: E402
from scratch.core.options import Options  # noqa: E402
from scratch.core.result import LseResult, Result  # noqa: E402
from tests.error_bounds import lse_bound  # noqa: E402

DTYPES = ("float32", "float64")


# ---------------------------------------------------------------- the reference and its bound


def fsum_lse(row: list[float]) -> float:
    """log sum_j exp(x_j) of one row: the max shifted out, the sum an fsum; -inf if all -inf."""
    top = max(row)
    if top == -math.inf:
        return -math.inf
    return top + math.log(math.fsum(math.exp(x - top) for x in row))


def truth_masked(q, k, v, **kwargs) -> np.ndarray:
    """The ground truth's masked scores (..., L, S), from its own steps."""
    options = Options(**kwargs)
    p = attention.prepare(q.tolist(), k.tolist(), v.tolist(), options)
    steps = attention.attend_all(
        p.q, p.k, p.v, p.plan.lead, p.scale, p.mask, p.masked_rows, group=p.plan.group
    )
    return np.array([s.masked for s in steps]).reshape(p.plan.scores_shape)


def reference_lse(q, k, v, **kwargs) -> np.ndarray:
    """fsum_lse of each row of the ground truth's masked scores, (..., L)."""
    masked = truth_masked(q, k, v, **kwargs)
    rows = masked.reshape(-1, masked.shape[-1]).tolist()
    return np.array([fsum_lse(row) for row in rows]).reshape(masked.shape[:-1])


def assert_lse(name, found, reference, bound):
    """Shape, then -inf at the same rows, no NaN, then |found - reference| <= bound."""
    found = np.asarray(found, dtype=np.float64)
    assert found.shape == reference.shape, f"{name}: shape {found.shape} != {reference.shape}"
    assert not np.isnan(found).any(), f"{name}: NaN in lse"
    empty = np.isneginf(reference)
    assert np.array_equal(np.isneginf(found), empty), f"{name}: -inf at different rows"
    diff = np.abs(np.where(empty, 0.0, found - np.where(empty, 0.0, reference)))
    bound = np.broadcast_to(bound, diff.shape)
    worst = np.unravel_index(np.argmax(diff - bound), diff.shape)
    assert np.all(diff <= bound), (
        f"{name}: |lse - reference| {diff[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
    )


# ---------------------------------------------------------------- every backend and kernel


def _numpy(fast: bool, block=None):
    def run(q, k, v, need_weights, **kwargs):
        with nc.fast_pass(fast):
            r = get("numpy").scaled_dot_product_attention(
                q, k, v, need_weights=need_weights, block_size=block, **kwargs
            )
        return r

    return run


def _torch(q, k, v, need_weights, **kwargs):
    return get("torch-cpu").scaled_dot_product_attention(
        q, k, v, need_weights=need_weights, **kwargs
    )


def _scratch(q, k, v, need_weights, dtype, **kwargs):
    return get("scratch").scaled_dot_product_attention(
        q.tolist(), k.tolist(), v.tolist(), need_weights=need_weights, **kwargs
    )


KERNELS = {  # name: (call, need_weights, dtypes)
    "scratch": (_scratch, True, ("float64",)),
    "numpy-explicit": (_numpy(True), True, DTYPES),
    "numpy-chunked": (_numpy(True), False, DTYPES),
    "numpy-chunked-blocks": (_numpy(True, (2, 3)), False, DTYPES),
    "numpy-chunked-safe": (_numpy(False, (2, 3)), False, DTYPES),
    "torch-explicit": (_torch, True, DTYPES),
    "torch-sdpa": (_torch, False, DTYPES),
}


def run_kernel(name, q, k, v, dtype, **kwargs) -> LseResult:
    """One kernel's LseResult on the (dtype-rounded) inputs."""
    call, need_weights, _ = KERNELS[name]
    return call(q, k, v, need_weights, dtype=dtype, return_lse=True, **kwargs)


def as_array(x) -> np.ndarray:
    """Lists, NumPy arrays and tensors as float64 NumPy."""
    return x.double().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float64)


def make_case(seed, lead, heads, L, S, E, mask, size, dtype):
    """Seeded inputs rounded to dtype (the truth sees the same numbers) and the keyword args."""
    rng = np.random.default_rng(seed)
    Hq, Hkv = heads
    q = rng.standard_normal((*lead, Hq, L, E)) * size
    k = rng.standard_normal((*lead, Hkv, S, E)) * size
    v = rng.standard_normal((*lead, Hkv, S, E))
    q, k, v = (x.astype(dtype).astype(np.float64) for x in (q, k, v))
    kwargs = {"enable_gqa": Hq != Hkv}
    if mask == "causal":
        kwargs["is_causal"] = True
    elif mask == "bool":
        allowed = rng.random((L, S)) < 0.6
        allowed[0] = False  # a fully masked row
        kwargs["attn_mask"] = allowed
    elif mask == "float":
        values = rng.standard_normal((Hq, L, S)).astype(dtype).astype(np.float64)
        kwargs["attn_mask"] = np.where(rng.random((Hq, L, S)) < 0.3, -np.inf, values)
        kwargs["attn_mask"][..., -1, :] = -np.inf  # the last row of every head fully masked
    return q, k, v, kwargs


cases = st.tuples(
    st.integers(0, 2**32 - 1),  # seed
    st.sampled_from([(), (2,)]),  # batch dims
    st.sampled_from([(1, 1), (2, 2), (4, 2)]),  # (query heads, key/value heads): GQA
    st.integers(1, 6),  # L
    st.integers(1, 7),  # S
    st.integers(1, 5),  # E
    st.sampled_from(["none", "causal", "bool", "float"]),
    st.sampled_from([0.1, 1.0, 30.0]),  # size of q and k
    st.sampled_from([None, -0.7, 0.0]),  # scale (0 with causal: torch's fused kernel's NaN case)
)


@given(cases)
def test_lse_of_every_kernel_and_dtype_within_the_bound(case):
    seed, lead, heads, L, S, E, mask, size, scale = case
    for dtype in DTYPES:
        q, k, v, kwargs = make_case(seed, lead, heads, L, S, E, mask, size, dtype)
        kwargs["scale"] = scale
        value = 1.0 / math.sqrt(E) if scale is None else scale
        reference = reference_lse(q, k, v, **kwargs)
        given_mask = kwargs.get("attn_mask")
        bound = lse_bound(q, k, given_mask, value, dtype) + lse_bound(
            q, k, given_mask, value, "float64"
        )
        for name, (_, _, dtypes) in KERNELS.items():
            if dtype in dtypes:
                result = run_kernel(name, q, k, v, dtype, **kwargs)
                assert_lse(f"{name} {dtype}", as_array(result.lse), reference, bound)
                assert np.shape(result.lse) == np.shape(result.output)[:-1]


@given(cases)
def test_truth_lse_matches_torch_logsumexp_in_float64(case):
    seed, lead, heads, L, S, E, mask, size, scale = case
    q, k, v, kwargs = make_case(seed, lead, heads, L, S, E, mask, size, "float64")
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    kwargs["scale"] = scale
    _, lse = scratch.scaled_dot_product_attention(
        q.tolist(), k.tolist(), v.tolist(), return_lse=True, **kwargs
    )
    # torch's own float64 scores and masks, then torch.logsumexp (independent of scratch)
    qt, kt = torch.from_numpy(q), torch.from_numpy(k)
    if kwargs["enable_gqa"]:
        kt = kt.repeat_interleave(heads[0] // heads[1], dim=-3)
    scores = (qt @ kt.transpose(-1, -2)) * scale
    if mask == "causal":
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    elif mask in ("bool", "float"):
        m = torch.from_numpy(np.asarray(kwargs["attn_mask"]))
        scores = scores.masked_fill(~m, -math.inf) if mask == "bool" else scores + m
    expected = torch.logsumexp(scores, dim=-1).numpy()
    bound = 2 * lse_bound(q, k, kwargs.get("attn_mask"), scale, "float64")
    assert_lse("scratch vs torch.logsumexp", np.array(lse), expected, bound)


def test_lse_of_1e4_logits_is_finite_and_within_the_bound():
    # scores of 1e4 and 9999: exp(1e4) overflows even float64, so any kernel that forgets the
    # max shift (or the fast pass's offset) gives inf here
    q = np.array([[100.0, 0.0], [0.0, 100.0], [-100.0, 0.0]])
    k = np.array([[100.0, 0.0], [99.99, 0.0], [0.0, 1.0]])
    v = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    for dtype in DTYPES:
        qd, kd, vd = (x.astype(dtype).astype(np.float64) for x in (q, k, v))
        reference = reference_lse(qd, kd, vd, scale=1.0)
        bound = lse_bound(qd, kd, None, 1.0, dtype) + lse_bound(qd, kd, None, 1.0, "float64")
        second = 100.0 * kd[1, 0]  # 9999 up to the rounding of 99.99 to dtype
        assert reference[0] == pytest.approx(1e4 + math.log1p(math.exp(second - 1e4)), abs=1e-9)
        for name, (_, _, dtypes) in KERNELS.items():
            if dtype in dtypes:
                lse = as_array(run_kernel(name, qd, kd, vd, dtype, scale=1.0).lse)
                assert np.isfinite(lse).all(), f"{name} {dtype}: {lse}"
                assert_lse(f"{name} {dtype}", lse, reference, bound)


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_fully_masked_rows_get_minus_inf_under_every_policy(policy):
    q, k, v, kwargs = make_case(3, (), (2, 2), 4, 5, 3, "bool", 1.0, "float64")
    reference = reference_lse(q, k, v, **kwargs)
    assert np.isneginf(reference[..., 0]).all() and np.isfinite(reference[..., 1:]).all()
    for name in KERNELS:
        result = run_kernel(name, q, k, v, "float64", masked_rows=policy, **kwargs)
        lse, out = as_array(result.lse), as_array(result.output)
        assert np.isneginf(lse[..., 0]).all(), f"{name}: {lse[..., 0]}"
        # the policy still decides the output of those rows
        expected = {"zero": 0.0, "nan": np.nan, "uniform": v.mean(axis=-2)[..., None, :]}[policy]
        np.testing.assert_allclose(
            out[..., :1, :], np.broadcast_to(expected, out[..., :1, :].shape), rtol=1e-12
        )


def test_dropout_leaves_lse_the_pre_dropout_one():
    q, k, v, kwargs = make_case(8, (), (2, 2), 5, 6, 3, "float", 1.0, "float64")
    reference = reference_lse(q, k, v, **kwargs)
    bound = 2 * lse_bound(q, k, kwargs["attn_mask"], 1 / math.sqrt(3), "float64")
    rngs = {"scratch": random.Random(1), "numpy": np.random.default_rng(1), "torch": 1}
    for name in KERNELS:
        rng = rngs[name.split("-")[0]]
        result = run_kernel(name, q, k, v, "float64", dropout_p=0.5, rng=rng, **kwargs)
        assert_lse(f"{name} with dropout", as_array(result.lse), reference, bound)


def test_default_return_is_unchanged_and_return_lse_keeps_output_and_weights():
    q, k, v, kwargs = make_case(5, (), (2, 2), 4, 6, 3, "bool", 1.0, "float64")
    for name, (call, need_weights, _) in KERNELS.items():
        plain = call(q, k, v, need_weights, dtype="float64", **kwargs)
        assert isinstance(plain, Result) and len(plain) == 2
        with_lse = call(q, k, v, need_weights, dtype="float64", return_lse=True, **kwargs)
        assert isinstance(with_lse, LseResult) and with_lse.kernel == plain.kernel
        output, lse = with_lse
        # bit for bit: the same kernel with the same calls on the same shapes (3-D inputs: torch's
        # own SDPA in both); the lse comes from sums the kernel holds anyway
        np.testing.assert_array_equal(as_array(output), as_array(plain.output), err_msg=name)
        if need_weights:
            np.testing.assert_array_equal(as_array(with_lse.weights), as_array(plain.weights))
        else:
            assert with_lse.weights is None and plain.weights is None
        assert lse is with_lse.lse
    out, weights = scratch.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist())
    assert np.shape(weights) == (2, 4, 6)  # (output, weights) without return_lse


def test_torch_sdpa_without_the_private_op_falls_back(monkeypatch):
    q, k, v, kwargs = make_case(6, (2,), (4, 2), 5, 6, 3, "bool", 1.0, "float32")
    reference = reference_lse(q, k, v, **kwargs)
    bound = lse_bound(q, k, None, 1 / math.sqrt(3), "float32") + lse_bound(
        q, k, None, 1 / math.sqrt(3), "float64"
    )
    used = run_kernel("torch-sdpa", q, k, v, "float32", **kwargs)
    assert "fused CPU kernel" in used.detail
    monkeypatch.setattr(torch_compat, "_FLASH_CPU", "no_such_op")  # gone in some later torch
    fallback = run_kernel("torch-sdpa", q, k, v, "float32", **kwargs)
    assert "torch.logsumexp" in fallback.detail
    for result in (used, fallback):
        assert_lse(result.detail, as_array(result.lse), reference, bound)
    # also where the op exists but refuses the call: 5-D inputs, value width != key width
    five = run_kernel("torch-sdpa", q[None], k[None], v[None, ..., :2], "float32", **kwargs)
    assert "torch.logsumexp" in five.detail
    assert_lse("5-D", as_array(five.lse), reference[None], bound[None])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_torch_16_bit_lse_is_float32_within_the_float32_bound(dtype, mask):
    # 16-bit storage, sums in float32 (as torch's kernels): the lse is a float32 tensor, and the
    # inputs (and float mask) are exact in float32, so the float32 bound on them applies
    q, k, v, kwargs = make_case(21, (2,), (4, 2), 5, 6, 3, mask, 1.0, "float32")
    wide = getattr(torch, dtype)
    q, k, v = (torch.from_numpy(x).to(wide).double().numpy() for x in (q, k, v))
    m = kwargs.get("attn_mask")
    if m is not None and m.dtype != np.bool_:
        kwargs["attn_mask"] = m = torch.from_numpy(m).to(wide).double().numpy()
    reference = reference_lse(q, k, v, **kwargs)
    bound = lse_bound(q, k, m, 1 / math.sqrt(3), "float32") + lse_bound(
        q, k, m, 1 / math.sqrt(3), "float64"
    )
    for need_weights in (True, False):
        result = _torch(q, k, v, need_weights, dtype=dtype, return_lse=True, **kwargs)
        assert result.output.dtype == wide and result.lse.dtype == torch.float32
        assert_lse(f"{dtype} {result.kernel}", as_array(result.lse), reference, bound)


@pytest.mark.parametrize("bad", [1, 0, "yes", None, np.bool_(True)])
def test_bad_return_lse_is_a_type_error_naming_it(bad):
    q = [[1.0, 0.0], [0.0, 1.0]]
    calls = [lambda: scratch.scaled_dot_product_attention(q, q, q, return_lse=bad)]
    for name in ("scratch", "numpy", "torch-cpu"):
        for need_weights in (True, False):
            fn = get(name).scaled_dot_product_attention
            calls.append(
                lambda fn=fn, nw=need_weights: fn(q, q, q, return_lse=bad, need_weights=nw)
            )
    calls.append(lambda: Options(return_lse=bad))
    for call in calls:
        with pytest.raises(TypeError, match="^return_lse: expected True or False, found"):
            call()


def test_options_carry_return_lse():
    assert Options().return_lse is False
    assert Options(is_causal=True, return_lse=True).describe() == "mask=causal, return_lse"


# ---------------------------------------------------------------- the bound rejects mistakes


def _mistaken(mistake: str, lse: np.ndarray, masked: np.ndarray) -> np.ndarray:
    """A correct lse turned into what a known slip would give."""
    top = masked.max(-1)
    if mistake == "log2 units":  # exp2 kernel's running values not multiplied back by ln 2
        return lse / math.log(2.0)
    if mistake == "max shift left out":  # log(sum exp(x - max)) without adding the max back
        return np.where(np.isneginf(lse), lse, lse - np.where(np.isneginf(top), 0.0, top))
    if mistake == "log of the mean":  # divided the sum by S
        return np.where(np.isneginf(lse), lse, lse - math.log(masked.shape[-1]))
    if mistake == "row max only":  # the max taken for the whole log-sum-exp
        return top
    raise ValueError(mistake)


@pytest.mark.parametrize(
    "mistake", ["none", "log2 units", "max shift left out", "log of the mean", "row max only"]
)
def test_bound_rejects_planted_mistakes(mistake):
    failures = 0
    for seed in range(5):
        q, k, v, kwargs = make_case(seed, (), (2, 2), 4, 6, 3, "float", 1.0, "float32")
        masked = truth_masked(q, k, v, **kwargs)
        reference = reference_lse(q, k, v, **kwargs)
        bound = lse_bound(q, k, kwargs["attn_mask"], 1 / math.sqrt(3), "float32")
        found = as_array(run_kernel("numpy-chunked", q, k, v, "float32", **kwargs).lse)
        if mistake != "none":
            found = _mistaken(mistake, found, masked)
        try:
            assert_lse(mistake, found, reference, 2 * bound)
        except AssertionError:
            failures += 1
    assert failures == (0 if mistake == "none" else 5)


# ---------------------------------------------------------------- the tiled backward consumes it


def _grads_ok(found, truth, tol) -> bool:
    """Every gradient within its grad_tolerance bound of the truth."""
    names = ("grad_query", "grad_key", "grad_value")
    return all(compare(a, b, tol[n]).ok for n, a, b in zip(names, found, truth))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", ["none", "causal", "bool"])
def test_tiled_backward_uses_the_forwards_lse(dtype, mask, monkeypatch):
    q, k, v, kwargs = make_case(4, (), (4, 2), 7, 9, 3, mask, 1.0, dtype)
    g = np.random.default_rng(9).standard_normal((4, 7, 3)).astype(dtype)
    # the forward: NumPy's chunked kernel, output and lse
    forward = get("numpy").scaled_dot_product_attention(
        q, k, v, **kwargs, need_weights=False, return_lse=True, dtype=dtype
    )
    inputs = (q.astype(dtype), k.astype(dtype), v.astype(dtype), g)
    truth = scratch.scaled_dot_product_attention_backward(*(x.tolist() for x in inputs), **kwargs)
    tol = gradient_tolerance(*(x.tolist() for x in inputs), **kwargs, dtype=dtype)
    recomputed = nbw.scaled_dot_product_attention_backward(
        *inputs, **kwargs, kernel="tiled", block_size=3
    )

    def no_forward(*args, **kw):
        raise AssertionError("the tiled backward recomputed the forward it was given")

    monkeypatch.setattr(nbw, "_forward_tiled", no_forward)

    def tiled(lse):
        return nbw.scaled_dot_product_attention_backward(
            *inputs, **kwargs, kernel="tiled", block_size=3, output=forward.output, lse=lse
        )

    given_lse = tiled(forward.lse)
    assert _grads_ok(given_lse, truth, tol) and _grads_ok(recomputed, truth, tol)
    for a, b in zip(given_lse, recomputed):  # the same gradients either way
        np.testing.assert_allclose(a, b, rtol=1e-4 if dtype == "float32" else 1e-11, atol=1e-6)
    # a wrong lse gives wrong gradients: the kernel really reads it
    live = np.isfinite(forward.lse)
    for wrong in (forward.lse + np.where(live, 0.5, 0.0), forward.lse / math.log(2.0)):
        assert not _grads_ok(tiled(wrong.astype(dtype)), truth, tol)


def test_tiled_backward_with_the_forwards_lse_under_dropout():
    # one random.Random stream rule everywhere: the forward, the backward and the truth draw the
    # same keep mask from the same seed, and lse stays the pre-dropout one the tiled kernel needs
    q, k, v, kwargs = make_case(12, (), (2, 2), 6, 7, 3, "causal", 1.0, "float64")
    g = np.random.default_rng(3).standard_normal((2, 6, 3))
    kwargs["dropout_p"] = 0.3
    forward = get("numpy").scaled_dot_product_attention(
        q, k, v, **kwargs, need_weights=False, return_lse=True, rng=random.Random(4)
    )
    inputs = (q, k, v, g)
    truth = scratch.scaled_dot_product_attention_backward(
        *(x.tolist() for x in inputs), **kwargs, rng=random.Random(4)
    )
    tol = gradient_tolerance(*(x.tolist() for x in inputs), **kwargs, dtype="float64")
    found = nbw.scaled_dot_product_attention_backward(
        *inputs,
        **kwargs,
        rng=random.Random(4),
        kernel="tiled",
        block_size=4,
        output=forward.output,
        lse=forward.lse,
    )
    assert _grads_ok(found, truth, tol)
    other_mask = nbw.scaled_dot_product_attention_backward(
        *inputs,
        **kwargs,
        rng=random.Random(5),
        kernel="tiled",
        block_size=4,
        output=forward.output,
        lse=forward.lse,
    )
    assert not _grads_ok(other_mask, truth, tol)  # the check can tell a different keep mask


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (torch.cuda.is_available())")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_lse_on_cuda_within_the_bound(dtype, mask):
    q, k, v, kwargs = make_case(7, (2,), (4, 2), 5, 6, 3, mask, 1.0, dtype)
    reference = reference_lse(q, k, v, **kwargs)
    m = kwargs.get("attn_mask")
    bound = lse_bound(q, k, m, 1 / math.sqrt(3), dtype) + lse_bound(
        q, k, m, 1 / math.sqrt(3), "float64"
    )
    for need_weights in (True, False):  # explicit, and SDPA + torch.logsumexp by query chunks
        result = get("torch-cuda").scaled_dot_product_attention(
            q, k, v, **kwargs, need_weights=need_weights, dtype=dtype, return_lse=True
        )
        assert result.lse.device.type == "cuda"
        assert_lse(f"cuda {need_weights} {dtype}", as_array(result.lse.cpu()), reference, bound)

"""NumPy and torch backward kernels against the ground truth, within
scratch.bounds.grad_tolerance."""

import math
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch
from scratch.backends import get
from scratch.backends import numpy_backward as nb
from scratch.backends.numpy_inputs import Draws
from scratch.bounds.grad_tolerance import NAMES, compare, gradient_tolerance

torch = pytest.importorskip("torch")
from scratch.backends import torch_backward as tb  # noqa: E402

GRADS = ("grad_query", "grad_key", "grad_value")


def _numpy(kernel, block=None):
    def run(*args, **kwargs):
        extra = {"block_size": block} if block else {}
        return nb.scaled_dot_product_attention_backward(*args, kernel=kernel, **kwargs, **extra)

    return run


def _numpy_given_weights(*args, **kwargs):
    """The explicit kernel reading the numpy forward's own output and weights (no recompute);
    with dropout the forward's weights are dropped ones, so P is recomputed as before."""
    if kwargs.get("dropout_p", 0.0) > 0:
        return nb.scaled_dot_product_attention_backward(*args, **kwargs)
    forward = get("numpy").scaled_dot_product_attention(*args[:3], **kwargs, need_weights=True)
    return nb.scaled_dot_product_attention_backward(
        *args, **kwargs, output=forward[0], weights=forward.weights
    )


def _torch(kernel):
    def run(*args, **kwargs):
        grads = tb.scaled_dot_product_attention_backward(*args, kernel=kernel, **kwargs)
        return [g.double().numpy() for g in grads]

    return run


KERNELS = {
    "numpy-explicit": _numpy("explicit"),
    "numpy-explicit-given-weights": _numpy_given_weights,
    "numpy-tiled": _numpy("tiled", block=2),
    "numpy-tiled-3": _numpy("tiled", block=3),
    "torch-autograd": _torch("autograd"),
    "torch-explicit": _torch("explicit"),
}


def problem(seed, L, S, E, Ev, heads=(2, 2), mask="none", size=1.0, dtype="float64"):
    """Seeded inputs (rounded to dtype) and the keyword arguments of one call."""
    rng = np.random.default_rng(seed)
    Hq, Hkv = heads
    q = rng.standard_normal((Hq, L, E)) * size
    k = rng.standard_normal((Hkv, S, E)) * size
    v, g = rng.standard_normal((Hkv, S, Ev)), rng.standard_normal((Hq, L, Ev))
    q, k, v, g = (x.astype(dtype) for x in (q, k, v, g))
    kwargs = {"enable_gqa": Hq != Hkv}
    if mask == "causal":
        kwargs["is_causal"] = True
    elif mask == "bool":  # some rows fully masked
        kwargs["attn_mask"] = rng.random((L, S)) < 0.6
    elif mask == "float":
        kwargs["attn_mask"] = rng.choice([0.0, -1.5, -math.inf], size=(Hq, L, S))
    return (q, k, v, g), kwargs


def check_against_truth(fn, inputs, kwargs, dtype, seed=0):
    """Every gradient of fn within its bound of the ground truth; returns the worst ratios."""
    dropout = kwargs.get("dropout_p", 0.0) > 0
    truth = scratch.scaled_dot_product_attention_backward(
        *(x.astype(float).tolist() for x in inputs),
        **kwargs,
        rng=random.Random(seed) if dropout else None,
    )
    tol = gradient_tolerance(*(x.tolist() for x in inputs), **kwargs, dtype=dtype)
    ours = fn(*inputs, **kwargs, rng=random.Random(seed) if dropout else None)
    ratios = {}
    for name, a, b in zip(GRADS, ours, truth):
        assert np.shape(a) == np.shape(b), f"{name}: shape {np.shape(a)} vs {np.shape(b)}"
        result = compare(a, b, tol[name])
        assert result.ok, f"{name}: {result}"
        ratios[name] = result.worst_ratio
    return ratios


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@given(
    seed=st.integers(0, 10_000),
    L=st.integers(1, 6),
    S=st.integers(1, 6),
    E=st.integers(1, 4),
    Ev=st.integers(1, 4),
    heads=st.sampled_from([(1, 1), (2, 2), (4, 2), (4, 1)]),
    mask=st.sampled_from(["none", "causal", "bool", "float"]),
    policy=st.sampled_from(["zero", "nan", "uniform"]),
    scale=st.sampled_from([None, 0.0, -0.7, 2.5]),
    size=st.sampled_from([1.0, 6.0]),  # 6: large logits, saturated rows
    dropout_p=st.sampled_from([0.0, 0.0, 0.3]),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_backend_gradients_within_the_bound(
    kernel, seed, L, S, E, Ev, heads, mask, policy, scale, size, dropout_p, dtype
):
    inputs, kwargs = problem(seed, L, S, E, Ev, heads, mask, size, dtype)
    kwargs.update(scale=scale, masked_rows=policy, dropout_p=dropout_p)
    check_against_truth(KERNELS[kernel], inputs, kwargs, dtype, seed)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_fully_masked_rows_follow_the_policy(kernel, policy):
    inputs, kwargs = problem(7, 4, 5, 3, 2, (4, 2))
    mask = np.ones((4, 5), bool)
    mask[2] = False  # row 2 sees no key
    kwargs.update(attn_mask=mask, masked_rows=policy)
    check_against_truth(KERNELS[kernel], inputs, kwargs, "float64")
    dq, dk, dv = KERNELS[kernel](*inputs, **kwargs)
    if policy == "nan":
        assert np.isnan(dq[:, 2]).all() and np.isnan(dk).all() and np.isnan(dv).all()
        assert not np.isnan(np.delete(dq, 2, axis=1)).any()
    else:  # a constant row: no gradient reaches q from it, and none is NaN
        assert (dq[:, 2] == 0).all()
        assert not any(np.isnan(x).any() for x in (dq, dk, dv))


MASK_SHAPES = {  # mask rank -> a shape that broadcasts to the (B, H, L, S) = (2, 4, 3, 5) scores
    1: (5,),  # (S,): one row of keys for every query
    2: (3, 5),  # (L, S)
    3: (4, 3, 5),  # (H, L, S)
    4: (2, 1, 3, 5),  # (B, 1, L, S)
}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("rank", sorted(MASK_SHAPES))
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
def test_4d_inputs_with_masks_of_every_rank(kernel, rank, kind, heads):
    """4-D inputs with a 1-D .. 4-D mask, bool and float: every kernel's gradients within the
    bound of the ground truth's (torch's autograd kernel raised IndexError on a 1-D mask)."""
    rng = np.random.default_rng(10 * rank + heads[1])
    Hq, Hkv = heads
    q, g = rng.standard_normal((2, Hq, 3, 4)), rng.standard_normal((2, Hq, 3, 2))
    k, v = rng.standard_normal((2, Hkv, 5, 4)), rng.standard_normal((2, Hkv, 5, 2))
    allowed = rng.random(MASK_SHAPES[rank]) < 0.7
    allowed[..., 0] = True  # every row keeps a key: the mask's rank is what is tested here
    mask = (
        allowed if kind == "bool" else np.where(allowed, rng.uniform(-1, 1, allowed.shape), -np.inf)
    )
    kwargs = {"attn_mask": mask, "enable_gqa": Hq != Hkv}
    check_against_truth(KERNELS[kernel], (q, k, v, g), kwargs, "float64")


def test_no_false_alarm_over_many_seeds():
    """Correct kernels, float32 and float64, 40 seeds each, mixed problems: never flagged."""
    worst = 0.0
    for seed in range(40):
        rng = random.Random(seed)
        mask = rng.choice(["none", "causal", "bool", "float"])
        heads = rng.choice([(2, 2), (4, 2)])
        for dtype in ("float32", "float64"):
            inputs, kwargs = problem(seed, 5, 6, 4, 3, heads, mask, rng.choice([1.0, 4.0]), dtype)
            for kernel in ("numpy-explicit", "numpy-tiled", "torch-autograd", "torch-explicit"):
                ratios = check_against_truth(KERNELS[kernel], inputs, kwargs, dtype)
                worst = max(worst, *ratios.values())
    assert worst < 1.0


def test_the_float64_bound_refuses_float32_arithmetic():
    """The bound is tight enough to tell float32 from float64: a kernel's dtype matters."""
    inputs, kwargs = problem(3, 6, 6, 4, 4, (2, 2), "none", 1.0, "float64")
    truth = scratch.scaled_dot_product_attention_backward(*(x.tolist() for x in inputs))
    ours = nb.scaled_dot_product_attention_backward(*inputs, dtype="float32")
    tol = gradient_tolerance(*(x.tolist() for x in inputs), dtype="float64")
    assert len(ours) == len(truth) == len(GRADS)  # zip below compares all three gradients
    assert not any(compare(a, b, tol[n]).ok for n, a, b in zip(GRADS, ours, truth))
    tol32 = gradient_tolerance(*(x.tolist() for x in inputs), dtype="float32")
    assert all(compare(a, b, tol32[n]).ok for n, a, b in zip(GRADS, ours, truth))


# ---------------------------------------------------------------- planted mistakes


def mistaken_backward(q, k, v, g, mistake, scale=None, enable_gqa=False, rng=None, dropout_p=0.0):
    """A numpy backward with one classic mistake planted (`mistake` names which)."""
    group = q.shape[-3] // k.shape[-3] if enable_gqa else 1
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    kr, vr = np.repeat(k, group, -3), np.repeat(v, group, -3)
    z = q @ np.swapaxes(kr, -1, -2) * s
    P = np.exp(z - z.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    keep = 1.0
    if dropout_p:
        draws = Draws(random if rng is None else rng)(P.shape)
        keep = np.where(draws >= dropout_p, 1 / (1 - dropout_p), 0.0)
    Pd = P * keep
    O = Pd @ vr
    if mistake == "dropout not reused":  # fresh draws in the backward
        keep = np.where(np.random.default_rng(99).random(P.shape) >= dropout_p, 1 / 0.7, 0.0)
        Pd = P * keep
    dV = np.swapaxes(Pd, -1, -2) @ g
    dP = g @ np.swapaxes(vr, -1, -2) * keep
    D = (g * O).sum(-1, keepdims=True)
    if mistake == "D left out":
        D = 0.0
    if mistake == "D as rowsum(dP * P_d)":
        D = (dP * Pd).sum(-1, keepdims=True)
    dS = P * (dP - D)
    if mistake == "dS transposed":
        dS = np.swapaxes(dS, -1, -2)
    dQ = dS @ kr * (1.0 if mistake == "scale missing in dQ" else s)
    dK = np.swapaxes(dS, -1, -2) @ q * (s * s if mistake == "scale twice in dK" else s)
    if mistake == "dQ with K^T":
        dQ = np.swapaxes(dS, -1, -2) @ kr * s
    if group > 1:
        pick = (lambda x: x[..., ::group, :, :]) if mistake == "GQA not summed" else None
        fold = pick or (lambda x: x.reshape(x.shape[:-3] + (-1, group) + x.shape[-2:]).sum(-3))
        dK, dV = fold(dK), fold(dV)
    if mistake == "dK and dV swapped":
        dK, dV = dV, dK
    return dQ, dK, dV


@pytest.mark.parametrize(
    "mistake, heads, dropout_p",
    [
        ("none", (4, 2), 0.3),
        ("D left out", (2, 2), 0.0),
        ("D as rowsum(dP * P_d)", (2, 2), 0.3),
        ("dS transposed", (2, 2), 0.0),
        ("dQ with K^T", (2, 2), 0.0),
        ("scale missing in dQ", (2, 2), 0.0),
        ("scale twice in dK", (2, 2), 0.0),
        ("GQA not summed", (4, 2), 0.0),
        ("dropout not reused", (2, 2), 0.3),
        ("dK and dV swapped", (2, 2), 0.0),
    ],
)
def test_planted_mistakes_break_the_bound(mistake, heads, dropout_p):
    inputs, kwargs = problem(11, 5, 5, 3, 3, heads, "none", 1.0, "float32")
    kwargs["dropout_p"] = dropout_p

    def fn(*args, **kw):
        kw.pop("masked_rows", None)
        return mistaken_backward(*args, mistake, **kw)

    if mistake == "none":  # the mistake-free version passes: the failures below are the mistakes'
        check_against_truth(fn, inputs, kwargs, "float32", seed=5)
        return
    with pytest.raises(AssertionError, match="grad_"):
        check_against_truth(fn, inputs, kwargs, "float32", seed=5)


# ---------------------------------------------------------------- API


def test_tiled_takes_the_forwards_output_and_lse():
    inputs, kwargs = problem(2, 7, 9, 3, 2, (4, 2), "causal")
    output, lse = nb.forward_with_lse(*inputs[:3], **kwargs)
    forward = scratch.scaled_dot_product_attention(*(x.tolist() for x in inputs[:3]), **kwargs)
    np.testing.assert_allclose(output, forward[0], rtol=1e-12, atol=1e-14)
    scores = np.einsum("hle,hse->hls", inputs[0], np.repeat(inputs[1], 2, 0)) / math.sqrt(3)
    scores = np.where(np.tril(np.ones((7, 9), bool)), scores, -np.inf)
    np.testing.assert_allclose(lse, np.log(np.exp(scores).sum(-1)), rtol=1e-12)
    given_lse = nb.scaled_dot_product_attention_backward(
        *inputs, **kwargs, kernel="tiled", block_size=4, output=output, lse=lse
    )
    explicit = nb.scaled_dot_product_attention_backward(*inputs, **kwargs)
    for a, b in zip(given_lse, explicit):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_explicit_takes_the_forwards_weights(seed):
    # what scratch.train does: the backward reads the forward's P instead of recomputing it
    inputs, kwargs = problem(seed, 6, 6, 3, 2, (4, 2), "causal", 2.0, "float32")
    check_against_truth(_numpy_given_weights, inputs, kwargs, "float32")
    forward = get("numpy").scaled_dot_product_attention(*inputs[:3], **kwargs, need_weights=True)
    output, weights = forward[0], forward.weights

    other, _ = problem(seed + 100, 6, 6, 3, 2, (4, 2), "causal", 2.0, "float32")
    stale = get("numpy").scaled_dot_product_attention(*other[:3], **kwargs, need_weights=True)

    def planted(*args, **kw):  # another problem's weights (causal, rows summing to 1 too)
        return nb.scaled_dot_product_attention_backward(
            *args, **kw, output=output, weights=stale.weights
        )

    with pytest.raises(AssertionError, match="grad_"):
        check_against_truth(planted, inputs, kwargs, "float32")
    call = nb.scaled_dot_product_attention_backward
    with pytest.raises(ValueError, match="weights: pass the same forward's output"):
        call(*inputs, **kwargs, weights=weights)
    with pytest.raises(ValueError, match="weights: only without dropout"):
        call(*inputs, **kwargs, dropout_p=0.5, output=output, weights=weights)
    with pytest.raises(ValueError, match="weights: read by the explicit kernel only"):
        call(*inputs, **kwargs, kernel="tiled", output=output, weights=weights)
    with pytest.raises(ValueError, match=r"output, weights: expected shapes"):
        call(*inputs, **kwargs, output=output, weights=weights[..., :-1])


def test_backends_registry_offers_the_backward():
    inputs, kwargs = problem(4, 3, 4, 2, 2)
    truth = scratch.scaled_dot_product_attention_backward(*(x.tolist() for x in inputs))
    for name in ("scratch", "numpy", "torch"):
        grads = get(name).scaled_dot_product_attention_backward(*inputs)
        for a, b in zip(grads, truth):
            a = a.double().numpy() if hasattr(a, "detach") else np.asarray(a)
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_gradient_tolerance_covers_every_step_with_its_shape():
    inputs, kwargs = problem(1, 3, 5, 2, 4, (4, 2), "bool")
    tol = gradient_tolerance(*(x.tolist() for x in inputs), **kwargs)
    shapes = {
        "grad_value": (2, 5, 4),
        "grad_weights": (4, 3, 5),
        "row_dot": (4, 3),
        "grad_scores": (4, 3, 5),
        "grad_query": (4, 3, 2),
        "grad_key": (2, 5, 2),
    }
    assert set(NAMES) == set(shapes)
    for name, shape in shapes.items():
        assert np.shape(tol[name]) == shape, name
        assert np.all(np.asarray(tol[name]) >= 0), name


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda x: nb.scaled_dot_product_attention_backward(*x, kernel="fast"),
            ValueError,
            "kernel: expected one of explicit, tiled",
        ),
        (
            lambda x: nb.scaled_dot_product_attention_backward(*x[:3], x[3][:, :2]),
            ValueError,
            "grad_output: expected the output's shape",
        ),
        (
            lambda x: nb.scaled_dot_product_attention_backward(*x, kernel="tiled", lse=x[3]),
            ValueError,
            "output, lse: pass both",
        ),
        (
            lambda x: nb.scaled_dot_product_attention_backward(
                *x, kernel="tiled", output=x[3][:, :2], lse=x[3][:, :2, 0]
            ),
            ValueError,
            r"output, lse: expected shapes \(2, 3, 2\) \(\.\.\., L, Ev\) and \(2, 3\)",
        ),
        (
            lambda x: nb.scaled_dot_product_attention_backward(*x, dtype="float16"),
            ValueError,
            "dtype: expected one of float32, float64 or None, found 'float16'",
        ),
        (
            lambda x: get("numpy").flex_attention_backward(
                *(y[None] for y in x), lse=x[3][None, ..., 0]
            ),
            ValueError,
            r"output, lse: pass both \(from flex_attention, return_lse\) or neither",
        ),
        (
            lambda x: nb.scaled_dot_product_attention_backward(*x, dropout_p=0.5, rng="seed"),
            TypeError,
            "rng: expected",
        ),
        (
            lambda x: tb.scaled_dot_product_attention_backward(*x, kernel="fused"),
            ValueError,
            "kernel: expected one of autograd, explicit",
        ),
        (
            lambda x: tb.scaled_dot_product_attention_backward(*x, dtype="int8"),
            ValueError,
            "dtype: expected one of",
        ),
        (
            lambda x: tb.scaled_dot_product_attention_backward(x[0] * np.nan, *x[1:]),
            ValueError,
            "query: expected finite numbers",
        ),
        (
            lambda x: gradient_tolerance(*(y.tolist() for y in x), dtype="int8"),
            ValueError,
            "dtype: expected one of",
        ),
        (
            lambda x: gradient_tolerance(*(y.tolist() for y in x[:3]), [[1.0]]),
            ValueError,
            "grad_output: expected the output's shape",
        ),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    inputs, _ = problem(0, 3, 4, 2, 2)
    with pytest.raises(error, match=match):
        call(inputs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kernel", ["explicit", "autograd"])
def test_16_bit_gradients_within_the_bound(dtype, kernel):
    """Inputs in 16 bits, sums in float32: within the 16-bit bound over 10 seeds."""
    for seed in range(10):
        rng = np.random.default_rng(seed)
        shapes = [(2, 5, 4), (2, 6, 4), (2, 6, 3), (2, 5, 3)]
        xs = [torch.tensor(rng.standard_normal(s)).to(getattr(torch, dtype)) for s in shapes]
        lists = [x.double().tolist() for x in xs]
        causal = bool(seed % 2)
        truth = scratch.scaled_dot_product_attention_backward(*lists, is_causal=causal)
        tol = gradient_tolerance(*lists, is_causal=causal, dtype=dtype)
        ours = tb.scaled_dot_product_attention_backward(*xs, kernel=kernel, is_causal=causal)
        assert len(ours) == len(truth) == len(GRADS)
        for name, a, b in zip(GRADS, ours, truth):
            assert a.dtype == getattr(torch, dtype), name
            assert compare(a.double().numpy(), b, tol[name]).ok, (seed, name)


def test_flash_attention_rule_for_gradients():
    """FlashAttention's backward rule: the tiled float32 kernel's error is at most 3x a plain
    float32 implementation's (plus 4 ulps), 40 seeds, causal and not."""
    from scratch.bounds.tolerance import reference_error_rule

    for seed in range(40):
        rng = np.random.default_rng(seed)
        shapes = [(2, 6, 4), (2, 7, 4), (2, 7, 3), (2, 6, 3)]
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        causal = bool(seed % 2)
        lists = [x.astype(float).tolist() for x in xs]
        truth = scratch.scaled_dot_product_attention_backward(*lists, is_causal=causal)
        plain = tb.scaled_dot_product_attention_backward(*xs, kernel="explicit", is_causal=causal)
        tiled = nb.scaled_dot_product_attention_backward(
            *xs, kernel="tiled", block_size=3, is_causal=causal
        )
        assert len(tiled) == len(plain) == len(truth) == len(GRADS)
        for name, a, p, t in zip(GRADS, tiled, plain, truth):
            result = reference_error_rule(a, p.numpy(), t, dtype="float32", factor=3.0)
            assert result.ok, (seed, name, result)


@pytest.mark.parametrize("seed", range(8))
def test_intermediate_steps_within_their_bounds(seed):
    """dP, D and dS of a plain float32 backward (one head) within their bounds of backward_head."""
    from scratch.backward.sdpa import backward_head
    from scratch.core.attention import Head

    inputs, _ = problem(seed, 5, 6, 4, 3, (1, 1), "none", 3.0, "float32")
    q, k, v, g = (x[0] for x in inputs)
    s = np.float32(0.5)
    z = q @ k.T * s  # (L, E) @ (E, S) -> (L, S)
    P = np.exp(z - z.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    steps = {"grad_weights": g @ v.T}  # (L, Ev) @ (Ev, S)
    steps["row_dot"] = (g * (P @ v)).sum(-1)
    steps["grad_scores"] = P * (steps["grad_weights"] - steps["row_dot"][:, None])
    q_, k_, v_, g_ = (x.astype(float).tolist() for x in (q, k, v, g))
    truth = backward_head(Head((), (), q_, k_, v_, None), g_, 0.5)
    tol = gradient_tolerance(*(x[None].tolist() for x in (q, k, v, g)), scale=0.5)
    for name, ours in steps.items():
        assert compare(ours, getattr(truth, name), tol[name][0]).ok, name
    wrong = steps["grad_scores"] + P * steps["row_dot"][:, None]  # D left out
    assert not compare(wrong, truth.grad_scores, tol["grad_scores"][0]).ok


def test_compare_names_the_worst_entry_and_nan_mismatches():
    truth = [[1.0, math.nan], [2.0, 3.0]]
    bound = [[0.1, 0.0], [0.1, 0.1]]
    assert compare([[1.05, math.nan], [2.0, 3.0]], truth, bound).ok
    off = compare([[1.0, math.nan], [2.0, 3.5]], truth, bound)
    assert not off.ok and off.worst_index == (1, 1) and off.worst_ratio == pytest.approx(5.0)
    nan = compare([[1.0, 0.0], [2.0, 3.0]], truth, bound)
    assert not nan.ok and nan.nan_mismatches == 1 and nan.worst_index == (0, 1)
    assert not compare([[math.inf, math.nan], [2.0, 3.0]], truth, bound).ok
    with pytest.raises(ValueError, match="expected equal sizes"):
        compare([1.0], truth, bound)

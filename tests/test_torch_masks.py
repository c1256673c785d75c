"""The torch backend's masks: a (S,) mask on every path, finite mask values beyond the data's
dtype, causal with a scale that rounds to 0, one mask builder, gradients of fully masked rows.

Numbers are checked against the ground truth within `scratch.tolerance`, or exactly where the
answer is exact.
"""

from __future__ import annotations

import math
import random

import pytest

import scratch
import scratch.backends as backends

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_backends_conformance import assert_within, to_lists  # noqa: E402

TC = backends.get("torch-cpu")

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Seeded normal values, rounded to `dtype`."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _check_against_truth(output, q, k, v, dtype: str, context: str, **kwargs) -> None:
    """`output` within scratch.tolerance of the ground truth on the same (rounded) inputs."""
    ql, kl, vl = (t.double().tolist() for t in (q, k, v))
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor):
        kwargs["attn_mask"] = mask.tolist()
    want, weights = scratch.scaled_dot_product_attention(ql, kl, vl, **kwargs)
    float_mask = None if mask is None or mask.dtype == torch.bool else kwargs["attn_mask"]
    scale = kwargs.get("scale")
    bound = scratch.tolerance(ql, kl, vl, weights, scale=scale, dtype=dtype, attn_mask=float_mask)
    assert_within("output", to_lists(output), want, bound, context)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_key_padding_mask_of_shape_S_with_4d_input(kind: str, need_weights: bool) -> None:
    """A (S,) mask broadcasts over (B, H, L, S) on both paths (torch's kernel wanted >= 2 dims)."""
    q, k, v = (_randn(seed, 2, 3, 4, 5) for seed in (1, 2, 3))  # (B, H, L, E), L = S = 4
    keep = torch.tensor([True, True, False, True])
    mask = keep if kind == "bool" else torch.zeros(4).masked_fill(~keep, -math.inf) + 0.5
    got = TC.scaled_dot_product_attention(q, k, v, attn_mask=mask, need_weights=need_weights)
    assert got.kernel == ("explicit" if need_weights else "torch-sdpa")
    _check_against_truth(got.output, q, k, v, "float64", f"{kind} (S,) mask", attn_mask=mask)


@pytest.mark.parametrize("masked_rows", ["zero", "nan", "uniform"])
def test_all_false_mask_of_shape_S_follows_the_policy(masked_rows: str) -> None:
    """Every key masked by a (S,) mask: each row follows masked_rows, as in the ground truth."""
    q = _randn(4, 1, 2, 3, 4)  # (B, H, L, E)
    mask = torch.zeros(3, dtype=torch.bool)
    got = TC.scaled_dot_product_attention(
        q, q, q, attn_mask=mask, masked_rows=masked_rows, need_weights=False
    )
    _check_against_truth(
        got.output, q, q, q, "float64", masked_rows, attn_mask=mask, masked_rows=masked_rows
    )


def test_multi_head_fused_path_takes_a_mask_of_shape_S() -> None:
    """Batched multi-head attention, need_weights=False, (S,) mask: per-head truth in bound.

    Identity projections make q = k = v = x exactly, so each head is plain attention on its
    column block of x and the ground truth and scratch.tolerance apply head by head."""
    B, L, H, d = 2, 5, 2, 3
    x = _randn(5, B, L, H * d)  # (B, L, H*d)
    eye = torch.eye(H * d, dtype=torch.float64)
    mask = torch.tensor([True, True, True, False, False])
    got = TC.multi_head_attention(
        x, x, x, eye, eye, eye, num_heads=H, attn_mask=mask, need_weights=False
    )
    assert got.kernel == "torch-sdpa"
    heads = x.reshape(B, L, H, d).transpose(1, 2)  # (B, L, H*d) -> (B, H, L, d)
    per_head = got.output.reshape(B, L, H, d).transpose(1, 2)  # (B, L, H*d) -> (B, H, L, d)
    _check_against_truth(per_head, heads, heads, heads, "float64", "mha", attn_mask=mask)


@pytest.mark.parametrize("need_weights", [True, False])
def test_float64_mask_beyond_float32_range_is_not_a_masked_row(need_weights: bool) -> None:
    """float32 data, float64 mask row of finfo(float64).min: 'very unlikely', not 'masked'.

    The truth adds -1.8e308 to every key of row 1, which swamps the scores: uniform weights, so
    row 1 of the output is the mean of v exactly (v's entries are small integers). Cast to
    float32 unclamped, the row became -inf and the explicit path zeroed it."""
    q = _randn(6, 1, 1, 2, 4, dtype=torch.float32)  # (B, H, L, E), L = S = 2
    v = torch.tensor([[[[1.0, 2.0, 3.0, 4.0], [3.0, 6.0, 5.0, 0.0]]]])  # (B, H, S, Ev)
    mask = torch.zeros(2, 2, dtype=torch.float64)
    mask[1] = np.finfo(np.float64).min
    got = TC.scaled_dot_product_attention(q, q, v, attn_mask=mask, need_weights=need_weights)
    assert got.output.dtype == torch.float32
    want, _ = scratch.scaled_dot_product_attention(
        q.double().tolist(), q.double().tolist(), v.tolist(), attn_mask=mask.tolist()
    )
    assert to_lists(got.output)[0][0][1] == want[0][0][1] == [2.0, 4.0, 4.0, 2.0]
    if need_weights:
        assert got.weights[0, 0, 1].tolist() == [0.5, 0.5]
    _check_against_truth(
        got.output, q, q, v, "float32", "row 0 in bound (row 1's bound is inf)", attn_mask=mask
    )


def test_narrowing_a_mask_keeps_finite_values_finite() -> None:
    """float64 -> float32 / float16 and bfloat16 -> float16: finite entries clamp, -inf stays."""
    from scratch.backends import torch_inputs

    cases = [
        (torch.float64, torch.float32),
        (torch.float64, torch.float16),
        (torch.float32, torch.float16),
        (torch.bfloat16, torch.float16),
    ]
    for wide, narrow in cases:
        big = torch.finfo(wide).max
        mask = torch.tensor([-big, big, -math.inf, 0.5], dtype=wide)
        got = torch_inputs.cast_mask(mask, narrow)
        top = torch.finfo(narrow).max
        assert got.dtype == narrow
        assert got.tolist() == [-top, top, -math.inf, 0.5], (wide, narrow, got)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("scale", [1e-50, -1e-50, 1e-46])
def test_fused_causal_scale_that_rounds_to_zero(dtype: str, scale: float) -> None:
    """is_causal with a scale that is 0 in float32 (the kernel's math): no NaN rows, in bound."""
    q, k, v = (_randn(seed, 1, 2, 4, 8, dtype=TORCH_DTYPES[dtype]) for seed in (7, 8, 9))
    got = TC.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, need_weights=False)
    assert got.kernel == "torch-sdpa"
    _check_against_truth(got.output, q, k, v, dtype, f"scale={scale}", is_causal=True, scale=scale)


def _mask_examples(target: tuple) -> dict[str, dict]:
    """Options keyword arguments giving each mask kind (a new kind needs an example here)."""
    rng = random.Random(5)
    lead, (L, S) = target[:-2], target[-2:]
    bools = [[rng.random() < 0.6 for _ in range(S)] for _ in range(L)]  # (L, S)
    floats = [[[rng.choice([0.0, -1.5, -math.inf]) for _ in range(S)]] for _ in range(lead[-1])]
    return {
        "none": {},
        "causal": {"is_causal": True},
        "given": {"attn_mask": bools},
        "given (float, (H, 1, S))": {"attn_mask": floats},
    }


@pytest.mark.parametrize("target", [(3, 4), (2, 3, 4), (2, 3, 5, 4)])
def test_build_mask_gives_the_ground_truths_mask_for_every_kind(target: tuple) -> None:
    """torch's one mask builder against the truth's, entry by entry, for each Options.mask_kind."""
    from scratch.backends.torch_math import build_mask
    from scratch.core.attention import build_mask as truth_mask
    from scratch.core.options import MASK_KINDS, Options

    examples = _mask_examples(target if len(target) > 2 else (1, *target))
    kinds = {Options(**kwargs).mask_kind for kwargs in examples.values()}
    assert kinds == set(MASK_KINDS)  # a new kind fails here until it has an example
    for name, kwargs in examples.items():
        if len(target) == 2 and "float" in name:
            continue  # (H, 1, S) needs a head axis
        options = Options(**kwargs)
        ours, truth = build_mask(options, target, torch.device("cpu")), truth_mask(options, target)
        if truth is None:
            assert ours is None, name
            continue
        full = torch.broadcast_to(ours, target)
        assert (full.dtype == torch.bool) == truth.is_bool, name
        for index in np.ndindex(*target[:-2]):
            assert full[index].tolist() == truth.slice(index), (name, index)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("masked_rows", ["zero", "uniform"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_autograd_through_the_forward_on_a_fully_masked_row(seed, masked_rows, need_weights):
    """A row with every key masked: autograd through the explicit forward gives the ground
    truth's finite gradients (no 0 / 0 NaN reaching q and k)."""
    from scratch.backends import torch_backend

    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3)
    )
    mask = torch.rand(5, 5, generator=g) < 0.7
    mask[seed % 5] = False  # one query row may attend no key
    dO = torch.randn(5, 3, dtype=torch.float64, generator=g)
    out = torch_backend.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, masked_rows=masked_rows, need_weights=need_weights
    ).output
    got = torch.autograd.grad(out, (q, k, v), dO)
    want = scratch.scaled_dot_product_attention_backward(
        q.tolist(), k.tolist(), v.tolist(), dO.tolist(), mask.tolist(), masked_rows=masked_rows
    )
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-12, atol=1e-12)

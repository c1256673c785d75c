"""scratch.bounds.weights_tolerance: the bound on a kernel's weights holds for correct kernels in
every
dtype, is tight enough that a small planted mistake breaks it, and refuses bad input by name."""

import math

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

import scratch  # noqa: E402
from scratch.bounds.weights_tolerance import weights_tolerance  # noqa: E402
from scratch.core.options import Options  # noqa: E402

DTYPES = ("float64", "float32", "float16", "bfloat16")


def problem(seed: int, heads=(2, 2), L=6, S=9, E=8, mask_kind="none"):
    """Seeded q (H, L, E), k (Hkv, S, E) and a mask; logits large enough to matter (|s| ~ 10)."""
    rng = np.random.default_rng(seed)
    H, Hkv = heads
    q, k = rng.normal(0, 2, (H, L, E)), rng.normal(0, 2, (Hkv, S, E))
    mask = None
    if mask_kind == "bool":
        mask = rng.random((L, S)) < 0.7
        mask[:, 0] = True  # every row keeps a key
    elif mask_kind == "float":
        mask = rng.normal(0, 3, (L, S))
        mask[rng.random((L, S)) < 0.3] = -math.inf
        mask[:, 0] = 0.0
    return q, k, mask


def kernel_weights(q, k, mask, dtype: str, scale: float, stretch: float = 1.0) -> np.ndarray:
    """softmax(q k^T * scale + mask) computed by torch as a kernel in `dtype` would (16-bit
    inputs, float32 sums, 16-bit weights stored), as float64; `stretch` != 1 plants a wrong
    scale."""
    store = getattr(torch, dtype)
    acc = torch.float64 if dtype == "float64" else torch.float32
    qt, kt = (torch.from_numpy(a).to(store).to(acc) for a in (q, k))
    kt = kt.repeat_interleave(qt.shape[0] // kt.shape[0], dim=0)  # kv head h // group
    scores = (qt @ kt.transpose(-1, -2)) * (scale * stretch)  # (H, L, E) @ (H, E, S)
    if mask is not None:
        m = torch.from_numpy(mask)
        scores = scores.masked_fill(~m, -math.inf) if m.dtype == torch.bool else scores + m.to(acc)
    return torch.softmax(scores, dim=-1).to(store).double().numpy()


def truth_and_bound(q, k, mask, dtype: str, scale: float):
    """The ground truth's weights (from the inputs rounded to `dtype`) and their bound."""
    t = getattr(torch, dtype)
    q, k = (torch.from_numpy(a).to(t).double().numpy() for a in (q, k))
    group = q.shape[0] // k.shape[0]
    kk = np.repeat(k, group, axis=0)
    given = None if mask is None else mask.tolist()
    _, p = scratch.scaled_dot_product_attention(q.tolist(), kk.tolist(), kk.tolist(), given,
                                                scale=scale)  # fmt: skip
    p = np.asarray(p)
    bound = weights_tolerance(q, k, p, Options(mask, scale=scale, enable_gqa=group > 1), dtype)
    return p, np.asarray(bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_correct_kernels_stay_within_the_bound(dtype, mask_kind):
    for seed in range(20):
        heads = ((2, 2), (4, 2), (1, 1))[seed % 3]
        q, k, mask = problem(seed, heads, mask_kind=mask_kind)
        p, bound = truth_and_bound(q, k, mask, dtype, 0.35)
        found = kernel_weights(q, k, mask, dtype, 0.35)
        ratio = float(np.max(np.abs(found - p) / bound))
        assert ratio <= 1.0, f"seed {seed}: |difference| is {ratio:.3g} times the bound"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_scale_off_by_one_part_in_a_thousand_fails(dtype):
    failed = 0
    for seed in range(20):
        q, k, mask = problem(seed)
        p, bound = truth_and_bound(q, k, mask, dtype, 0.35)
        found = kernel_weights(q, k, mask, dtype, 0.35, stretch=1.001)
        failed += bool(np.any(np.abs(found - p) > bound))
    assert failed == 20


def test_gqa_reads_kv_head_h_over_group_and_a_float_mask_widens_the_bound():
    q, k, _ = problem(3, (4, 2))
    p = np.full((4, 6, 9), 1 / 9)
    repeated = np.repeat(k, 2, axis=0)
    gqa = weights_tolerance(q, k, p, Options(scale=0.5, enable_gqa=True))
    assert gqa == weights_tolerance(q, repeated, p, Options(scale=0.5))
    q, k, p = q[:1], k[:1], p[:1]
    plain = np.asarray(weights_tolerance(q, k, p, Options(scale=0.5)))
    as_bool = np.asarray(weights_tolerance(q, k, p, Options(p[0] > 0, scale=0.5)))
    shifted = np.asarray(weights_tolerance(q, k, p, Options(p[0] + 50, scale=0.5)))
    assert np.array_equal(plain, as_bool) and np.all(shifted > plain)


def test_bad_input_is_refused_by_name():
    q, k, _ = problem(0)
    with pytest.raises(ValueError, match="weights: expected shape"):
        weights_tolerance(q, k, np.zeros((2, 6, 8)), Options())
    with pytest.raises(ValueError, match="dtype: expected one of"):
        weights_tolerance(q, k, np.zeros((2, 6, 9)), Options(), "int8")
    with pytest.raises(ValueError, match="key"):
        weights_tolerance(q, k[..., :3], np.zeros((2, 6, 9)), Options())

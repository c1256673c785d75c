"""torch backend edge cases found in review: odd masks, huge mask values, tiny scales, odd arrays.

Each test pins one fix in scratch/backends/torch_*.py; numbers are checked against the
ground truth within `scratch.tolerance`, or exactly where the answer is exact.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

import scratch
import scratch.backends as backends
from scratch.plan import plan_attention

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_backends_conformance import (  # noqa: E402  (after the importorskip on purpose)
    assert_within,
    random_tensor,
    to_lists,
)

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


# ---------------------------------------------------------------- 1. (S,) masks on the fused path


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


# ---------------------------------------------------------------- 2. huge finite mask values


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


# ---------------------------------------------------------------- 3. causal with a tiny scale


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("scale", [1e-50, -1e-50, 1e-46])
def test_fused_causal_scale_that_rounds_to_zero(dtype: str, scale: float) -> None:
    """is_causal with a scale that is 0 in float32 (the kernel's math): no NaN rows, in bound."""
    q, k, v = (_randn(seed, 1, 2, 4, 8, dtype=TORCH_DTYPES[dtype]) for seed in (7, 8, 9))
    got = TC.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, need_weights=False)
    assert got.kernel == "torch-sdpa"
    _check_against_truth(got.output, q, k, v, dtype, f"scale={scale}", is_causal=True, scale=scale)


# ---------------------------------------------------------------- 4. 1-D key / value


@pytest.mark.parametrize("need_weights", [True, False])
def test_one_dimensional_key_and_value_name_the_argument(need_weights: bool) -> None:
    """key (6,) with query (4, 6): the shared shape check's ValueError, not an IndexError."""
    with pytest.raises(ValueError, match="^key: expected at least 2 dims") as truth:
        plan_attention((4, 6), (6,), (6,))
    with pytest.raises(ValueError, match="^key: expected at least 2 dims") as ours:
        TC.scaled_dot_product_attention(
            np.ones((4, 6)), np.ones(6), np.ones(6), need_weights=need_weights
        )
    assert str(ours.value) == str(truth.value)
    assert str(ours.value).startswith("key: expected at least 2 dims")


# ---------------------------------------------------------------- 5. awkward NumPy arrays


def _native_result(need_weights: bool, **kwargs):
    """The call on plain native float64 arrays, to compare the awkward ones against."""
    rng = np.random.default_rng(10)
    q = rng.standard_normal((3, 4))
    mask = np.array([[True, False, True]] * 3)
    args = {"query": q, "key": q, "value": q, "attn_mask": mask}
    args.update(kwargs)
    return args, TC.scaled_dot_product_attention(**args, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("name", ["query", "key", "value", "attn_mask"])
@pytest.mark.parametrize("layout", ["big-endian", "longdouble"])
def test_big_endian_and_long_double_arrays(name: str, layout: str, need_weights: bool) -> None:
    """A big-endian or long double input gives exactly the native float64 result."""
    args, want = _native_result(need_weights)
    arr = args[name]
    if arr.dtype == np.bool_:
        arr = np.where(arr, 0.0, -np.inf)  # the same mask as floats, which have a byte order
        args, want = _native_result(need_weights, attn_mask=arr)
    odd = arr.astype(">f8") if layout == "big-endian" else arr.astype(np.longdouble)
    got = TC.scaled_dot_product_attention(**dict(args, **{name: odd}), need_weights=need_weights)
    assert got.output.dtype == torch.float64
    assert torch.equal(got.output, want.output)


def test_big_endian_float32_keeps_float32() -> None:
    """'>f4' is float32 in the other byte order: the result is float32 and the same numbers."""
    q = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    want = TC.scaled_dot_product_attention(q, q, q).output
    got = TC.scaled_dot_product_attention(q.astype(">f4"), q, q.astype(">f4")).output
    assert got.dtype == torch.float32 and torch.equal(got, want)


def test_read_only_arrays_convert_without_a_warning() -> None:
    """torch warns once per process on a read-only array, so this runs in a fresh interpreter."""
    code = (
        "import numpy as np\n"
        "import scratch.backends as b\n"
        "q = np.arange(12.0).reshape(3, 4) / 7\n"
        "q.flags.writeable = False\n"
        "m = np.array([True, False, True]); m.flags.writeable = False\n"
        "r = b.get('torch-cpu').scaled_dot_product_attention(q, q, q, attn_mask=m)\n"
        "assert q.flags.writeable is False and r.output.shape == (3, 4)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_numpy_conversion_failure_names_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """If torch still refuses an array, the TypeError names the argument, not torch's internals."""

    def refuse(arr):
        raise TypeError("can't convert np.ndarray of type numpy.whatever")

    monkeypatch.setattr(torch, "from_numpy", refuse)
    q = np.ones((2, 3))
    with pytest.raises(TypeError, match="^query: cannot convert a NumPy array of dtype float64"):
        TC.scaled_dot_product_attention(q, q, q)


# ---------------------------------------------------------------- 6. result dtype


def _arrays(seed: int) -> dict:
    """Small inputs in every dtype the rule talks about."""
    rng = random.Random(seed)
    x = random_tensor(rng, (3, 4), "float16")  # exact in every dtype below
    return {
        "list": x,
        "float64": torch.tensor(x, dtype=torch.float64),
        "float32": torch.tensor(x, dtype=torch.float32),
        "numpy32": np.array(x, dtype=np.float32),
        "float16": torch.tensor(x, dtype=torch.float16),
        "bfloat16": torch.tensor(x, dtype=torch.bfloat16),
        "int64": torch.ones(3, 4, dtype=torch.int64),
        "numpy_int32": np.ones((3, 4), dtype=np.int32),
    }


SDPA_DTYPES = [
    (("list", "float32", "float32"), torch.float64),
    (("float32", "float32", "list"), torch.float64),
    (("float32", "float64", "float32"), torch.float64),
    (("float32", "float16", "bfloat16"), torch.float32),
    (("float16", "bfloat16", "float16"), torch.float32),
    (("numpy32", "float16", "float16"), torch.float32),
    (("float16", "float16", "float16"), torch.float16),
    (("bfloat16", "bfloat16", "bfloat16"), torch.bfloat16),
    (("int64", "float32", "float32"), torch.float64),  # integers count as float64, like lists
    (("float32", "numpy_int32", "float32"), torch.float64),
]


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize(("kinds", "want"), SDPA_DTYPES)
def test_sdpa_result_dtype_rule(kinds: tuple, want: torch.dtype, need_weights: bool) -> None:
    """Lists count as float64; float64 wins, then float32; 16-bit only when all agree."""
    a = _arrays(12)
    q, k, v = (a[kind] for kind in kinds)
    got = TC.scaled_dot_product_attention(q, k, v, need_weights=need_weights)
    assert got.output.dtype == want, kinds
    forced = TC.scaled_dot_product_attention(q, k, v, need_weights=need_weights, dtype="float16")
    assert forced.output.dtype == torch.float16  # an explicit dtype= still wins


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("extra", ["w_o list", "w_o float64", "b_q float64", "b_o list"])
def test_multi_head_dtype_counts_projections_and_biases(extra: str, need_weights: bool) -> None:
    """float32 inputs and projections plus one float64 (or list) w_o or bias: float64 out."""
    x = _randn(13, 3, 4, dtype=torch.float32)
    w = _randn(14, 4, 4, dtype=torch.float32)
    kwargs = {"w_o": w}
    if extra == "w_o list":
        kwargs["w_o"] = w.tolist()
    elif extra == "w_o float64":
        kwargs["w_o"] = w.double()
    elif extra == "b_q float64":
        kwargs["b_q"] = torch.zeros(4, dtype=torch.float64)
    else:
        kwargs["b_o"] = [0.0] * 4
    plain = TC.multi_head_attention(x, x, x, w, w, w, w, need_weights=need_weights)
    assert plain.output.dtype == torch.float32
    got = TC.multi_head_attention(x, x, x, w, w, w, **kwargs, need_weights=need_weights)
    assert got.output.dtype == torch.float64, extra
    forced = TC.multi_head_attention(
        x, x, x, w, w, w, **kwargs, need_weights=need_weights, dtype="float32"
    )
    assert forced.output.dtype == torch.float32


# ---------------------------------------------------------------- 7. one shape plan

_ROWS = [[0.1 * (i + j) for j in range(4)] for i in range(3)]  # (3, 4)


def _matrix(rows: int, cols: int) -> list:
    """A (rows, cols) nested list of small distinct values."""
    return [[0.01 * (i * cols + j) for j in range(cols)] for i in range(rows)]


_W = _matrix(4, 4)
_BAD_MULTI_HEAD = {
    "key heads narrower": dict(w_k=_matrix(4, 6), num_heads=2),
    "w_q rows": dict(w_q=_matrix(5, 4)),
    "w_q columns": dict(w_q=_matrix(4, 5), num_heads=2),
    "b_q length": dict(b_q=[0.0] * 3),
    "w_o rows": dict(w_o=_matrix(3, 4)),
    "b_o without w_o": dict(b_o=[0.0] * 4),
    "value length": dict(key=_ROWS, value=_ROWS[:2]),
    "key lead": dict(query=[_ROWS, _ROWS], key=[_ROWS], value=[_ROWS]),
    "kv heads": dict(num_heads=2, num_kv_heads=3),
    "one-dim query": dict(query=[0.0] * 4),
    "mask shape": dict(attn_mask=[[True] * 2] * 3),
}


@pytest.mark.parametrize("case", sorted(_BAD_MULTI_HEAD))
@pytest.mark.parametrize("need_weights", [True, False])
def test_multi_head_shape_errors_are_the_ground_truths(case: str, need_weights: bool) -> None:
    """Bad multi-head shapes: the ground truth's exception type and message, word for word."""
    kwargs = dict(query=_ROWS, key=_ROWS, value=_ROWS, w_q=_W, w_k=_W, w_v=_W)
    kwargs.update(_BAD_MULTI_HEAD[case])
    with pytest.raises((ValueError, TypeError), match=r"^\w+: ") as truth:
        scratch.multi_head_attention(**kwargs)
    with pytest.raises(truth.type, match=r"^\w+: ") as ours:
        TC.multi_head_attention(**kwargs, need_weights=need_weights)
    assert str(ours.value) == str(truth.value), case
    if case in ("key lead", "one-dim query"):
        return  # a trace is one (L, d_model) example: those refuse for that reason first
    trace_kwargs = dict(kwargs, x=kwargs.pop("query"))
    with pytest.raises(truth.type, match=r"^\w+: ") as traced:
        TC.trace_attention(**trace_kwargs)
    assert str(traced.value) == str(truth.value), case


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
    from scratch.attention import build_mask as truth_mask
    from scratch.backends.torch_math import build_mask
    from scratch.options import MASK_KINDS, Options

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
    """The explicit forward's 0 / 0 on a row with every key masked once sent NaN to q and k."""
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

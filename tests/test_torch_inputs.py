"""What the torch backend accepts: shapes refused with the ground truth's words, awkward NumPy
arrays (big-endian, long double, read-only), and the dtype of its result."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

import scratch
import scratch.backends as backends
from scratch.ops.plan import plan_attention

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_backends_conformance import random_tensor  # noqa: E402
from test_torch_masks import _randn  # noqa: E402

TC = backends.get("torch-cpu")


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

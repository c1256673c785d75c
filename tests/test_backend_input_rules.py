"""One input rule for every backend: the same lists read or refused as the ground truth does, arrays
without values refused, data too large for the dtype refused, the same messages, and no other
exception type escaping any public function."""

import collections
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
from test_backends_conformance import dtype_name, trace_bounds  # noqa: E402

from scratch import backends  # noqa: E402
from scratch.backends import numpy_inputs, torch_inputs  # noqa: E402
from scratch.ops.validate import bool_grid  # noqa: E402
from scratch.variants import GivenMask  # noqa: E402
from tests.fuzz_answers import (  # noqa: E402
    agree,
    check_backward,
    check_matmul,
    check_sdpa,
    check_softmax,
    finite,
    floats,
)

NB, TB = backends.get("numpy"), backends.get("torch")
X = [[1.0, 2.0], [3.0, 4.0]]
Q = [[1.0, 2.0], [3.0, 4.0]]
W = [[1.0, 0.0], [0.0, 1.0]]

SDPA = {
    "scratch": lambda *a, **kw: scratch.scaled_dot_product_attention(*a, **kw)[0],
    "numpy": lambda *a, **kw: NB.scaled_dot_product_attention(*a, **kw)[0],
    "torch": lambda *a, **kw: TB.scaled_dot_product_attention(*a, **kw)[0],
}


def outcome(fn, *args, **kwargs):
    """('ok', values as float64 lists) or (exception type, message): what a call did."""
    try:
        out = fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc)
    return "ok", np.asarray(out, dtype=np.float64).round(12).tolist()


ODD_LISTS = {
    "Fraction": [[Fraction(1, 3), 1.0]],
    "big int": [[2**70, 1.0]],
    "huge int": [[10**400, 1.0]],
    "Decimal": [[Decimal("0.5"), 1.0]],
    "bool among numbers": [[True, 1.0]],
    "complex": [[1j, 1.0]],
    "None": [[None, 1.0]],
    "string": [["1", 1.0]],
    "list of arrays": [np.array([1.0, 2.0])],
    "range rows": [range(2), range(2)],
    "0-d array leaves": [[np.array(1.0), np.array(2.0)]],
    "ragged": [[1.0, 2.0], [3.0]],
    "empty": [[]],
    "NumPy scalars": [[np.float32(1.5), np.int64(2)]],
}


@pytest.mark.parametrize("case", sorted(ODD_LISTS))
def test_every_backend_accepts_and_refuses_the_same_lists(case):
    query = ODD_LISTS[case]
    found = {name: outcome(fn, query, X, X) for name, fn in SDPA.items()}
    assert found["numpy"] == found["scratch"], f"numpy: {found['numpy']} vs {found['scratch']}"
    assert found["torch"] == found["scratch"], f"torch: {found['torch']} vs {found['scratch']}"
    if found["scratch"][0] != "ok":
        assert found["scratch"][1].startswith("query: ")  # the message names the argument


def test_the_rule_is_not_vacuous():
    # both kinds of outcome occur above, so the equality checks compare real answers and errors
    kinds = {outcome(SDPA["scratch"], q, X, X)[0] for q in ODD_LISTS.values()}
    assert kinds == {"ok", "ValueError", "TypeError"}


# a grid drawn by hand (rows of Python bools) is read as it is (validate.bool_grid, GivenMask);
# anything near it takes the general reading, and every backend answers as the ground truth
MASK_GRIDS = {
    "tuple rows": ((True, False), (True, True)),
    "list rows": [[True, False], [False, True]],
    "an int among bools": ((True, 1), (True, True)),
    "NumPy bools": ((np.True_, False), (True, True)),
    "ragged bools": ((True,), (True, True)),
    "an empty row": ((), ()),
    "3-D bools": (((True, False), (True, True)),),
    "a row that is a range": ((True, False), range(2)),
}


@pytest.mark.parametrize("case", sorted(MASK_GRIDS))
def test_every_backend_reads_a_drawn_grid_as_the_ground_truth_does(case):
    mask = MASK_GRIDS[case]
    found = {name: outcome(fn, Q, X, X, attn_mask=mask) for name, fn in SDPA.items()}
    assert found["numpy"] == found["scratch"], f"numpy: {found['numpy']} vs {found['scratch']}"
    assert found["torch"] == found["scratch"], f"torch: {found['torch']} vs {found['scratch']}"
    if case.endswith("rows"):  # read, and masked: not the unmasked answer
        assert found["scratch"][0] == "ok" and found["scratch"] != outcome(SDPA["scratch"], Q, X, X)
    if bool_grid(mask) is not None:  # the variant of the grid, read as it is, as SDPA reads it
        given = GivenMask(mask)
        assert given.is_bool and given.shape == (1, 1, 2, 2) and given.score_mod is None
        cells = [[given.mask_mod(0, 0, i, j) for j in range(2)] for i in range(2)]
        assert cells == [list(r) for r in mask]
        assert numpy_inputs.as_mask(mask, np.dtype(np.float32)).tolist() == cells
        assert torch_inputs.as_mask(mask, torch.device("cpu")).tolist() == cells


META = torch.ones(2, 2, device="meta")

MASKED = np.ma.MaskedArray([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 1], [0, 0]])


@pytest.mark.parametrize("backend", sorted(SDPA))
@pytest.mark.parametrize("where", ["query", "key", "attn_mask"])
@pytest.mark.parametrize("bad", ["meta", "masked"])
def test_valueless_arrays_are_refused_naming_the_argument(backend, where, bad):
    array = {"meta": META, "masked": MASKED}[bad]
    if where == "attn_mask":
        array = {"meta": META.bool(), "masked": np.ma.MaskedArray(np.ones((2, 2), bool))}[bad]
    args = {"query": X, "key": X, "value": X, where: array}
    words = "meta device" if bad == "meta" else "masked array"
    with pytest.raises(TypeError, match=f"^{where}: .*{words}"):
        SDPA[backend](**args)


def test_meta_weights_and_traces_are_refused_in_both_backends():
    for be in (NB, TB):
        with pytest.raises(TypeError, match="^w_q: a tensor on the meta device"):
            be.multi_head_attention(X, X, X, META, X, X)
        with pytest.raises(TypeError, match="^x: a tensor on the meta device|^query: a tensor"):
            be.trace_attention(META)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("as_array", [False, True])
def test_data_too_large_for_the_dtype_is_refused(backend, as_array):
    big = np.array([[1e308]]) if as_array else [[1e308]]
    with pytest.raises(ValueError, match=r"^query: 1e\+308 at query\[0\]\[0\] is too large for"):
        backends.get(backend).scaled_dot_product_attention(big, [[1.0]], [[1.0]], dtype="float32")
    # float64 holds it: no refusal
    out = backends.get(backend).scaled_dot_product_attention(big, [[1.0]], [[1.0]])[0]
    assert float(np.asarray(out)[0, 0]) == 1.0


def test_torch_float16_refuses_an_integer_array_past_its_range():
    with pytest.raises(ValueError, match="^query: 70000 at query.* too large for float16"):
        TB.scaled_dot_product_attention(np.array([[70000]]), [[1.0]], [[1.0]], dtype="float16")


def multi_head_doors() -> list:
    """scratch.multi_head_attention itself and every backend's."""
    names = backends.available()
    return [scratch.multi_head_attention] + [backends.get(n).multi_head_attention for n in names]


def messages(error: type, calls: list) -> set:
    """The messages of the `error` each call (a function and its arguments) raises."""
    found = set()
    for fn, args, kwargs in calls:
        with pytest.raises(error) as info:
            fn(*args, **kwargs)
        found.add(str(info.value))
    return found


def test_every_backend_refuses_a_missing_projection_with_the_same_message():
    calls = [(fn, (Q, Q, Q, None, W, W), {}) for fn in multi_head_doors()]
    assert messages(TypeError, calls) == {"w_q: expected a projection matrix, found None"}


def test_every_backend_refuses_a_value_without_a_key_with_the_same_message():
    traces = [scratch.trace_attention] + [
        backends.get(n).trace_attention for n in backends.available()
    ]
    calls = [(fn, (Q, None, Q, W, W, W), {}) for fn in multi_head_doors() + traces]
    assert messages(ValueError, calls) == {
        "value: given without key; pass key as well (key=x for self-attention)"
    }


def test_every_backend_refuses_kv_heads_that_do_not_divide_with_the_same_message():
    heads = {"num_heads": 2, "num_kv_heads": 3}
    calls = [(fn, (Q, Q, Q, W, W, W), heads) for fn in multi_head_doors()]
    assert messages(ValueError, calls) == {"num_kv_heads: 3 does not divide num_heads = 2"}


odd = st.one_of(
    st.just([[1.0, 2.0], [3.0, 4.0]]),
    st.just([[math.nan, 1.0], [math.inf, -math.inf]]),
    st.just([[10**400, 1.0]]),
    st.just([[Fraction(1, 3), Decimal("0.5")]]),
    st.just([[1j, 1.0]]),
    st.just([[True, False]]),
    st.just(None),
    st.just("q"),
    st.just([]),
    st.just([[1.0], [2.0, 3.0]]),
    st.just(np.float64(2.0)),
    st.just(np.array(3.0)),
    st.just(MASKED),
    st.just(META),
    st.just(np.arange(4.0).reshape(2, 2)[:, ::-1]),  # non-contiguous
    st.builds(lambda: np.frombuffer(np.ones(4).tobytes()).reshape(2, 2)),  # read-only
    st.just(np.ones((2, 2), dtype=np.float32)),
    st.just(torch.ones(2, 2, dtype=torch.bfloat16)),
)

# inputs every function takes, in several dtypes and layouts, so that calls answer often
usable = st.sampled_from(
    [
        X,
        [[0.5, -1.0], [2.0, 0.25], [-3.0, 1.5]],
        np.arange(4.0).reshape(2, 2)[:, ::-1] / 3,
        np.array([[1.5, -2.0], [0.25, 4.0]], dtype=np.float32),
        torch.tensor([[1.0, -0.5], [2.0, 3.0]], dtype=torch.bfloat16),
        torch.tensor([[0.1, 0.2], [-0.3, 0.4]], dtype=torch.float64),
    ]
)
masks = st.sampled_from(
    [None, [[True, False], [True, True]], [[0.0, -math.inf], [-1.5, 0.0]], np.array([True, False])]
)


def mostly(good):
    """`good` three draws in four, else an odd input (one_of would make `good` one of 19)."""
    return st.integers(0, 3).flatmap(lambda i: odd if i == 3 else good)


FUNCTIONS = {
    "scratch.sdpa": lambda q, k, m: scratch.scaled_dot_product_attention(q, k, k, m),
    "numpy.sdpa": lambda q, k, m: NB.scaled_dot_product_attention(q, k, k, m),
    "numpy.fast": lambda q, k, m: NB.scaled_dot_product_attention(q, k, k, m, need_weights=False),
    "torch.sdpa": lambda q, k, m: TB.scaled_dot_product_attention(q, k, k, m),
    "torch.fast": lambda q, k, m: TB.scaled_dot_product_attention(q, k, k, m, need_weights=False),
    "scratch.mha": lambda q, k, m: scratch.multi_head_attention(q, k, k, X, X, X, attn_mask=m),
    "numpy.mha": lambda q, k, m: NB.multi_head_attention(q, k, k, X, X, X, attn_mask=m),
    "torch.mha": lambda q, k, m: TB.multi_head_attention(q, k, k, X, X, X, attn_mask=m),
    "scratch.trace": lambda q, k, m: scratch.trace_attention(q, k, attn_mask=m),
    "numpy.trace": lambda q, k, m: NB.trace_attention(q, k, attn_mask=m),
    "torch.trace": lambda q, k, m: TB.trace_attention(q, k, attn_mask=m),
    "scratch.tolerance": lambda q, k, m: scratch.tolerance(q, k, k, m),
    "scratch.softmax": lambda q, k, m: scratch.softmax(q),
    "scratch.matmul": lambda q, k, m: scratch.matmul(q, k),
    "scratch.rows": lambda q, k, m: scratch.attention_rows(q, k, k, [0], m),
    "scratch.backward": lambda q, k, m: scratch.scaled_dot_product_attention_backward(q, k, k, q),
}


def first_row(mask):
    """Row 0 of a mask of shape (L, S) (one of shape (1, S) or (S,) as it is)."""
    if mask is None:
        return None
    m = np.asarray(mask.tolist() if hasattr(mask, "tolist") else mask)
    return m[:1].tolist() if m.ndim == 2 else m.tolist()


def plain(x):
    """A tensor or array as nested lists (bools stay bools), for the NumPy side."""
    if hasattr(x, "detach") and x.dtype != torch.bool:
        x = x.double()
    return x.tolist() if hasattr(x, "tolist") else x


def check_answer(name: str, q, k, mask, result) -> None:
    """What a call answered, against an independent computation: NumPy where scratch answered
    (finite data only: NumPy refuses NaN), scratch where a backend did (tests/fuzz_answers.py)."""
    backend, kind = name.split(".")
    if backend == "scratch" and kind in ("sdpa", "fast", "trace", "mha", "rows", "backward"):
        if not finite(q, k, k, None if kind == "backward" else mask):
            return  # NumPy refuses NaN and inf data
        q, k, mask = plain(q), plain(k), plain(mask)  # NumPy's reader, as scratch read them
    if kind in ("sdpa", "fast"):
        out, weights = result if backend == "scratch" else (result.output, result.weights)
        check_sdpa(q, k, k, out, weights, by=backend, dtype=dtype_name(out), attn_mask=mask)
    elif kind == "trace":
        ref = result if backend == "scratch" else scratch.trace_attention(q, k, attn_mask=mask)
        ours = NB.trace_attention(q, k, attn_mask=mask) if backend == "scratch" else result
        failed = [c.message for c in scratch.compare_traces(ours, ref) if not c.ok]
        assert not failed, failed
    elif kind == "mha":
        kw = dict(x=q, key=k, value=k, w_q=X, w_k=X, w_v=X, attn_mask=mask)
        ref = scratch.trace_attention(**kw)
        ours = (
            NB.multi_head_attention(q, k, k, X, X, X, attn_mask=mask)
            if backend == "scratch"
            else result
        )
        bound = trace_bounds(ref, kw, dtype_name(ours.output))["output"]
        agree("mha output", ours.output, ref["output"].tolist(), bound)
    elif kind == "softmax":
        check_softmax(q, result)
    elif kind == "matmul":
        check_matmul(q, k, result)
    elif kind == "rows":
        q0 = floats(q)[:1].tolist()
        check_sdpa(q0, k, k, result[0], result[1], attn_mask=first_row(mask))
    elif kind == "backward":
        check_backward(q, k, k, q, result)
    else:  # tolerance: one bound per output entry, never negative for weights in [0, 1]
        bound = floats(result)
        assert bound.shape == floats(q).shape[:-1] + floats(k).shape[-1:], bound.shape
        weights = floats(mask)
        if ((weights >= 0) & (weights <= 1)).all():  # (mask stands in for the weights here)
            assert (np.isnan(bound) | (bound >= 0)).all(), bound


def test_fuzz_only_value_and_type_errors_escape():
    """Odd inputs to every public function: a ValueError/TypeError, or an answer an independent
    computation agrees with (both counted); a backend never answers what scratch refuses."""
    seen = collections.Counter()

    @given(st.sampled_from(sorted(FUNCTIONS)), mostly(usable), mostly(usable), mostly(masks))
    def one(name, q, k, mask):
        with np.errstate(all="ignore"):
            try:
                result = FUNCTIONS[name](q, k, mask)
            except (ValueError, TypeError):
                seen["refused"] += 1
                return
        seen["answered"] += 1
        with np.errstate(all="ignore"):
            check_answer(name, q, k, mask, result)

    one()
    assert seen["answered"] >= 10 and seen["refused"] >= 10, seen


def test_every_backend_refuses_a_bias_without_its_weight_with_the_same_message():
    """b_q with no w_q: the NumPy trace once added it to x while the others dropped it."""
    example = scratch.Example(Q, params={"w_k": W, "w_v": W, "b_q": [0.5] * len(Q[0])})
    traces = [scratch.trace_example] + [backends.get(n).trace_example for n in backends.available()]
    calls = [(fn, (example, scratch.Options()), {}) for fn in traces]
    assert messages(ValueError, calls) == {"b_q: given without w_q; expected w_q as well"}

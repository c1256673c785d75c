"""Bad input: a ValueError or TypeError naming the argument, the position, expected vs found."""

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch

Q = [[1.0, 2.0], [3.0, 4.0]]
K = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
V = [[1.0], [2.0], [3.0]]
sdpa = scratch.scaled_dot_product_attention
W = [[1.0, 0.0], [0.0, 1.0]]


def call(**changes):
    args = {"query": Q, "key": K, "value": V}
    args.update(changes)
    return sdpa(**args)


CASES = [
    # (arguments, error type, words the message must contain)
    ({"query": [[1.0, 2.0], [3.0]]}, ValueError, ["query", "ragged", "query[1]", "length 2"]),
    ({"key": [[1.0, 0.0], [0.0, 1.0], [1.0]]}, ValueError, ["key", "ragged", "key[2]"]),
    ({"query": 3.0}, TypeError, ["query", "expected a matrix", "float"]),
    ({"value": {"a": 1}}, TypeError, ["value", "expected a matrix", "dict"]),
    ({"query": [1.0, 2.0]}, ValueError, ["query", "at least 2 dims", "(2,)"]),
    ({"query": [1.0, [2.0, 3.0]]}, TypeError, ["query", "number at query[1]", "list"]),
    ({"masked_rows": ["zero"]}, ValueError, ["masked_rows", "'zero'", "list"]),
    ({"query": []}, ValueError, ["query", "empty"]),
    ({"query": [[]]}, ValueError, ["query", "empty", "(1, 0)"]),
    ({"query": [[1.0, "2"], [3.0, 4.0]]}, TypeError, ["query", "query[0][1]", "number", "str"]),
    ({"key": [[1.0, None], [0.0, 1.0], [1, 1]]}, TypeError, ["key", "key[0][1]", "NoneType"]),
    ({"value": [[True], [2.0], [3.0]]}, TypeError, ["value", "value[0][0]", "bool"]),
    ({"value": [[1j], [2.0], [3.0]]}, TypeError, ["value", "complex"]),
    ({"query": [[1.0, 10**400]]}, ValueError, ["query", "query[0][1]", "too large"]),
    ({"key": [[1.0, 0.0, 0.0]]}, ValueError, ["key", "width", "E = 2"]),
    ({"value": [[1.0], [2.0]]}, ValueError, ["value", "length", "S = 3"]),
    ({"key": [K], "value": [V]}, ValueError, ["key", "dims", "query"]),
    (
        {"query": [Q, Q], "key": [K, K, K], "value": [V, V, V]},
        ValueError,
        ["key", "leading dims", "axis 0", "expected 2"],
    ),
    ({"attn_mask": [[True, False]]}, ValueError, ["attn_mask", "(2, 3)", "(1, 2)"]),
    ({"attn_mask": [[[True] * 3] * 2] * 2}, ValueError, ["attn_mask", "broadcast"]),
    ({"attn_mask": [[1, 0, 1], [1, 1, 1]]}, TypeError, ["attn_mask", "integers", "bools"]),
    ({"attn_mask": [[True, 0.0, 1.0], [1.0, 1.0, 1.0]]}, TypeError, ["attn_mask", "mixes"]),
    ({"attn_mask": [[True] * 3] * 2, "is_causal": True}, ValueError, ["is_causal", "attn_mask"]),
    ({"is_causal": 1}, TypeError, ["is_causal", "True or False"]),
    ({"scale": math.inf}, ValueError, ["scale", "finite", "inf"]),
    ({"scale": math.nan}, ValueError, ["scale", "finite"]),
    ({"scale": "0.5"}, TypeError, ["scale", "str"]),
    ({"scale": True}, TypeError, ["scale", "bool"]),
    ({"scale": 10**400}, ValueError, ["scale", "finite"]),
    ({"dropout_p": 1.0}, ValueError, ["dropout_p", "[0, 1)", "1.0"]),
    ({"dropout_p": -0.1}, ValueError, ["dropout_p", "[0, 1)"]),
    ({"dropout_p": "0.1"}, TypeError, ["dropout_p", "str"]),
    ({"masked_rows": "ignore"}, ValueError, ["masked_rows", "'zero'", "'ignore'"]),
    ({"enable_gqa": "yes"}, TypeError, ["enable_gqa"]),
    ({"enable_gqa": True}, ValueError, ["query", "head axis"]),
    (
        {"query": [Q] * 3, "key": [K] * 2, "value": [V] * 2, "enable_gqa": True},
        ValueError,
        ["key", "2 key/value heads", "3 query heads"],
    ),
    (
        {"query": [Q] * 4, "key": [K] * 2, "value": [V] * 1, "enable_gqa": True},
        ValueError,
        ["value", "heads"],
    ),
    ({"rng": 42, "dropout_p": 0.5}, TypeError, ["rng", "random.Random"]),
]


@pytest.mark.parametrize(("changes", "error", "words"), CASES)
def test_bad_input_message(changes, error, words):
    with pytest.raises(error, match=re.escape(words[0])) as info:
        call(**changes)
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"


MHA_CASES = [
    (
        {"w_q": [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]], "num_heads": 2},
        ValueError,
        ["w_q", "3 columns", "2 heads"],
    ),
    ({"w_q": [[1.0, 0.0]]}, ValueError, ["w_q", "2 rows"]),
    ({"w_q": None}, TypeError, ["w_q", "None"]),
    ({"num_heads": 0}, ValueError, ["num_heads", "positive"]),
    ({"num_heads": 2, "num_kv_heads": 3}, ValueError, ["num_kv_heads", "does not divide"]),
    ({"b_q": [1.0, 2.0, 3.0]}, ValueError, ["b_q", "(2,)"]),
    ({"w_o": [[1.0, 0.0, 0.0]]}, ValueError, ["w_o", "2 rows"]),
    ({"b_o": [1.0, 2.0]}, ValueError, ["b_o", "w_o"]),
    ({"w_k": [[1.0], [0.0]]}, ValueError, ["w_k", "wide"]),
    ({"key": None, "value": Q}, ValueError, ["value", "without key"]),
]


@pytest.mark.parametrize(("changes", "error", "words"), MHA_CASES)
def test_bad_multi_head_input_message(changes, error, words):
    args = {"query": Q, "key": Q, "value": Q, "w_q": W, "w_k": W, "w_v": W}
    args.update(changes)
    with pytest.raises(error, match=re.escape(words[0])) as info:
        scratch.multi_head_attention(**args)
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"


def test_deep_nesting_is_a_clear_error_not_recursion():
    deep = [1.0]
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="query: nested more than 32 levels"):
        sdpa(deep, K, V)


def test_trace_labels_checked():
    with pytest.raises(ValueError, match="tokens: expected 2 labels"):
        scratch.trace_attention(Q, tokens=["a", "b", "c"])
    for bad in ("ab", 5, (t for t in "ab")):
        with pytest.raises(TypeError, match="tokens: expected a list of 2 strings"):
            scratch.trace_attention(Q, tokens=bad)


def test_transpose_validates_its_input():
    assert scratch.transpose([[1.0, 2.0], [3.0, 4.0]]) == [[1.0, 3.0], [2.0, 4.0]]
    with pytest.raises(ValueError, match=r"a: ragged rows at a\[1\]"):
        scratch.transpose([[1.0, 2.0], [3.0]])
    with pytest.raises(TypeError, match="a: expected a matrix"):
        scratch.transpose(5)


def test_numpy_scalars_in_nested_lists():
    """NumPy bools mask like bools, NumPy ints are as ambiguous as ints, counts may be ints."""
    np = pytest.importorskip("numpy")
    allow = [[True, False, True], [True, True, False]]
    as_numpy_bools = [[np.bool_(a) for a in row] for row in allow]
    assert call(attn_mask=as_numpy_bools) == call(attn_mask=allow)
    with pytest.raises(TypeError, match="attn_mask: found only integers"):
        call(attn_mask=[[np.int64(a) for a in row] for row in allow])
    with pytest.raises(ValueError, match="masked_rows: expected one of"):
        call(masked_rows=np.array(["zero", "nan"]))
    assert scratch.causal_mask(np.int64(2), np.int32(3)) == scratch.causal_mask(2, 3)
    with pytest.raises(TypeError, match=r"query: expected a number at query\[0\], found ndarray"):
        call(query=[np.array([1.0, 2.0]), np.array([3.0, 4.0])])


class ArrayLike:
    """Stands in for a NumPy array: anything with .tolist() is accepted."""

    def __init__(self, data):
        self.data = data

    def tolist(self):
        return self.data


class BrokenArray:
    def tolist(self):
        raise RuntimeError("device lost")


def test_array_likes_are_read_through_tolist():
    assert sdpa(ArrayLike(Q), ArrayLike(K), ArrayLike(V)) == sdpa(Q, K, V)
    with pytest.raises(TypeError, match="key: calling .tolist"):
        sdpa(Q, BrokenArray(), V)


# --- fuzz: random malformed structures never escape as anything but ValueError/TypeError ------

leaf = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**400), 10**400),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.complex_numbers(),
    st.just(float("nan")),
    st.builds(object),
)
structure = st.recursive(
    leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=2), children, max_size=2),
    ),
    max_leaves=30,
)
option = st.one_of(
    st.none(), structure, st.floats(), st.integers(), st.text(max_size=4), st.booleans()
)


@given(structure, structure, structure, option, option, option, option)
def test_fuzz_only_value_or_type_errors(q, k, v, mask, scale, dropout, policy):
    kwargs = {
        "attn_mask": mask,
        "scale": scale,
        "dropout_p": dropout if dropout is not None else 0.0,
        "masked_rows": policy if isinstance(policy, str) else "zero",
    }
    try:
        sdpa(q, k, v, **kwargs)
    except (ValueError, TypeError):
        pass


@given(structure, structure, option)
def test_fuzz_well_shaped_data_bad_options(q, mask, heads):
    try:
        scratch.multi_head_attention(
            q, q, q, W, W, W, attn_mask=mask, num_heads=heads if heads is not None else 1
        )
    except (ValueError, TypeError):
        pass
    try:
        scratch.trace_attention(q, attn_mask=mask)
    except (ValueError, TypeError):
        pass


@st.composite
def regular(draw):
    """A well-formed numeric tensor of random rank and sizes (so shape checks get exercised)."""
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    data = draw(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=1)) * 100
    flat = iter(data * 100)

    def build(dims):
        return (
            [next(flat) for _ in range(dims[0])]
            if len(dims) == 1
            else [build(dims[1:]) for _ in range(dims[0])]
        )

    return build(shape)


@given(
    regular(), regular(), regular(), st.one_of(st.none(), regular()), st.booleans(), st.booleans()
)
def test_fuzz_regular_shapes(q, k, v, mask, causal, gqa):
    try:
        out, w = sdpa(q, k, v, attn_mask=None if causal else mask, is_causal=causal, enable_gqa=gqa)
    except (ValueError, TypeError):
        return
    assert scratch.shape_of(out)[:-1] == scratch.shape_of(w)[:-1]

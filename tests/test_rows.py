"""The row-sampled ground truth: each sampled row equals the full ground truth's row exactly."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch


def gauss(rng, *shape):
    if len(shape) == 1:
        return [rng.gauss(0.0, 2.0) for _ in range(shape[0])]
    return [gauss(rng, *shape[1:]) for _ in range(shape[0])]


def pick(nested, rows):
    """nested[..., rows, :] for nested lists of any depth >= 2."""
    if not isinstance(nested[0][0], list):
        return [nested[i] for i in rows]
    return [pick(block, rows) for block in nested]


def same(a, b):
    """Bitwise equal nested floats (NaN equal to NaN)."""
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (math.isnan(a) and math.isnan(b))


@given(
    seed=st.integers(0, 10_000),
    L=st.integers(1, 9),
    S=st.integers(1, 9),
    mask_kind=st.sampled_from(["none", "causal", "bool", "float", "key-padding"]),
    gqa=st.booleans(),
    policy=st.sampled_from(scratch.MASKED_ROWS),
)
def test_sampled_rows_equal_the_full_ground_truth(seed, L, S, mask_kind, gqa, policy):
    rng = random.Random(seed)
    Hq, Hkv = (4, 2) if gqa else (2, 2)
    q, k, v = gauss(rng, Hq, L, 3), gauss(rng, Hkv, S, 3), gauss(rng, Hkv, S, 2)
    kwargs = {"enable_gqa": gqa, "masked_rows": policy}
    if mask_kind == "causal":
        kwargs["is_causal"] = True
    elif mask_kind == "bool":  # many fully masked rows, so every policy matters
        kwargs["attn_mask"] = [[rng.random() < 0.4 for _ in range(S)] for _ in range(L)]
    elif mask_kind == "float":
        kwargs["attn_mask"] = [[rng.choice([0.0, -1.5, -math.inf]) for _ in range(S)]]
    elif mask_kind == "key-padding":
        kwargs["attn_mask"] = [rng.random() < 0.7 for _ in range(S)]
    rows = [rng.randrange(L) for _ in range(rng.randint(1, 4))]  # repeats and any order
    out, w = scratch.scaled_dot_product_attention(q, k, v, **kwargs)
    out_rows, w_rows = scratch.attention_rows(q, k, v, rows, **kwargs)
    assert same(out_rows, pick(out, rows))
    assert same(w_rows, pick(w, rows))


def test_a_wrong_row_is_seen():
    # the comparison above can fail: row 1's answer is not row 0's
    rng = random.Random(3)
    q, k, v = gauss(rng, 4, 3), gauss(rng, 5, 3), gauss(rng, 5, 2)
    out, _ = scratch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out_rows, _ = scratch.attention_rows(q, k, v, [1], is_causal=True)
    assert same(out_rows, [out[1]])
    assert not same(out_rows, [out[0]])


@pytest.mark.parametrize("seed", range(5))
def test_sample_rows_is_seeded_sorted_distinct_with_both_ends(seed):
    rows = scratch.sample_rows(4096, 32, seed)
    assert rows == scratch.sample_rows(4096, 32, seed)
    assert rows == sorted(set(rows)) and len(rows) == 32
    assert rows[0] == 0 and rows[-1] == 4095
    assert rows != scratch.sample_rows(4096, 32, seed + 1)


def test_sample_rows_small_lengths():
    assert scratch.sample_rows(5, 9) == [0, 1, 2, 3, 4]
    assert scratch.sample_rows(5, 1) == [4]
    assert scratch.sample_rows(5, 2) == [0, 4]


def test_large_causal_rows_are_cheap_and_exact_at_the_edges():
    # L = S = 1024 would be a 1M-entry grid; only the sampled rows of the causal mask are built
    L, E = 1024, 4
    rng = random.Random(0)
    q, k, v = gauss(rng, L, E), gauss(rng, L, E), gauss(rng, L, E)
    out, w = scratch.attention_rows(q, k, v, [0, L - 1], is_causal=True)
    assert w[0][0] == 1.0 and all(x == 0.0 for x in w[0][1:])  # row 0 sees key 0 only
    assert out[0] == v[0]
    assert math.fsum(w[1]) == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize(
    "rows, error, match",
    [
        ([], ValueError, "rows: expected at least one row index"),
        ([0, 4], ValueError, r"rows\[1\]: expected a query row in 0..3, found 4"),
        ([-1], ValueError, r"rows\[0\]: expected a query row in 0..3, found -1"),
        ([True], TypeError, r"rows\[0\]: expected an int row index, found bool"),
        ([1.0], TypeError, r"rows\[0\]: expected an int row index, found float"),
        ("01", TypeError, "rows: expected a list of row indices, found str"),
        (3, TypeError, "rows: expected a list of row indices, found int"),
    ],
)
def test_bad_rows_are_refused(rows, error, match):
    q = [[1.0, 0.0]] * 4
    with pytest.raises(error, match=match):
        scratch.attention_rows(q, q, q, rows)


def test_causal_with_a_mask_and_bad_sample_arguments_are_refused():
    q = [[1.0, 0.0]] * 4
    with pytest.raises(ValueError, match="is_causal: cannot be combined with attn_mask"):
        scratch.attention_rows(q, q, q, [0], [[True] * 4] * 4, is_causal=True)
    with pytest.raises(ValueError, match="count"):
        scratch.sample_rows(4, 0)
    with pytest.raises(TypeError, match="seed: expected an int"):
        scratch.sample_rows(4, 2, seed="1")

"""The ground truth's scaled dot-product attention: hand-worked cases, properties, policies."""

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch

INF = math.inf
U = 2.0**-53  # float64 unit roundoff


def rand_matrix(rng, rows, cols, scale=1.0):
    return [[rng.uniform(-scale, scale) for _ in range(cols)] for _ in range(rows)]


def close(a, b, ulps=4):
    """a equals b up to a few units of float64 rounding (relative)."""
    return abs(a - b) <= ulps * U * max(abs(a), abs(b), 1e-300)


# --- hand-worked 2x2 cases -------------------------------------------------------------------


def test_hand_worked_identity_keys():
    # q = k = I, scale 1: scores = I, each row softmax([1, 0]) = [e/(e+1), 1/(e+1)]
    out, w = scratch.scaled_dot_product_attention(
        [[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 2], [3, 4]], scale=1.0
    )
    e = math.e
    p, r = e / (e + 1), 1 / (e + 1)
    assert close(w[0][0], p) and close(w[0][1], r)
    assert close(w[1][0], r) and close(w[1][1], p)
    assert close(out[0][0], p * 1 + r * 3) and close(out[0][1], p * 2 + r * 4)
    assert close(out[1][0], r * 1 + p * 3) and close(out[1][1], r * 2 + p * 4)


def test_hand_worked_default_scale_and_equal_scores():
    # q = [[2, 2]], both keys [1, 1]: equal scores, weights 1/2 each, output the mean of v
    out, w = scratch.scaled_dot_product_attention([[2, 2]], [[1, 1], [1, 1]], [[0, 4], [2, 8]])
    assert w == [[0.5, 0.5]]
    assert out == [[1.0, 6.0]]


def test_hand_worked_default_scale_is_one_over_sqrt_e():
    # scores [4, 0] with E = 4 -> scaled [2, 0] -> weights [e^2/(e^2+1), 1/(e^2+1)]
    q, k = [[1, 1, 1, 1]], [[1, 1, 1, 1], [0, 0, 0, 0]]
    _, w = scratch.scaled_dot_product_attention(q, k, [[1], [0]])
    assert close(w[0][0], math.exp(2) / (math.exp(2) + 1))
    _, w1 = scratch.scaled_dot_product_attention(q, k, [[1], [0]], scale=1.0)
    assert close(w1[0][0], math.exp(4) / (math.exp(4) + 1))


def test_seed000_example2():
    """Seed 000: the query matches key 1; weights round to [0, 1, 0, 0], output to [10, 0, 2]."""
    k = [[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]]
    v = [[1, 0, 1], [10, 0, 2], [100, 5, 0], [1000, 6, 0]]
    out, w = scratch.scaled_dot_product_attention([[0, 10, 0]], k, v, scale=1 / math.sqrt(4))
    assert [round(x, 3) for x in w[0]] == [0.0, 1.0, 0.0, 0.0]
    assert [round(x, 3) for x in out[0]] == [10.0, 0.0, 2.0]


# --- exactness ------------------------------------------------------------------------------


def test_scores_are_correctly_rounded_dot_products():
    rng = random.Random(3)
    q, k = rand_matrix(rng, 3, 40, 1e3), rand_matrix(rng, 5, 40, 1e3)
    t = scratch.trace_attention(q, k, k, scale=1.0)
    for i, qi in enumerate(q):
        for j, kj in enumerate(k):
            exact = float(sum(Fraction(a * b) for a, b in zip(qi, kj)))  # sum of rounded products
            assert t["scores"].value[i][j] == exact


# --- properties -----------------------------------------------------------------------------

dims = st.integers(1, 6)


@st.composite
def attention_case(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    L, S, E, Ev = draw(dims), draw(dims), draw(dims), draw(dims)
    rng = random.Random(seed)
    mag = draw(st.sampled_from([0.1, 1.0, 30.0]))
    return rand_matrix(rng, L, E, mag), rand_matrix(rng, S, E, mag), rand_matrix(rng, S, Ev, mag)


@given(attention_case())
def test_weight_rows_sum_to_one(case):
    q, k, v = case
    _, w = scratch.scaled_dot_product_attention(q, k, v)
    for row in w:
        assert abs(math.fsum(row) - 1.0) <= 1e-15


@given(attention_case())
def test_causal_upper_triangle_is_exactly_zero(case):
    q, k, v = case
    _, w = scratch.scaled_dot_product_attention(q, k, v, is_causal=True)
    for i, row in enumerate(w):
        assert all(x == 0.0 for x in row[i + 1 :])
        assert abs(math.fsum(row) - 1.0) <= 1e-15  # row 0 always sees key 0: never fully masked


@given(attention_case(), st.randoms(use_true_random=False))
def test_permuting_keys_and_values_permutes_weights_keeps_output(case, rnd):
    q, k, v = case
    perm = list(range(len(k)))
    rnd.shuffle(perm)
    out, w = scratch.scaled_dot_product_attention(q, k, v)
    out_p, w_p = scratch.scaled_dot_product_attention(q, [k[p] for p in perm], [v[p] for p in perm])
    assert w_p == [[row[p] for p in perm] for row in w]  # exact: the same numbers, reordered
    assert out_p == out  # exact: fsum does not depend on the order of its terms


def test_large_logits_1e4():
    q = [[100.0, 0.0], [0.0, 100.0]]
    k = [[100.0, 0.0], [99.99, 0.0]]  # scores 1e4 and 9999: exp(1e4) overflows a float
    out, w = scratch.scaled_dot_product_attention(q, k, [[1.0], [2.0]], scale=1.0)
    e = math.exp(-1.0)
    assert close(w[0][0], 1 / (1 + e)) and close(w[0][1], e / (1 + e))
    assert w[1] == [0.5, 0.5]
    assert all(math.isfinite(x) for row in out for x in row)


# --- masks and fully masked rows ------------------------------------------------------------

Q = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
K = [[1.0, 2.0], [3.0, -1.0]]
V = [[1.0, 10.0], [2.0, 20.0]]
MASK_ROW1_EMPTY = [[True, True], [False, False], [True, False]]


@pytest.mark.parametrize("mask", [MASK_ROW1_EMPTY, [[0.0, 0.0], [-INF, -INF], [0.0, -INF]]])
def test_masked_rows_zero(mask):
    out, w = scratch.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    assert w[1] == [0.0, 0.0] and out[1] == [0.0, 0.0]
    assert w[2] == [1.0, 0.0] and out[2] == V[0]


def test_masked_rows_nan():
    out, w = scratch.scaled_dot_product_attention(
        Q, K, V, attn_mask=MASK_ROW1_EMPTY, masked_rows="nan"
    )
    assert all(math.isnan(x) for x in w[1] + out[1])
    assert w[2] == [1.0, 0.0]


def test_masked_rows_uniform():
    out, w = scratch.scaled_dot_product_attention(
        Q, K, V, attn_mask=MASK_ROW1_EMPTY, masked_rows="uniform"
    )
    assert w[1] == [0.5, 0.5] and out[1] == [1.5, 15.0]
    # "uniform" is what a finite -1e9 fill gives: compare with that textbook trick
    filled = [
        [s if a else -1e9 for s, a in zip(row, m)]
        for row, m in zip(scratch.matmul(Q, scratch.transpose(K)), MASK_ROW1_EMPTY)
    ]
    assert scratch.softmax([[x / math.sqrt(2) for x in filled[1]]]) == [w[1]]


def test_masked_rows_zero_even_when_value_holds_inf():
    v = [[INF, 1.0], [2.0, 3.0]]
    out, _ = scratch.scaled_dot_product_attention(Q, K, v, attn_mask=MASK_ROW1_EMPTY)
    assert out[1] == [0.0, 0.0]


def test_bool_and_float_masks_agree():
    rng = random.Random(11)
    q, k, v = rand_matrix(rng, 4, 3), rand_matrix(rng, 5, 3), rand_matrix(rng, 5, 2)
    allowed = [[rng.random() < 0.6 for _ in range(5)] for _ in range(4)]
    additive = [[0.0 if a else -INF for a in row] for row in allowed]
    assert scratch.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed
    ) == scratch.scaled_dot_product_attention(q, k, v, attn_mask=additive)


def test_float_mask_is_added_after_scaling():
    out_w = scratch.scaled_dot_product_attention(
        [[1.0, 1.0]], [[2.0, 0.0], [0.0, 0.0]], [[1.0], [0.0]], attn_mask=[[0.0, 1.0]], scale=0.5
    )
    # scaled = [1, 0]; + mask [0, 1] = [1, 1] -> equal weights
    assert out_w[1] == [[0.5, 0.5]]


def test_is_causal_equals_top_left_bool_mask():
    rng = random.Random(5)
    for L, S in ((3, 5), (5, 3), (4, 4)):
        q, k, v = rand_matrix(rng, L, 2), rand_matrix(rng, S, 2), rand_matrix(rng, S, 2)
        a = scratch.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = scratch.scaled_dot_product_attention(q, k, v, attn_mask=scratch.causal_mask(L, S))
        assert a == b


def test_causal_mask_alignments():
    assert scratch.causal_mask(2, 3) == [[True, False, False], [True, True, False]]
    assert scratch.causal_mask(2, 3, "bottom-right") == [[True, True, False], [True, True, True]]
    assert scratch.causal_mask(3, 2, "bottom-right")[0] == [False, False]  # row 0 sees nothing
    with pytest.raises(ValueError, match="align"):
        scratch.causal_mask(2, 2, "top-right")


def test_mask_broadcasts_over_leading_dims_and_rows():
    rng = random.Random(2)
    q = [rand_matrix(rng, 3, 2) for _ in range(2)]
    k = [rand_matrix(rng, 4, 2) for _ in range(2)]
    v = [rand_matrix(rng, 4, 2) for _ in range(2)]
    key_padding = [True, True, False, True]  # (S,) broadcasts to (2, 3, 4)
    full = [[key_padding] * 3] * 2
    assert scratch.scaled_dot_product_attention(
        q, k, v, attn_mask=key_padding
    ) == scratch.scaled_dot_product_attention(q, k, v, attn_mask=full)
    per_batch = [[key_padding], [[True, False, True, True]]]  # (2, 1, 4)
    _, w = scratch.scaled_dot_product_attention(q, k, v, attn_mask=per_batch)
    assert all(row[2] == 0.0 for row in w[0]) and all(row[1] == 0.0 for row in w[1])


# --- leading dims and grouped-query attention -----------------------------------------------


def test_leading_dims_match_per_matrix_calls():
    rng = random.Random(9)
    q = [[rand_matrix(rng, 2, 3) for _ in range(3)] for _ in range(2)]  # (2, 3, 2, 3)
    k = [[rand_matrix(rng, 4, 3) for _ in range(3)] for _ in range(2)]
    v = [[rand_matrix(rng, 4, 5) for _ in range(3)] for _ in range(2)]
    out, w = scratch.scaled_dot_product_attention(q, k, v)
    for b in range(2):
        for h in range(3):
            o1, w1 = scratch.scaled_dot_product_attention(q[b][h], k[b][h], v[b][h])
            assert out[b][h] == o1 and w[b][h] == w1


def test_gqa_equals_repeated_kv_heads():
    rng = random.Random(4)
    q = [rand_matrix(rng, 3, 2) for _ in range(6)]  # 6 query heads
    k = [rand_matrix(rng, 4, 2) for _ in range(2)]  # 2 kv heads
    v = [rand_matrix(rng, 4, 3) for _ in range(2)]
    out, w = scratch.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    rep_k = [k[h // 3] for h in range(6)]  # query head h reads kv head h // (6 // 2)
    rep_v = [v[h // 3] for h in range(6)]
    assert (out, w) == scratch.scaled_dot_product_attention(q, rep_k, rep_v)


# --- dropout --------------------------------------------------------------------------------


def test_dropout_reproducible_and_scaled():
    rng = random.Random(1)
    q, k, v = rand_matrix(rng, 6, 3), rand_matrix(rng, 8, 3), rand_matrix(rng, 8, 2)
    _, w0 = scratch.scaled_dot_product_attention(q, k, v)
    a = scratch.scaled_dot_product_attention(q, k, v, dropout_p=0.5, rng=random.Random(42))
    b = scratch.scaled_dot_product_attention(q, k, v, dropout_p=0.5, rng=random.Random(42))
    assert a == b
    out, w = a
    dropped = kept = 0
    for row, row0 in zip(w, w0):
        for x, x0 in zip(row, row0):
            if x == 0.0:
                dropped += 1
            else:
                kept += 1
                assert x == x0 * 2.0  # kept values scaled by 1 / (1 - p)
    assert dropped > 0 and kept > 0
    assert out == scratch.matmul(w, v)  # returned weights are the ones after dropout


# --- IEEE propagation -----------------------------------------------------------------------


def test_nan_in_query_poisons_only_its_row():
    out, w = scratch.scaled_dot_product_attention([[math.nan, 0.0], [1.0, 0.0]], K, V)
    assert all(math.isnan(x) for x in w[0] + out[0])
    assert all(math.isfinite(x) for x in w[1] + out[1])


def test_inf_in_value_propagates():
    out, _ = scratch.scaled_dot_product_attention([[1.0, 0.0]], K, [[INF, 1.0], [2.0, 3.0]])
    assert out[0][0] == INF and math.isfinite(out[0][1])


def test_scale_zero_and_negative():
    _, w = scratch.scaled_dot_product_attention(Q, K, V, scale=0.0)
    assert all(row == [0.5, 0.5] for row in w)
    _, wn = scratch.scaled_dot_product_attention([[1.0, 0.0]], K, V, scale=-1.0)
    assert wn[0][0] > wn[0][1]  # scores [1, 3] negated: key 0 now wins


def test_row_of_minus_inf_scores_from_the_data_counts_as_fully_masked():
    """As a fused kernel sees it: every entry of `masked` is -inf, whatever put it there."""
    q, k, v = [[INF, 0.0], [1.0, 0.0]], [[-1.0, 0.0], [-2.0, 0.0]], [[1.0], [2.0]]
    out, w = scratch.scaled_dot_product_attention(q, k, v)
    assert w[0] == [0.0, 0.0] and out[0] == [0.0]
    _, w_nan = scratch.scaled_dot_product_attention(q, k, v, masked_rows="nan")
    assert all(math.isnan(x) for x in w_nan[0])
    assert w[1] == w_nan[1]  # the finite row is untouched by the policy

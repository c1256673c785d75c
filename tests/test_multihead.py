"""Multi-head, grouped-query and cross-attention built from projections, checked by hand."""

import random

import pytest

import scratch


def rand(rng, rows, cols):
    return [[rng.uniform(-1, 1) for _ in range(cols)] for _ in range(rows)]


def cols(m, lo, hi):
    return [row[lo:hi] for row in m]


@pytest.mark.parametrize(("H", "Hkv"), [(1, 1), (2, 2), (4, 2), (4, 1)])
def test_heads_are_column_blocks_attended_separately(H, Hkv):
    rng = random.Random(H * 10 + Hkv)
    L, S, d_model, d_kv, dh, dv = 3, 4, 5, 6, 2, 3
    x, kv = rand(rng, L, d_model), rand(rng, S, d_kv)
    w_q, w_k, w_v = rand(rng, d_model, H * dh), rand(rng, d_kv, Hkv * dh), rand(rng, d_kv, Hkv * dv)
    w_o = rand(rng, H * dv, 4)
    out, w = scratch.multi_head_attention(
        x, kv, kv, w_q, w_k, w_v, w_o, num_heads=H, num_kv_heads=Hkv, is_causal=True
    )
    q, k, v = scratch.matmul(x, w_q), scratch.matmul(kv, w_k), scratch.matmul(kv, w_v)
    heads = []
    for h in range(H):
        g = h // (H // Hkv)  # the kv head this query head reads
        o_h, w_h = scratch.scaled_dot_product_attention(
            cols(q, h * dh, (h + 1) * dh),
            cols(k, g * dh, (g + 1) * dh),
            cols(v, g * dv, (g + 1) * dv),
            is_causal=True,
        )
        assert w[h] == w_h
        heads.append(o_h)
    concat = [[c for o_h in heads for c in o_h[i]] for i in range(L)]
    assert out == scratch.matmul(concat, w_o)


def test_biases_and_leading_batch_dim():
    rng = random.Random(0)
    x = [rand(rng, 3, 4) for _ in range(2)]  # (B, L, d_model)
    w_q, w_k, w_v, w_o = (rand(rng, 4, 4) for _ in range(4))
    b_q, b_k, b_v, b_o = ([rng.uniform(-1, 1) for _ in range(4)] for _ in range(4))
    out, w = scratch.multi_head_attention(
        x, x, x, w_q, w_k, w_v, w_o, num_heads=2, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o
    )
    for b in range(2):
        o1, w1 = scratch.multi_head_attention(
            x[b], x[b], x[b], w_q, w_k, w_v, w_o, num_heads=2, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o
        )
        assert out[b] == o1 and w[b] == w1
    # a bias on the query shifts the scores: dropping it changes the weights
    _, w_nobias = scratch.multi_head_attention(
        x, x, x, w_q, w_k, w_v, w_o, num_heads=2, b_k=b_k, b_v=b_v, b_o=b_o
    )
    assert w_nobias != w


def test_seed_convention_weights_multiply_on_the_right():
    """Seed 002: x (3, 4) @ w_query (4, 3) gives the printed Q."""
    x = [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]]
    w_query = [[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]
    t = scratch.trace_attention(x, w_q=w_query, w_k=w_query, w_v=w_query)
    assert t["q"].value == [[1, 0, 2], [2, 2, 2], [2, 1, 3]]

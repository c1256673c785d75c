"""Traces: step names, order, shapes and axes, values equal to the direct computation."""

import math
import random

import pytest

import scratch


def rand(rng, rows, cols):
    return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]


SINGLE = [
    "x",
    "w_q",
    "w_k",
    "w_v",
    "q",
    "k",
    "v",
    "scores",
    "scaled",
    "masked",
    "weights",
    "output",
]


def test_single_head_steps_and_values():
    rng = random.Random(1)
    x, wq, wk, wv = rand(rng, 4, 3), rand(rng, 3, 2), rand(rng, 3, 2), rand(rng, 3, 5)
    t = scratch.trace_attention(x, w_q=wq, w_k=wk, w_v=wv, tokens=list("abcd"), is_causal=True)
    assert t.names() == SINGLE
    assert t.tokens == t.key_tokens == ("a", "b", "c", "d")
    # expected values written out independently with loops and fsum (1 head, E = 2)
    fsum = math.fsum
    q = [[fsum(r[m] * wq[m][c] for m in range(3)) for c in range(2)] for r in x]
    k = [[fsum(r[m] * wk[m][c] for m in range(3)) for c in range(2)] for r in x]
    v = [[fsum(r[m] * wv[m][c] for m in range(3)) for c in range(5)] for r in x]
    assert (t["q"].value, t["k"].value, t["v"].value) == (q, k, v)
    scores = [[fsum(a * b for a, b in zip(qi, kj)) for kj in k] for qi in q]
    assert t["scores"].value == scores
    for i, row in enumerate(t["weights"].value):
        e = [
            math.exp(s / math.sqrt(2) - max(scores[i][: i + 1]) / math.sqrt(2))
            for s in scores[i][: i + 1]
        ]
        for j in range(4):
            expected = e[j] / fsum(e) if j <= i else 0.0
            assert abs(row[j] - expected) <= 8 * 2.0**-53  # a few roundings of numbers <= 1
    for i, row in enumerate(t["output"].value):
        for c in range(5):
            exact = fsum(t["weights"].value[i][j] * v[j][c] for j in range(4))
            assert row[c] == exact
    assert t["scores"].shape == (4, 4) and t["scores"].axes == ("query", "key")
    assert t["output"].shape == (4, 5) and t["w_v"].axes == ("model", "feature")
    assert t.scale == 1 / math.sqrt(2)
    for i, row in enumerate(t["masked"].value):  # -inf exactly where causal forbids
        assert all((x == -math.inf) == (j > i) for j, x in enumerate(row))
    assert t.allowed == tuple(tuple(r) for r in scratch.causal_mask(4, 4))
    assert t.source.mask == "causal" and t.source.backend == "scratch" and t.options.is_causal
    with pytest.raises(KeyError, match="no step 'attention'"):
        t["attention"]
    assert "weights" in t and len(t) == len(SINGLE)


def test_no_weights_mode_q_k_v_equal_x():
    x = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66]]
    t = scratch.trace_attention(x, scale=1.0)
    assert t.names() == ["x", "q", "k", "v", "scores", "scaled", "masked", "weights", "output"]
    assert t["q"].value == t["k"].value == t["v"].value == x
    assert t["q"].formula == "q = x (no projection)"
    assert t.allowed is None


def test_multi_head_steps():
    rng = random.Random(2)
    x = rand(rng, 3, 4)
    w = [rand(rng, 4, 4) for _ in range(4)]
    t = scratch.trace_attention(x, None, None, *w, num_heads=2)
    assert t.names() == [
        "x",
        "w_q",
        "w_k",
        "w_v",
        "q",
        "k",
        "v",
        "scores",
        "scaled",
        "masked",
        "weights",
        "head_outputs",
        "concat",
        "w_o",
        "output",
    ]
    assert t["weights"].shape == (2, 3, 3) and t["weights"].axes[0] == "head"
    out, weights = scratch.multi_head_attention(x, x, x, *w, num_heads=2)
    assert t["output"].value == out and t["weights"].value == weights


def test_cross_attention_inputs_are_steps():
    rng = random.Random(3)
    x, mem = rand(rng, 2, 3), rand(rng, 5, 4)
    t = scratch.trace_attention(x, mem, mem, rand(rng, 3, 2), rand(rng, 4, 2), rand(rng, 4, 2))
    assert t.names()[:2] == ["x", "key_input"]
    assert t.key_tokens == ("k0", "k1", "k2", "k3", "k4")
    assert t["scores"].shape == (2, 5)


def test_float_mask_trace_and_fully_masked_note():
    t = scratch.trace_attention(
        [[1.0, 0.0], [0.0, 1.0]], attn_mask=[[0.0, -math.inf], [-math.inf, -math.inf]]
    )
    assert t.source.mask == "float"
    assert t["weights"].value[1] == [0.0, 0.0]
    assert "1 fully masked row" in t["weights"].note
    assert t.allowed == ((True, False), (False, False))


def test_every_backend_lays_out_the_same_steps_and_refuses_value_without_key():
    from scratch import backends

    rng = random.Random(8)
    x, mem = rand(rng, 3, 4), rand(rng, 5, 4)
    w = [rand(rng, 4, 4) for _ in range(4)]
    reference = scratch.trace_attention(x, mem, mem, *w, num_heads=2, attn_mask=[[True] * 5] * 3)
    for name in backends.available():
        be = backends.get(name)
        t = be.trace_attention(x, mem, mem, *w, num_heads=2, attn_mask=[[True] * 5] * 3)
        assert [(s.name, s.formula, s.note, s.axes) for s in t] == [
            (s.name, s.formula, s.note, s.axes) for s in reference
        ], name
        assert (t.tokens, t.key_tokens, t.allowed) == (
            reference.tokens,
            reference.key_tokens,
            reference.allowed,
        ), name
        with pytest.raises(ValueError, match="value: given without key"):
            be.trace_attention(x, value=mem)


def test_axis_labels_are_the_tokens_on_their_axis_else_indices():
    """One rule for the terminal, the notebook view (and the window): query and key axes of the
    tokens' length get the tokens, any other axis (or length) prefix + index."""
    trace = scratch.trace_attention([[1.0], [2.0]], key=[[1.0], [0.0], [3.0]], tokens=["a", "b"],
                                     key_tokens=["x", "y", "z"])  # fmt: skip
    assert trace.axis_labels("query", 2) == ["a", "b"]
    assert trace.axis_labels("key", 3) == ["x", "y", "z"]
    assert trace.axis_labels("key", 2, "k") == ["k0", "k1"]  # not the tokens' length
    assert trace.axis_labels("feature", 3, "c") == ["c0", "c1", "c2"]
    assert trace.axis_labels("model", 2) == ["0", "1"]

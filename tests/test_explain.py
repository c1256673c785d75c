"""explain: where one number of a trace came from, written out with the actual numbers."""

import random

import pytest

import scratch


def rand(rng, rows, cols):
    return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]


def seed_trace():
    x = [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]]
    w_q = [[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]
    w_k = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]
    w_v = [[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]
    return scratch.trace_attention(
        x, w_q=w_q, w_k=w_k, w_v=w_v, scale=1.0, is_causal=True, tokens=["x1", "x2", "x3"]
    )


def test_explain_scores_with_actual_numbers():
    e = scratch.explain(seed_trace(), "scores", (1, 1))
    assert e.text == "scores[1][1] = q[1] . k[1] = 2*4 + 2*4 + 2*0 = 16"
    assert e.sources == (("q", 0, 1), ("k", 0, 1))


def test_explain_projection_weights_output_and_mask():
    t = seed_trace()
    assert (
        scratch.explain(t, "q", (0, 2)).text
        == "q[0][2] = x[0] . w_q[:, 2] = 1*1 + 0*0 + 1*1 + 0*1 = 2"
    )
    masked = scratch.explain(t, "masked", (0, 1)).text
    assert "-inf" in masked and "'x2' comes after query 'x1'" in masked
    w = scratch.explain(t, "weights", (1, 0)).text
    assert w.startswith("weights[1][0] = exp(masked[1][0] - max_row)")
    assert "exp(4 - 16)" in w
    out = scratch.explain(t, "output", (0, 0))
    assert out.text == "output[0][0] = sum_j weights[0][j] * v[j][0] = 1*1 + 0*2 + 0*2 = 1"
    assert out.sources == (("weights", 0, 0), ("v", 1, 0))


def test_explain_long_sums_are_cut_and_bad_index_refused():
    rng = random.Random(5)
    t = scratch.trace_attention(rand(rng, 2, 10))
    assert "(4 more terms)" in scratch.explain(t, "scores", (0, 1)).text
    with pytest.raises(ValueError, match="index"):
        scratch.explain(t, "scores", (0, 7))
    with pytest.raises(ValueError, match="index"):
        scratch.explain(t, "scores", (0,))
    with pytest.raises(TypeError, match="index: expected a tuple of ints"):
        scratch.explain(t, "scores", ("0", 0))


def test_explain_every_cell_of_every_step_multi_head():
    rng = random.Random(6)
    x = rand(rng, 3, 4)
    t = scratch.trace_attention(
        x,
        None,
        None,
        rand(rng, 4, 4),
        rand(rng, 4, 2),
        rand(rng, 4, 2),
        rand(rng, 4, 3),
        num_heads=2,
        num_kv_heads=1,
        attn_mask=[[True, False, True]] * 3,
    )
    for step in t:
        shape = step.shape
        index = tuple(n - 1 for n in shape)
        text = scratch.explain(t, step.name, index).text
        assert text.startswith(step.name)


def test_explain_names_a_missing_step_with_a_value_error():
    trace = scratch.trace_attention([[1.0, 2.0], [0.5, 1.0]])
    with pytest.raises(ValueError, match="^step: expected one of x, q, k, v, .* found 'nope'"):
        scratch.explain(trace, "nope", (0, 0))
    with pytest.raises(TypeError, match="^trace: expected a scratch.Trace"):
        scratch.explain("weights", "weights", (0, 0))
    assert "weights[0][1]" in scratch.explain(trace, "weights", (0, 1)).text

"""Issue 13 part 2, the pure parts: colour ranges, ticks, regenerated examples, flow, sentences."""

from __future__ import annotations

import dataclasses
import math
import random
import re

import numpy as np
import pytest

from gui import sentences, view_model  # noqa: E402
from gui import session as sm  # noqa: E402

INF = math.inf

# ---------------------------------------------------------------- colour ranges


def test_per_row_colour_divides_each_row_by_its_largest_weight():
    weights = np.array([[0.1, 0.3, 0.6], [0.24, 0.16, 0.6], [0.5, 0.25, 0.25]])
    image, levels = view_model.colour_weights(weights, None, "row")
    want = [[1 / 6, 0.5, 1.0], [0.4, 16 / 60, 1.0], [1.0, 0.5, 0.5]]  # worked by hand
    assert levels == (0.0, 1.0)
    np.testing.assert_allclose(image, want, rtol=1e-6)
    assert image.dtype == np.float32 and image.flags["C_CONTIGUOUS"]


def test_auto_colour_spans_the_weights_that_occur_and_greys_masked_cells():
    # the journey preset's weights are 0.10..0.24: a fixed 0..1 scale shows them alike
    weights = np.array([[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.2, 0.3, 0.5]])
    masked = np.array([[0.0, -INF, -INF], [1.0, 2.0, -INF], [1.0, 1.0, 1.0]])
    image, (lo, hi) = view_model.colour_weights(weights, masked, "auto")
    assert np.isnan(image[0, 1]) and np.isnan(image[0, 2]) and np.isnan(image[1, 2])
    assert np.isfinite(image[2]).all()  # nothing masked there: every cell coloured
    shown = [1.0, 0.4, 0.6, 0.2, 0.3, 0.5]  # the six unmasked weights
    assert lo == 0.2 and hi == pytest.approx(np.percentile(shown, 99))
    assert hi - lo < 0.81  # not the 0..1 of the fixed scale
    fixed, levels = view_model.colour_weights(weights, masked, "fixed")
    assert levels == (0.0, 1.0) and np.isnan(fixed[0, 1])  # masked is grey on every scale


def test_auto_colour_lets_one_outlier_saturate_instead_of_flattening_the_rest():
    rng = np.random.default_rng(3)
    weights = rng.uniform(0.001, 0.003, (64, 64))
    weights[5, 7] = 0.9  # one sharp weight among many flat ones (long inputs look like this)
    _image, (lo, hi) = view_model.colour_weights(weights, None, "auto")
    assert hi < 0.01 and lo >= 0.001  # the 4095 others use the whole colour range


def test_colour_ranges_refuse_unknown_names():
    with pytest.raises(ValueError, match="colour: expected one of fixed, row, auto"):
        view_model.colour_weights(np.zeros((2, 2)), None, "rainbow")


def test_masked_weights_are_grey_in_every_head_of_a_causal_trace():
    import scratch

    x = [[0.5, -1.0, 0.25, 1.0], [1.0, 0.5, -0.5, 0.0], [0.0, 1.0, 1.0, -1.0]]
    trace = scratch.trace_attention(x=x, num_heads=2, is_causal=True)
    for head in ("0", "1", view_model.HEAD_AVERAGE):
        (panel,) = view_model.panels(trace, "weights", head, "auto")
        hidden = np.isnan(panel.image)
        want = np.array([[False, True, True], [False, False, True], [False, False, False]])
        assert (hidden == want).all(), (head, hidden)
        assert (panel.raw[hidden] == 0).all()  # the trace's own numbers are untouched


# ---------------------------------------------------------------- ticks


@pytest.mark.parametrize("seed", range(20))
def test_ticks_are_never_closer_than_a_label_needs(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 512)
    labels = [f"t{i}" for i in range(n)]
    lo = rng.uniform(-0.5, n - 1)
    hi = rng.uniform(lo + 0.5, n + 0.5)
    pixels, room = rng.uniform(80, 1200), rng.uniform(10, 60)
    ticks = view_model_ticks(labels, lo, hi, pixels, room)
    per_cell = pixels / (hi - lo)
    for (a, _), (b, _) in zip(ticks, ticks[1:]):
        assert (b - a) * per_cell >= room - 1e-9, (a, b, per_cell, room)
    assert all(lo - 1 < i < hi + 1 for i, _ in ticks)  # only cells in view
    assert all(text == labels[i] for i, text in ticks)


def view_model_ticks(labels, lo, hi, pixels, room):
    pytest.importorskip("pyqtgraph")
    from gui.heatmap import visible_ticks

    return visible_ticks(labels, lo, hi, pixels, room)


def test_ticks_show_every_label_when_zoomed_in_and_accept_an_inverted_range():
    labels = [f"t{i}" for i in range(512)]
    every = view_model_ticks(labels, 100.5, 110.5, 500, 30)  # 50 px a cell: all ten fit
    assert [i for i, _ in every] == list(range(101, 111))
    assert view_model_ticks(labels, 110.5, 100.5, 500, 30) == every  # rows run downwards
    whole = view_model_ticks(labels, -0.5, 511.5, 500, 30)  # ~1 px a cell: 1 label in 50
    assert [i for i, _ in whole][:3] == [0, 50, 100]


# ---------------------------------------------------------------- random examples resized


def test_a_random_example_resized_is_drawn_again_not_zero_padded():
    s = sm.random_session(7, 6, 8, 4, 4, 1)
    s = dataclasses.replace(s, backend="numpy", dtype="float32", mask_mode="causal-top-left")
    s = sm.Session(
        **{**s.__dict__, "backend": "numpy", "dtype": "float32", "mask_mode": "causal-top-left"}
    )
    bigger = sm.regenerated(s, num_tokens=64)
    assert bigger.preset == "random" and bigger.num_tokens == 64
    zero_rows = [i for i, row in enumerate(bigger.query) if not any(row)]
    assert zero_rows == []  # rows 6-63 used to be 0
    assert (bigger.backend, bigger.dtype, bigger.mask_mode) == (
        "numpy",
        "float32",
        "causal-top-left",
    )
    wider = sm.regenerated(bigger, num_heads=2)
    assert wider.preset == "random" and wider.num_heads == 2
    assert len(wider.w_q[0]) == 8 and all(any(col) for col in zip(*wider.w_q))


def test_a_custom_example_resized_keeps_its_values():
    s = sm.random_session(1, 4, 4, 2, 2, 1)
    custom = sm.with_cell(s, "query", 0, 0, 5.0)
    bigger = sm.regenerated(custom, num_tokens=6)
    assert bigger.preset == "custom" and bigger.query[0][0] == 5.0 and bigger.query[5] == (0.0,) * 4


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (dict(num_heads=16, d_k=sm.MAX_DIM // 8), f"heads x d_k = {2 * sm.MAX_DIM} exceeds"),
        (dict(d_k=sm.MAX_DIM + 1), f"heads x d_k = {sm.MAX_DIM + 1} exceeds {sm.MAX_DIM}"),
        (dict(d_v=sm.MAX_DIM + 5), f"kv heads x d_v = {sm.MAX_DIM + 5} exceeds {sm.MAX_DIM}"),
    ],
)
def test_widths_over_the_limit_are_named_not_dumped(sizes, message):
    s = sm.random_session(0, 4, 4, 2, 2, 1)
    with pytest.raises(sm.SessionError, match=re.escape(message)):
        sm.regenerated(s, **sizes)
    sm.regenerated(s, num_heads=16, d_k=sm.MAX_DIM // 16)  # MAX_DIM exactly is allowed


# ---------------------------------------------------------------- the overview's flow


def test_flow_stages_follow_the_computation():
    names = ["x", "w_q", "w_k", "w_v", "q", "k", "v", "scores", "scaled", "masked", "weights"]
    names += ["head_outputs", "output"]
    stages = view_model.flow_stages(names)
    assert [s.names for s in stages] == [
        ("x",),
        ("w_q", "w_k", "w_v"),
        ("q", "k", "v"),
        ("scores",),
        ("scaled",),
        ("masked",),
        ("weights",),
        ("head_outputs",),
        ("output",),
    ]
    assert [s.arrow for s in stages] == [
        "",
        "with",
        "x @ W",
        "q @ k^T",
        "x scale",
        "mask",
        "softmax",
        "weights @ v",
        "concat",
    ]
    plain = view_model.flow_stages(["x", "q", "k", "v", "scores", "weights", "output"])
    assert plain[-1].arrow == "@ v" and plain[1].names == ("q", "k", "v")
    cross = view_model.flow_stages(["x", "key_input", "value_input", "q", "k", "v", "output"])
    assert cross[0].names == ("x", "key_input", "value_input")
    assert view_model.shape_text((2, 6, 6), ("head", "query", "key")) == "2 heads, 6x6"
    assert view_model.shape_text((512, 3), ("query", "model")) == "512x3"


# ---------------------------------------------------------------- sentences


def test_a_runner_up_of_about_zero_is_left_out_and_weights_read_alike():
    text = sentences.attention_sentence([1.93e-22, 1.0], "q", ["k0", "k1"])
    assert text == "'q' attends almost only to 'k1' (1.00); every other key gets under 0.01"
    journey = sentences.attention_sentence(
        [0.1385, 0.2379, 0.2333, 0.1240], "journey", list("abcd")
    )
    assert journey == "'journey' attends most to 'b' (0.24) and 'c' (0.23)"


@pytest.mark.parametrize("seed", range(30))
def test_every_number_in_a_weights_sentence_has_two_decimals(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    raw = [rng.random() ** rng.choice([1, 8, 40]) for _ in range(n)]
    row = [v / sum(raw) for v in raw]
    text = sentences.attention_sentence(row, "q", [f"k{j}" for j in range(n)])
    shown = re.findall(r"\((\d[^) ]*)", text)
    assert shown and all(re.fullmatch(r"\d\.\d\d", v) for v in shown), text
    assert "e-" not in text


def test_under_a_causal_mask_the_sentence_picks_a_row_that_teaches():
    weights = [[1.0, 0.0, 0.0], [0.3, 0.7, 0.0], [0.2, 0.3, 0.5]]
    hidden = [[False, True, True], [False, False, True], [False, False, False]]
    tokens = ["Your", "journey", "starts"]
    text = sentences.describe("attention", weights, tokens, tokens, hidden=hidden)
    assert text == "'journey' attends most to 'journey' (0.70) and 'Your' (0.30)."
    first = sentences.describe("attention", weights, tokens, tokens, row=0, hidden=hidden)
    assert first.startswith("'Your' may see only 'Your' (the mask hides the other keys)")
    assert sentences.teaching_row([[1.0, 0.0], [1.0, 0.0]]) == 0  # nothing better: sharpest

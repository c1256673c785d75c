"""The view model: a trace's step as float32 panels (one per head, or their average), and the
overview's flow of stages."""

from __future__ import annotations

import math

import numpy as np

import scratch
from gui.present import view_model


def _hand_trace():
    """A tiny trace typed by hand: one plain step, one with a head axis, one masked."""
    inf = math.inf
    steps = (
        scratch.Step("scores", "s", [[1.0, -2.0, 3.0], [0.5, 0.0, -4.0]], "n", ("query", "key")),
        scratch.Step("masked", "m", [[1.0, -inf, 3.0], [-inf, -inf, -inf]], "n", ("query", "key")),
        scratch.Step(
            "weights",
            "w",
            [[[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]], [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]],
            "n",
            ("head", "query", "key"),
        ),
    )
    return scratch.Trace(steps, ("a", "b"), ("x", "y", "z"), 1.0, 2, 2)


def test_panels_hold_the_step_values_row_major_float32():
    t = _hand_trace()
    (p,) = view_model.panels(t, "scores")
    assert p.image.dtype == np.float32 and p.image.flags["C_CONTIGUOUS"]
    assert p.image.tolist() == [[1.0, -2.0, 3.0], [0.5, 0.0, -4.0]]
    assert (p.row_labels, p.col_labels) == (["a", "b"], ["x", "y", "z"])
    assert p.levels == (-4.0, 4.0) and p.kind == "signed"
    (m,) = view_model.panels(t, "masked")
    assert np.isnan(m.image).tolist() == [[False, True, False], [True, True, True]]
    heads = view_model.panels(t, "weights", view_model.HEAD_ALL)
    assert [h.image.tolist() for h in heads] == [
        [[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]],
        [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
    ]
    assert heads[0].levels == (0.0, 1.0)
    (avg,) = view_model.panels(t, "weights", view_model.HEAD_AVERAGE)
    assert avg.image.tolist() == [[0.375, 0.625, 0.0], [0.5, 0.0, 0.5]]
    (one,) = view_model.panels(t, "weights", "1")
    assert one.head == 1 and one.image.tolist() == heads[1].image.tolist()


def test_the_head_average_panel_shows_the_traces_own_head_average(monkeypatch):
    """The window computes no number: the average panel is trace.head_average, as given."""
    t = scratch.trace_attention(x=[[1.0, 0.0, 0.5, 2.0], [0.0, 1.0, -1.0, 0.5]], num_heads=2)
    marked = [[0.125, 0.875], [0.625, 0.375]]  # no mean of the heads: only the trace says so
    asked: list[str] = []

    def head_average(self, name):
        asked.append(name)
        return marked

    monkeypatch.setattr(type(t), "head_average", head_average)
    (avg,) = view_model.panels(t, "weights", view_model.HEAD_AVERAGE)
    assert asked == ["weights"] and avg.raw.tolist() == marked


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
    assert plain[1].arrow == "= x"  # q = k = v = x: no W to multiply by
    cross = view_model.flow_stages(["x", "key_input", "value_input", "q", "k", "v", "output"])
    assert cross[0].names == ("x", "key_input", "value_input")
    assert view_model.shape_text((2, 6, 6), ("head", "query", "key")) == "2 heads, 6x6"
    assert view_model.shape_text((512, 3), ("query", "model")) == "512x3"

"""The pipeline tab: the colour scale chosen changes the image (not the numbers), masked weights
are grey, each step gets its kind of sentence."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

import scratch  # noqa: E402
from gui.present import view_model  # noqa: E402
from tests.journey_sessions import journey_preset, with_mask  # noqa: E402

pytestmark = pytest.mark.gui


def test_colour_ranges_change_the_image_and_say_which_is_on(qtbot, errors, open_window):
    w = open_window(journey_preset(step="weights"))
    p = w.pipeline
    hm = p.heatmaps[0]
    weights = np.asarray(w.outcome.trace["weights"].tolist())
    assert p.colour_box.currentData() == p.colour == "auto"
    lo, hi = hm.image_item.getLevels()
    assert lo == pytest.approx(weights.min(), abs=1e-6) and hi < 0.3  # 0.10..0.24, not 0..1
    p.colour_box.setCurrentIndex(p.colour_box.findData("row"))
    p.colour_box.activated.emit(p.colour_box.currentIndex())
    assert p.colour == "row" and hm.panel.colour_note.endswith(view_model.COLOUR_RANGES["row"])
    np.testing.assert_allclose(hm.image_item.image.max(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        hm.image_item.image, weights / weights.max(axis=1, keepdims=True), rtol=1e-6
    )
    assert hm.panel.raw.tolist() == weights.tolist()  # hover and numbers: the real weights
    p.set_colour("fixed")
    assert tuple(hm.image_item.getLevels()) == (0.0, 1.0)
    np.testing.assert_array_equal(hm.image_item.image, weights.astype(np.float32))
    with pytest.raises(ValueError, match="colour: expected one of fixed, row, auto"):
        p.set_colour("plasma")


def test_masked_weights_are_greyed_out_not_coloured_as_zero(qtbot, errors, open_window):
    w = open_window(with_mask(journey_preset(step="weights"), "causal-top-left"))
    image = w.pipeline.heatmaps[0].image_item.image
    upper = np.triu(np.ones((6, 6), bool), k=1)
    assert np.isnan(image[upper]).all() and np.isfinite(image[~upper]).all()
    grey = w.pipeline.heatmaps[0].grab().toImage()  # the backdrop shows through NaN cells
    assert grey.width() > 0


def test_the_pipeline_writes_each_step_s_kind_of_sentence(qtbot, errors):
    """The sentence under a step is the kind its registry entry names (none for q, concat, a
    gradient), for one head and for several heads with w_o."""
    from gui.views.pipeline_view import PipelineView

    rng = np.random.default_rng(11)
    x = rng.normal(size=(4, 4)).round(3).tolist()
    w = {n: rng.normal(size=(4, 4)).round(3).tolist() for n in ("w_q", "w_k", "w_v", "w_o")}
    dO = rng.normal(size=(4, 4)).round(3).tolist()
    one = scratch.trace_attention(x, is_causal=True, grad_output=dO)
    heads = scratch.trace_attention(x, **w, num_heads=2, attn_mask=[[True] * 4] * 4)
    view = PipelineView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    said = {}
    for label, trace in (("one", one), ("heads", heads)):
        view.set_trace(trace)
        for name in ("q", "scores", "scaled", "masked", "weights", "head_outputs", "concat",
                     "output", "grad_scores"):  # fmt: skip
            if name in trace:
                view.set_step(name, force=True)
                said[label, name] = view.sentence.text()
    verbs = {
        n: re.findall(r"^'[^']*' (\w+)", said["one", n]) for n in ("scores", "scaled", "weights")
    }
    assert verbs == {"scores": ["matches"], "scaled": ["matches"], "weights": ["attends"]}, said
    assert re.fullmatch(r"\d+ of 16 positions are masked \(-inf\); .*", said["one", "masked"])
    assert " takes its output " in said["one", "output"]
    assert said["heads", "masked"] == "Nothing is masked: every query may attend every key."
    assert " takes its output " in said["heads", "head_outputs"]
    assert said["heads", "output"] == (
        "Each query's output row is the 2 heads' outputs side by side (step head_outputs), "
        "then @ W_o."
    )
    silent = [k for k in said if k[1] in ("q", "concat", "grad_scores")]
    assert len(silent) == 4 and all(said[k] == "" for k in silent), said


def test_each_step_s_inputs_are_the_steps_it_reads(qtbot, errors):
    """The 'inputs of this step' line names what the step reads (scratch's registry of steps),
    with heads and w_o, and for the backward's steps."""
    from gui.views.pipeline_view import PipelineView

    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 4)).round(3).tolist()
    w = {n: rng.normal(size=(4, 4)).round(3).tolist() for n in ("w_q", "w_k", "w_v", "w_o")}
    dO = rng.normal(size=(4, 4)).round(3).tolist()
    traces = {
        "one": scratch.trace_attention(x, is_causal=True, grad_output=dO),
        "heads": scratch.trace_attention(x, **w, num_heads=2),
    }
    view = PipelineView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    said = {}
    for label, trace in traces.items():
        view.set_trace(trace)
        for name in trace.names():
            view.set_step(name, force=True)
            said[label, name] = view.source_title.text().removeprefix("inputs of this step: ")
    assert said["one", "q"] == "x" and said["one", "x"] == "none"
    assert said["one", "scores"] == "q, k" and said["one", "scaled"] == "scores"
    assert said["one", "masked"] == "scaled" and said["one", "weights"] == "masked"
    assert said["one", "output"] == "weights, v"
    assert said["heads", "q"] == "x, w_q" and said["heads", "head_outputs"] == "weights, v"
    assert said["heads", "concat"] == "head_outputs"
    assert said["heads", "output"] == "concat, w_o"
    assert said["one", "grad_weights"] == "grad_output, v", said

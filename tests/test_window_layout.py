"""The window at 1024 x 700: nothing clipped, readable side panels, room for several heads, the
overview's arrows between its stages."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import Qt  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.views.pipeline_view import SOURCE_SIZE  # noqa: E402
from tests.journey_sessions import journey_preset, with_mask  # noqa: E402

pytestmark = pytest.mark.gui


def test_at_1024_by_700_nothing_is_clipped(qtbot, errors, open_window):
    w = open_window(journey_preset(backend="torch-cpu", dtype="bfloat16"))
    w.resize(1024, 700)
    qtbot.wait(20)
    assert w.width() == 1024  # the window's minimum fits
    scroll = w.inputs_scroll
    assert not scroll.horizontalScrollBar().isVisible()
    assert w.inputs.width() >= w.inputs.minimumSizeHint().width()
    assert w.pipeline.slider.width() >= 250
    dtype = w.inputs.dtype
    assert dtype.currentText() == "bfloat16"
    text = dtype.fontMetrics().horizontalAdvance("bfloat16")
    assert dtype.width() >= text + 20  # room for the text and the arrow


def test_the_side_panel_inputs_are_large_enough_to_read(qtbot, errors, open_window):
    w = open_window(sm.random_session(0, 64, 8, 4, 4, 1), size=(1024, 700))
    w.pipeline.set_step("v")
    qtbot.wait(10)
    shown = [hm for hm in w.pipeline.sources if hm.isVisible()]
    assert len(shown) == 2  # x and w_v feed v
    for hm in shown:
        assert hm.width() >= SOURCE_SIZE and hm.height() >= 140
        hm.plot.getViewBox().updateMatrix()  # the view's transform as the next paint has it
        image, box = hm.image_item.sceneBoundingRect(), hm.plot.getViewBox().sceneBoundingRect()
        # the matrix fills its tile along its long side (no small picture in a big frame)
        assert max(image.width() / box.width(), image.height() / box.height()) >= 0.95


def test_several_heads_at_1024_get_the_side_panels_room(qtbot, errors, open_window):
    session = with_mask(sm.random_session(0, 6, 8, 4, 4, 2), "causal-top-left")
    w = open_window(session, size=(1024, 700))
    p = w.pipeline
    p.set_head("all")
    qtbot.wait(20)
    shown = [hm for hm in p.heatmaps if hm.isVisible()]
    assert len(shown) == 2 and not p.source_area.isVisible()
    for hm in shown:  # each heatmap's whole layout (axes, colour bar) fits: nothing cut off
        least = hm.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        assert least <= hm.view.width(), (least, hm.view.width())
        assert hm.bar.sceneBoundingRect().right() <= hm.view.width() + 1
        cell = hm.image_item.sceneBoundingRect().width() / 6
        assert len(hm._texts) == 36, len(hm._texts)  # one number per cell of the 6x6 weights
        for item in hm._texts:  # a number shows only where its cell holds it
            assert not item.isVisible() or item.sceneBoundingRect().width() <= cell
    p.set_head("0")
    qtbot.wait(20)
    assert p.source_area.isVisible()  # one heatmap: the inputs of the step are back


def test_the_overview_draws_the_flow_with_an_arrow_between_stages(qtbot, errors, open_window):
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 2), size=(1024, 700))
    w.tabs.setCurrentWidget(w.overview)
    qtbot.wait(10)
    ov = w.overview
    stages = ov.stages
    assert [n for s in stages for n in s.names] == w.outcome.trace.names()
    assert len(ov.arrows) == len(stages) - 1
    for arrow, before, after in zip(ov.arrows, ov.columns, ov.columns[1:]):
        a, b, c = arrow.geometry(), before.geometry(), after.geometry()
        if b.top() == c.top():  # same row: the arrow sits between the two stages
            assert b.right() <= a.left() and a.right() <= c.left()
        else:  # a new row: the arrow leads into its first stage
            assert a.right() <= c.left() and a.top() >= b.top()
    assert list(ov.heatmaps) == w.outcome.trace.names()
    for name, hm in ov.heatmaps.items():  # each tile is that step, whole, with its shape
        assert hm.panel.step == name and hm.isVisible()
        assert hm.image_item.image.shape == hm.panel.raw.shape

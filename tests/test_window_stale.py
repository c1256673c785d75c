"""The window marks a stale trace, asks before a long scratch computation, and keeps its hover
tooltip inside itself."""

from __future__ import annotations

import dataclasses
import threading

import pytest

pytest.importorskip("PyQt6")

from PyQt6.QtCore import QRect  # noqa: E402

from gui.state import controller  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.views import slow_warning  # noqa: E402
from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui


def test_the_canvas_is_marked_stale_while_a_new_trace_is_computed(qtbot, open_window, settle):
    w = open_window(journey_preset(step="weights"))
    assert w.pipeline.stale.isHidden()
    release = threading.Event()

    def slow_run(s, progress, cancelled):
        release.wait(20)
        return controller.run(s, progress, cancelled)

    w.worker.compute = slow_run
    try:
        w.inputs.apply_edit(sm.reseeded, 5)
        qtbot.waitUntil(lambda: w.worker.busy)
        assert w.pipeline.stale.isVisible()
        assert w.pipeline.stale.text().startswith("stale: the previous inputs' trace")
        p = w.pipeline  # the mark covers the stale sentence, not the heatmaps and their titles
        heatmaps = QRect(p.split.mapTo(p.content, p.split.rect().topLeft()), p.split.size())
        assert not heatmaps.intersects(p.stale.geometry()), (heatmaps, p.stale.geometry())
        old = w.outcome
    finally:
        release.set()
    settle(w)
    qtbot.waitUntil(lambda: w.outcome is not old)
    assert w.pipeline.stale.isHidden()
    # a failure leaves the last good trace on screen, marked
    w.worker.compute = lambda s, progress, cancelled: (_ for _ in ()).throw(ValueError("no"))
    w.inputs.apply_edit(sm.reseeded, 6)
    qtbot.waitUntil(lambda: not w.worker.busy)
    assert w.pipeline.stale.isVisible() and "last good trace" in w.pipeline.stale.text()


def test_the_scratch_backend_at_4096_tokens_is_said_to_take_minutes():
    s = dataclasses.replace(sm.random_session(0, num_tokens=4096, num_heads=1), backend="scratch")
    assert slow_warning.scratch_seconds(s) > 60
    assert slow_warning.duration(slow_warning.scratch_seconds(s)).startswith("about 1 minute")
    assert slow_warning.scratch_seconds(dataclasses.replace(s, backend="numpy")) == 0
    small = dataclasses.replace(sm.random_session(0, num_tokens=64), backend="scratch")
    assert slow_warning.scratch_seconds(small) < slow_warning.WARN_S


def test_a_long_scratch_computation_waits_for_an_answer(qtbot, open_window, settle, monkeypatch):
    monkeypatch.setattr(slow_warning, "WARN_S", 0.0)  # every scratch computation is "long"
    w = open_window(dataclasses.replace(journey_preset(), backend="numpy", dtype="float64"))
    computed = w.outcome
    scratch = w.inputs.backends["scratch"]
    w.inputs.apply_edit(sm.with_backend, "scratch", scratch)
    assert w.slow.isVisible() and w.slow.label.text().startswith("scratch would take about")
    assert not w.worker.busy and w.outcome is computed  # nothing started
    assert "not computed yet" in w.pipeline.stale.text()
    w.slow.numpy_button.click()
    settle(w)
    assert w.inputs.session.backend == "numpy" and w.outcome.backend == "numpy"
    assert w.slow.isHidden() and w.pipeline.stale.isHidden()
    w.inputs.apply_edit(sm.with_backend, "scratch", scratch)
    assert w.slow.isVisible()
    w.slow.anyway_button.click()
    qtbot.waitUntil(lambda: not w.worker.busy and w.outcome.backend == "scratch", timeout=60_000)
    assert w.slow.isHidden()
    w.inputs.apply_edit(sm.reseeded, 9)  # the same size again: not asked twice
    assert w.slow.isHidden()
    settle(w)


@pytest.mark.parametrize("size", [(1024, 700), (1400, 900)])
def test_the_hover_tooltip_stays_inside_the_window(qtbot, open_window, size):
    from PyQt6.QtCore import QEvent, QPoint
    from PyQt6.QtGui import QHelpEvent
    from PyQt6.QtWidgets import QApplication

    from gui.widgets.hover_tip import HoverTip

    w = open_window(journey_preset(step="weights"), size)
    hm = w.pipeline.heatmaps[0]
    hm.hover(2, 3)
    text = hm.toolTip()
    assert text.startswith("ground truth") or "weights" in text  # the hover's explanation
    hm.setToolTip(text + " " + "and a long tail of words " * 12)  # wider than any room left
    corners = [QPoint(2, 2), QPoint(hm.width() - 2, 2), QPoint(hm.width() - 2, hm.height() - 2)]
    for at in corners:
        event = QHelpEvent(QEvent.Type.ToolTip, at, hm.mapToGlobal(at))
        QApplication.sendEvent(hm, event)
        tip = HoverTip.of(hm)
        assert tip.isVisible() and tip.text() == hm.toolTip()
        assert w.rect().contains(tip.geometry()), (at, tip.geometry(), w.rect())
        assert tip.geometry().width() > 100 and tip.geometry().height() > 20
    hm.setToolTip("")
    QApplication.sendEvent(hm, QEvent(QEvent.Type.Leave))
    assert HoverTip.of(hm).isHidden()

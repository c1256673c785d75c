"""The Backward tab at 13 tokens, 1024x700: numbers in every step's cells where they fit (the
forward views' rule), and in a 13 x 13 gradient's cells once zoomed in far enough."""

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtGui import QFont, QFontMetrics  # noqa: E402

from gui.present import numbers  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.widgets.heatmap import Heatmap  # noqa: E402

pytestmark = pytest.mark.gui
SMALLEST = 6  # points: the smallest type a cell number is written in


def main_map(pipeline) -> Heatmap:
    """The step's own heatmap: the largest one on screen (the inputs' panels are smaller)."""
    shown = [h for h in pipeline.findChildren(Heatmap) if h.isVisible() and h.panel is not None]
    return max(shown, key=lambda h: h.width() * h.height())


def fits(hm: Heatmap) -> bool:
    """Whether the widest number (at the smallest type, 2 px to spare) fits a cell in view."""
    box = hm.plot.getViewBox()
    (x0, x1), (y0, y1) = box.viewRange()
    cell_w, cell_h = box.width() / abs(x1 - x0), box.height() / abs(y1 - y0)
    font = QFont()
    font.setPointSize(SMALLEST)
    metrics = QFontMetrics(font)
    raw = hm.panel.raw
    widest = max(metrics.horizontalAdvance(numbers.cell(float(v))) for v in raw.ravel())
    return widest + 2 <= cell_w and metrics.height() <= cell_h


def test_backward_steps_at_13_tokens_show_numbers_where_they_fit(qtbot, open_window):
    window = open_window(sm.random_session(0, 13, 4, 2, 2, 1), size=(1024, 700))
    window.tabs.setCurrentWidget(window.backward)
    qtbot.waitUntil(lambda: window.backward_outcome is not None, timeout=60_000)
    pipeline = window.backward.pipeline
    shown = {}
    for name in pipeline.names():
        pipeline.set_step(name)
        qtbot.wait(20)
        hm = main_map(pipeline)
        rows, cols = hm.panel.raw.shape
        written = len(hm.numbers.items) == rows * cols and hm.numbers.point_size > 0
        if fits(hm):
            assert written, f"{name} ({rows}x{cols}): numbers fit its cells but none are written"
        shown[name] = written
    # the narrow gradients (13 x 2, 13 x 1, 4 x 2) have room at 1024x700
    for name in ("grad_output", "grad_value", "row_dot", "grad_query", "grad_key", "grad_w_q"):
        assert shown[name], name
    # a 13 x 13 gradient's '-0.51' needs 24 px at 6 points, its cells get about 20: zoomed in
    # to 6 x 6 cells, the numbers come
    pipeline.set_step("grad_weights")
    qtbot.wait(20)
    hm = main_map(pipeline)
    hm.plot.getViewBox().setRange(xRange=(-0.5, 5.5), yRange=(-0.5, 5.5), padding=0)
    qtbot.waitUntil(lambda: hm.numbers.point_size > 0)
    assert fits(hm) and len(hm.numbers.items) >= 36  # the locked aspect may show a few more

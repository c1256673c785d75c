"""One heatmap: token ticks that never overlap (also zoomed in), readable cells for a tall thin
matrix, numbers that fit their cells, a labelled colour bar."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QPoint, QPointF, Qt  # noqa: E402
from PyQt6.QtGui import QFontMetrics, QWheelEvent  # noqa: E402
from PyQt6.QtWidgets import QApplication  # noqa: E402

import scratch  # noqa: E402
from gui.present import view_model  # noqa: E402
from gui.widgets.heatmap import Heatmap  # noqa: E402
from gui.widgets.token_axis import visible_ticks  # noqa: E402

pytestmark = pytest.mark.gui


def big_trace(rows: int, cols: int) -> object:
    """A hand-made trace with one (rows, cols) matrix, labels t0, t1, ..."""
    values = np.arange(rows * cols, dtype=float).reshape(rows, cols) / (rows * cols)
    step = scratch.Step("x", "x", values.tolist(), "n", ("query", "model"))
    labels = tuple(f"t{i}" for i in range(rows))
    return scratch.Trace((step,), labels, labels, 1.0)


def shown_heatmap(qtbot, width: int, height: int, panel=None) -> Heatmap:
    """A Heatmap shown at (width, height), showing `panel` when one is given."""
    hm = Heatmap()
    qtbot.addWidget(hm)
    hm.resize(width, height)
    hm.show()
    if panel is not None:
        hm.show_panel(panel)
        qtbot.wait(10)
    return hm


@pytest.mark.parametrize("seed", range(20))
def test_ticks_are_never_closer_than_a_label_needs(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 512)
    labels = [f"t{i}" for i in range(n)]
    lo = rng.uniform(-0.5, n - 1)
    hi = rng.uniform(lo + 0.5, n + 0.5)
    pixels, room = rng.uniform(80, 1200), rng.uniform(10, 60)
    ticks = visible_ticks(labels, lo, hi, pixels, room)
    per_cell = pixels / (hi - lo)
    assert ticks  # a cell is always in view and a label always fits (room < pixels)
    for (a, _), (b, _) in zip(ticks, ticks[1:]):
        assert (b - a) * per_cell >= room - 1e-9, (a, b, per_cell, room)
    assert all(lo - 1 < i < hi + 1 for i, _ in ticks)  # only cells in view
    assert all(text == labels[i] for i, text in ticks)


def test_ticks_show_every_label_when_zoomed_in_and_accept_an_inverted_range():
    labels = [f"t{i}" for i in range(512)]
    every = visible_ticks(labels, 100.5, 110.5, 500, 30)  # 50 px a cell: all ten fit
    assert [i for i, _ in every] == list(range(101, 111))
    assert visible_ticks(labels, 110.5, 100.5, 500, 30) == every  # rows run downwards
    whole = visible_ticks(labels, -0.5, 511.5, 500, 30)  # ~1 px a cell: 1 label in 50
    assert [i for i, _ in whole][:3] == [0, 50, 100]


def test_ticks_on_a_512_token_axis_never_overlap_and_follow_the_zoom(qtbot, errors):
    hm = shown_heatmap(qtbot, 700, 600, view_model.panels(big_trace(512, 512), "x")[0])
    axis = hm.plot.getAxis("bottom")
    metrics = QFontMetrics(axis.style["tickFont"])

    def shown() -> list[float]:
        lo, hi = hm.plot.getViewBox().viewRange()[0]
        return [v for _, vs in axis.tickValues(lo, hi, axis.width()) for v in vs]

    def gaps_fit(values: list[float]) -> bool:
        widest = max(metrics.horizontalAdvance(axis.labels[int(v)]) for v in values)
        widest = metrics.height() if axis.rotated else widest  # upright labels: their height
        px = [hm.plot.getViewBox().mapViewToScene(QPointF(v, 0)).x() for v in values]
        return all(b - a >= widest for a, b in zip(px, px[1:]))

    whole = shown()
    assert 3 <= len(whole) <= 30 and gaps_fit(whole)
    # a mouse-wheel turn over the matrix zooms in: a narrower range, denser labels
    centre = hm.view.mapFromScene(hm.plot.getViewBox().sceneBoundingRect().center())
    for _ in range(6):
        wheel = QWheelEvent(
            QPointF(centre),
            QPointF(hm.view.mapToGlobal(centre)),
            QPoint(0, 0),
            QPoint(0, 120),
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(hm.view.viewport(), wheel)
    lo, hi = hm.plot.getViewBox().viewRange()[0]
    assert hi - lo < 511 / 2, (lo, hi)
    zoomed = shown()
    assert gaps_fit(zoomed) and (zoomed[1] - zoomed[0]) < (whole[1] - whole[0])
    hm.reset_zoom()
    lo, hi = hm.plot.getViewBox().viewRange()[0]
    assert lo <= -0.5 + 1e-6 and hi >= 511.5 - 1e-6


def test_a_tall_thin_matrix_gets_readable_cells(qtbot, errors):
    hm = shown_heatmap(qtbot, 600, 600, view_model.panels(big_trace(512, 3), "x")[0])
    hm.plot.getViewBox().updateMatrix()  # the view's transform as the next paint has it
    width = hm.image_item.sceneBoundingRect().width()
    assert width / 3 >= 40, width  # square cells would make it about 3 pixels wide
    hm.show_panel(view_model.panels(big_trace(4, 3), "x")[0])  # near square: square cells
    qtbot.wait(10)
    hm.plot.getViewBox().updateMatrix()
    rect = hm.image_item.sceneBoundingRect()
    assert rect.width() / 3 == pytest.approx(rect.height() / 4, rel=0.02)


def test_check_tab_numbers_fit_their_cells_and_the_colour_bar_is_labelled(qtbot, errors):
    hm = shown_heatmap(qtbot, 420, 500)
    diff = np.array([[3.6e-4, 8.6e-4, 1.2e-4], [5.0e-5, 2.75e-3, 6.7e-4]])
    panel = view_model.Panel(
        "|output - ground truth|",
        diff.astype(np.float32),
        ["a", "b"],
        ["0", "1", "2"],
        "query",
        "feature",
        "weights",
        (0.0, 3e-3),
        "output",
        None,
        diff,
    )
    hm.show_panel(panel)
    qtbot.wait(10)
    cell = hm.image_item.sceneBoundingRect().width() / 3
    assert len(hm._texts) == 6
    assert len({t.text() for t in hm._texts}) == 6  # six values, six readings
    for item in hm._texts:
        assert item.isVisible(), item.text()
        assert item.sceneBoundingRect().width() <= cell, (item.text(), cell)
    axis = hm.bar.axis
    metrics = QFontMetrics(axis.style.get("tickFont") or axis.font())
    labels = [t for sp, vs in axis.tickValues(0.0, 3e-3, 400) for t in axis.tickStrings(vs, 1, sp)]
    assert len(labels) >= 3
    assert axis.width() >= max(metrics.horizontalAdvance(t) for t in labels) + 5


def test_cell_numbers_live_in_one_layer_and_go_with_it(qtbot, errors):
    """A step of 24 x 24 numbers is 576 plain texts under one layer, not 576 items the view box
    follows one by one (pyqtgraph TextItems took seconds to make and to delete at 40 tokens);
    the next panel's numbers replace them all, and a number sits on its cell's centre."""
    from PyQt6 import sip

    from gui.widgets.cell_numbers import CellText

    hm = shown_heatmap(qtbot, 900, 800, view_model.panels(big_trace(24, 24), "x")[0])
    texts, box = hm._texts, hm.plot.getViewBox()
    assert len(texts) == 24 * 24 and all(isinstance(t, CellText) for t in texts)
    assert all(t.parentItem() is hm.numbers.layer for t in texts)
    assert hm.numbers.layer.scene() is box.scene() and len(box.addedItems) <= 3  # no text
    cell = texts[0].pos()
    centre = box.mapViewToScene(cell)
    assert texts[0].sceneBoundingRect().center().x() == pytest.approx(centre.x(), abs=1.0)
    assert texts[0].sceneBoundingRect().center().y() == pytest.approx(centre.y(), abs=1.0)
    hm.show_panel(view_model.panels(big_trace(4, 3), "x")[0])
    qtbot.wait(10)
    assert len(hm._texts) == 12
    assert all(sip.isdeleted(t) or t.scene() is None for t in texts)  # the old ones are gone

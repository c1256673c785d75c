"""A heatmap at 4096 tokens: whole tick labels that never overlap, a title inside its plot, and
'numbers in cells x 1e-03' only while cells show numbers (issue 33, item 6)."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QRectF  # noqa: E402
from PyQt6.QtGui import QFont  # noqa: E402

import scratch  # noqa: E402
from gui.present import view_model  # noqa: E402
from gui.widgets.heatmap import Heatmap  # noqa: E402

pytestmark = pytest.mark.gui

JOURNEY = ("Your", "journey", "starts", "with", "one", "step")


def long_trace(n: int, seed: int, cols: int | None = None) -> object:
    """A trace with one 'weights' step (n, cols) of weights between 0.00024 and 0.0011 (the
    issue's 4096-token journey), labelled as the window labels a journey grown to n tokens: the
    six words, then t6, t7, ..."""
    rng = np.random.default_rng(seed)
    cols = n if cols is None else cols
    w = (rng.uniform(1.0, 4.5, (n, cols)) / 4096).astype(np.float32)  # (n, cols)
    step = scratch.Step("weights", "weights", w, "w", ("query", "key"))
    tokens = JOURNEY[:n] + tuple(f"t{i}" for i in range(len(JOURNEY), n))
    keys = JOURNEY[:cols] + tuple(f"t{i}" for i in range(len(JOURNEY), cols))
    return scratch.Trace((step,), tokens, keys, 1.0)


def shown(qtbot, panel, size: tuple[int, int], compact: bool, points: int = 0) -> Heatmap:
    hm = Heatmap(compact=compact)
    qtbot.addWidget(hm)
    if points:  # the same check at other tick-font sizes: whatever a font's widths are
        font = QFont()
        font.setPointSize(points)
        for side in ("left", "bottom"):
            hm.plot.getAxis(side).setStyle(tickFont=font)
    hm.resize(*size)
    hm.show()
    hm.show_panel(panel)
    for _ in range(2):  # paint: the axes measure their labels, then the layout gives them room
        qtbot.wait(10)
        hm.grab()
    return hm


def drawn_labels(hm: Heatmap, side: str) -> list[tuple[QRectF, str, int]]:
    """(rectangle on the axis, text, the cell its centre names) of each label drawn."""
    axis, box = hm.plot.getAxis(side), hm.plot.getViewBox()
    out = []
    for rect, text in axis.drawn:
        at = box.mapSceneToView(axis.mapToScene(rect.center()))
        out.append((rect, text, round(at.y() if side == "left" else at.x())))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("points", [7, 9, 11])
@pytest.mark.parametrize("size", [(260, 250), (420, 380)])
def test_small_tiles_at_4096_tokens_show_whole_labels_apart(qtbot, errors, seed, points, size):
    trace = long_trace(4096, seed)
    (panel,) = view_model.panels(trace, "weights")
    hm = shown(qtbot, panel, size, compact=True, points=points)
    for side, labels in (("left", trace.tokens), ("bottom", trace.key_tokens)):
        drawn = drawn_labels(hm, side)
        assert len(drawn) >= 3, (side, drawn)  # the axis is labelled along its length
        bounds = hm.plot.getAxis(side).boundingRect()
        for rect, text, cell in drawn:
            assert text == labels[cell], (side, text, cell, labels[cell])  # whole, and its own
            assert bounds.contains(rect), (side, text, rect, bounds)
        for (a, ta, _), (b, tb, _) in zip(drawn, drawn[1:]):
            assert not a.intersects(b), (side, ta, tb, a, b)


def title_rect(hm: Heatmap) -> QRectF:
    """The title's text as laid out, in the heatmap widget's pixels."""
    item = hm.plot.titleLabel.item
    scene = item.mapRectToScene(item.boundingRect())
    return hm.view.mapFromScene(scene).boundingRect().toRectF()


def says_numbers(hm: Heatmap) -> bool:
    return "numbers in cells" in re.sub("<[^>]+>", " ", hm.plot.titleLabel.text)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("size", [(700, 600), (520, 420)])
def test_the_title_lies_inside_and_the_factor_is_said_iff_cells_show_numbers(
    qtbot, errors, seed, size
):
    trace = long_trace(4096, seed, cols=3)  # every weight < 0.01: written x 1e-03
    (panel,) = view_model.panels(trace, "weights")
    hm = shown(qtbot, panel, size, compact=False)
    inside = QRectF(hm.view.rect().toRectF())
    assert "colour:" in hm.plot.titleLabel.text  # a title of three lines
    assert inside.contains(title_rect(hm)), (title_rect(hm), inside)
    assert hm.numbers.point_size == 0 and not hm.numbers.items  # 4096 rows: no cell numbered
    assert not says_numbers(hm), hm.plot.titleLabel.text
    box = hm.plot.getViewBox()
    box.setRange(xRange=(-0.5, 2.5), yRange=(9.5, 14.5), padding=0)  # five rows: numbers fit
    qtbot.wait(10)
    assert hm.numbers.point_size > 0 and hm.numbers.items
    assert says_numbers(hm), hm.plot.titleLabel.text
    exponent = hm.numbers.exponent
    assert exponent < 0 and f"x 1e{exponent:03d}" in hm.plot.titleLabel.text
    for (i, j), item in hm.numbers.items.items():  # the factor times the mantissa is the cell
        value = float(item.text()) * 10.0**exponent
        assert value == pytest.approx(float(panel.raw[i, j]), abs=0.5 * 10.0 ** (exponent - 2))
    assert inside.contains(title_rect(hm)), (title_rect(hm), inside)
    hm.reset_zoom()  # back to the whole matrix: the numbers go, and the factor with them
    qtbot.wait(10)
    assert hm.numbers.point_size == 0 and not says_numbers(hm)

"""Numbers written in a heatmap's cells: those in view, whenever they fit at the current zoom."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PyQt6.QtGui import QFont, QFontMetrics

from gui.present import numbers
from gui.present.view_model import Panel, largest_finite
from gui.widgets import controls

POINT_SIZES = (9, 8, 7, 6)  # the largest type whose numbers fit their cells is used
CONDENSED = 75  # percent width of the last resort: compact numbers in 6 pt condensed type
MOST_TEXTS = 1600  # at most this many cells in view get numbers (40 x 40): more would crawl
PADDING = 3  # pixels a number leaves free in its cell (its text box's margins included)
MARGIN = 1  # pixels around a number's text box


def common_exponent(raw: np.ndarray) -> int:
    """The power of ten a matrix of tiny numbers (all below 0.01) is written in; 0 otherwise."""
    top = largest_finite(raw)
    return math.floor(math.log10(top)) if 0 < top < 0.01 else 0


def cells_in_view(
    x_range: tuple[float, float], y_range: tuple[float, float], shape: tuple[int, int]
) -> tuple[range, range]:
    """The rows and columns whose centres lie in the view (cell (i, j) is centred at (j, i))."""
    (x0, x1), (y0, y1) = sorted(x_range), sorted(y_range)
    rows = range(max(0, math.ceil(y0)), min(shape[0] - 1, math.floor(y1)) + 1)
    cols = range(max(0, math.ceil(x0)), min(shape[1] - 1, math.floor(x1)) + 1)
    return rows, cols


class CellNumbers:
    """The TextItems of one plot's cell numbers, made for the cells in view as they fit."""

    def __init__(self, plot: pg.PlotItem) -> None:
        self.plot = plot
        self.items: dict[tuple[int, int], pg.TextItem] = {}
        self.point_size = 0  # the type size in use (0: no numbers shown)
        self.panel: Panel | None = None
        self.cmap: pg.ColorMap | None = None
        self.exponent = 0
        self.format = numbers.cell  # numbers.compact where the full numbers do not fit

    def set_panel(self, panel: Panel | None, cmap: pg.ColorMap | None = None) -> str:
        """Forget the old numbers; returns the common factor ('1e-04') the cells are written in."""
        for item in self.items.values():
            self.plot.removeItem(item)
        self.items = {}
        self.point_size = 0
        self.panel, self.cmap = panel, cmap
        self.exponent = 0
        if panel is not None:  # a pooled panel knows its largest |value| (16.7 M cells unread)
            big = panel.largest
            self.exponent = common_exponent(panel.raw if big is None else np.array([big]))
        return f"1e{self.exponent:03d}" if self.exponent else ""

    def text(self, i: int, j: int) -> str:
        """Cell (i, j)'s number as written (a mantissa when the matrix has a common factor)."""
        return _written(float(self.panel.raw[i, j]), self.exponent, self.format)

    def fit(self) -> None:
        """Show the numbers of the cells in view in the largest type that fits them, or none."""
        panel, box = self.panel, self.plot.getViewBox()
        if panel is None:
            return
        x_range, y_range = box.viewRange()
        rows, cols = cells_in_view(x_range, y_range, panel.raw.shape)
        wide = box.width() / max(abs(x_range[1] - x_range[0]), 1e-9)  # pixels per column
        high = box.height() / max(abs(y_range[1] - y_range[0]), 1e-9)  # pixels per row
        size, chosen, font = 0, numbers.cell, QFont()
        if 0 < len(rows) * len(cols) <= MOST_TEXTS:
            size, chosen, font = _largest_fit(
                [(i, j) for i in rows for j in cols], self.panel.raw, self.exponent, wide, high
            )
        if chosen is not self.format:  # the numbers drawn are in the other format: redraw
            for item in self.items.values():
                self.plot.removeItem(item)
            self.items, self.format = {}, chosen
        wanted = {(i, j) for i in rows for j in cols} if size else set()
        for key in [k for k in self.items if k not in wanted]:
            self.plot.removeItem(self.items.pop(key))
        for i, j in sorted(wanted - self.items.keys()):
            item = pg.TextItem(self.text(i, j), color=self._pen(i, j), anchor=(0.5, 0.5))
            item.textItem.document().setDocumentMargin(MARGIN)  # Qt's 4 px would not fit
            item.setPos(j, i)
            self.plot.addItem(item)
            self.items[(i, j)] = item
        if size:
            for item in self.items.values():
                item.setFont(font)
        self.point_size = size

    def _pen(self, i: int, j: int) -> object:
        """Black or white for contrast with the cell's colour; dark grey on a masked cell."""
        shade = self.panel.pixel(i, j)
        if not math.isfinite(shade):
            return (90, 90, 90)
        lo, hi = self.panel.levels
        colour = self.cmap.map((min(max(shade, lo), hi) - lo) / (hi - lo), mode="qcolor")
        light = 0.299 * colour.red() + 0.587 * colour.green() + 0.114 * colour.blue()
        return "k" if light > 140 else "w"


def _written(v: float, exponent: int, form: Callable[[float], str]) -> str:
    """v as a cell writes it in `form`: its mantissa when the matrix has a common factor."""
    return form(v / 10.0**exponent) if exponent and math.isfinite(v) else form(v)


def _largest_fit(
    cells: list[tuple[int, int]], raw: np.ndarray, exponent: int, wide: float, high: float
) -> tuple[int, Callable[[float], str], QFont]:
    """The type size, format and font whose numbers fit cells `wide` x `high` pixels: the full
    format ('-0.51') in the largest size that fits, else the compact one ('-.51'), at last in
    condensed type; (0, numbers.cell, a font) when none fits at the smallest size."""
    values = [float(raw[i, j]) for i, j in cells]
    tries = [(numbers.cell, points, 100) for points in POINT_SIZES]
    tries += [(numbers.compact, points, 100) for points in POINT_SIZES]
    tries.append((numbers.compact, POINT_SIZES[-1], CONDENSED))
    for form, points, stretch in tries:
        texts = {_written(v, exponent, form) for v in values}
        font = _font(points, stretch)
        metrics = QFontMetrics(font)
        widest = max(metrics.horizontalAdvance(t) for t in texts)
        if widest + PADDING <= wide and metrics.height() + 2 * MARGIN <= high:
            return points, form, font
    return 0, numbers.cell, QFont()


def _font(points: int, stretch: int = 100) -> QFont:
    return controls.font(points, stretch=stretch)

"""Numbers written in a heatmap's cells: those in view, whenever they fit at the current zoom."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import Qt
from PyQt6.QtGui import QFont, QFontMetrics, QTransform
from PyQt6.QtWidgets import QGraphicsItem, QGraphicsItemGroup, QGraphicsSimpleTextItem

from gui.present import numbers
from gui.present.view_model import Panel, largest_finite
from gui.widgets import controls

POINT_SIZES = (9, 8, 7, 6)  # the largest type whose numbers fit their cells is used
CONDENSED = 75  # percent width of the last resort: compact numbers in 6 pt condensed type
MOST_TEXTS = 1600  # at most this many cells in view get numbers (40 x 40): more would crawl
PADDING = 3  # pixels a number leaves free in its cell (its text box's margins included)
MARGIN = 1  # pixels kept free above and below a number


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


class CellText(QGraphicsSimpleTextItem):
    """One cell's number: plain Qt text centred on its cell. Not a pyqtgraph TextItem: each of
    those follows the view's every change in Python, so 1,600 of them took seconds to make and
    to delete (a step change at 40 tokens); CellNumbers.fit places them all at once instead."""

    def __init__(self, text: str, colour: object, parent: QGraphicsItem) -> None:
        super().__init__(text, parent)
        self.setBrush(pg.mkColor(colour))
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)  # hovers reach the heatmap

    def place(self, per_pixel_x: float, per_pixel_y: float) -> None:
        """Centred on its position, one text pixel one screen pixel (view units per pixel)."""
        box = self.boundingRect()
        centre = QTransform.fromTranslate(-box.width() / 2, -box.height() / 2)
        self.setTransform(centre * QTransform.fromScale(per_pixel_x, per_pixel_y))


class CellNumbers:
    """The texts of one plot's cell numbers, made for the cells in view as they fit."""

    def __init__(self, plot: pg.PlotItem) -> None:
        self.plot = plot
        self.layer = self._new_layer()  # every number's parent, over the image
        self.items: dict[tuple[int, int], CellText] = {}
        self.point_size = 0  # the type size in use (0: no numbers shown)
        self.panel: Panel | None = None
        self.cmap: pg.ColorMap | None = None
        self.exponent = 0
        self.format = numbers.cell  # numbers.compact where the full numbers do not fit

    def set_panel(self, panel: Panel | None, cmap: pg.ColorMap | None = None) -> str:
        """Forget the old numbers; returns the common factor ('1e-04') the cells are written in."""
        self._clear()
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
            self._clear()
            self.format = chosen
        wanted = {(i, j) for i in rows for j in cols} if size else set()
        if not wanted:
            self._clear()
        for key in [k for k in self.items if k not in wanted]:
            self.plot.scene().removeItem(self.items.pop(key))  # Python's now: freed with it
        for i, j in sorted(wanted - self.items.keys()):
            item = CellText(self.text(i, j), self._pen(i, j), self.layer)
            item.setPos(j, i)
            self.items[(i, j)] = item
        if size:  # view units per screen pixel; rows may run downwards (an inverted y axis)
            per_x = (-1 if box.state["xInverted"] else 1) / wide
            per_y = (1 if box.state["yInverted"] else -1) / high
            for item in self.items.values():
                item.setFont(font)
                item.place(per_x, per_y)
        self.point_size = size

    def _new_layer(self) -> QGraphicsItemGroup:
        """An empty group in the plot's view coordinates, drawn over the image."""
        layer = QGraphicsItemGroup()
        layer.setZValue(10)
        self.plot.getViewBox().addItem(layer, ignoreBounds=True)
        return layer

    def _clear(self) -> None:
        """Every number gone at once: the layer leaves the scene with them (deleted in C++)."""
        if self.items:
            self.plot.getViewBox().removeItem(self.layer)
            self.layer = self._new_layer()
        self.items = {}

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

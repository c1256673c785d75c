"""Heatmap widget: one matrix as a row-major ImageItem with token ticks, colour bar and numbers."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QRectF, Qt, pyqtSignal
from PyQt6.QtGui import QBrush, QColor, QFont, QPen
from PyQt6.QtWidgets import QGraphicsRectItem, QVBoxLayout, QWidget

from gui.view_model import Panel

pg.setConfigOptions(background="w", foreground="k", antialias=True)

COLORMAPS = {"signed": "CET-D1A", "weights": "viridis"}
MASKED_BACKGROUND = (215, 215, 215)  # masked (-inf) cells are NaN in the image: grey shows through
MAX_TICKS = 24


def cell_text(v: float, tiny: bool = False) -> str:
    """Short number for a cell: whole numbers as such, else 2 decimals (3 digits from 10 up)."""
    if not math.isfinite(v):
        return str(v)  # '-inf' (masked), 'inf', 'nan'
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    if tiny:  # a matrix of tiny numbers (differences): scientific notation
        return f"{v:.1e}"
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.3g}"


def tick_list(labels: list[str], most: int = MAX_TICKS) -> list[tuple[int, str]]:
    """Every label while they fit, else every n-th so at most `most` show."""
    every = max(1, math.ceil(len(labels) / most))
    return [(i, labels[i]) for i in range(0, len(labels), every)]


def _cosmetic(colour: QColor, pixels: int) -> QPen:
    """A pen `pixels` wide on screen whatever the zoom."""
    pen = QPen(colour, pixels)
    pen.setCosmetic(True)
    return pen


class Heatmap(QWidget):
    """A matrix heatmap; emits the hovered cell and, when compact, clicks."""

    cellHovered = pyqtSignal(object)  # (row, col) or None when the mouse leaves the matrix
    clicked = pyqtSignal()

    def __init__(self, compact: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.compact = compact
        self.panel: Panel | None = None
        self._hover: tuple[int, int] | None = None
        self._texts: list[pg.TextItem] = []
        self._marks: list[QGraphicsRectItem] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.view = pg.GraphicsLayoutWidget()
        self.view.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        layout.addWidget(self.view)
        self.plot = self.view.addPlot(row=0, col=0)
        self.plot.invertY(True)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.vb.setMouseEnabled(x=False, y=False)
        self._backdrop = QGraphicsRectItem()  # grey behind the matrix only: NaN cells show it
        self._backdrop.setBrush(QBrush(QColor(*MASKED_BACKGROUND)))
        self._backdrop.setPen(QPen(Qt.PenStyle.NoPen))
        self._backdrop.setZValue(-10)
        self.plot.addItem(self._backdrop)
        self.image_item = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image_item)
        self.bar = None
        if not compact:
            self.bar = pg.ColorBarItem(
                values=(0, 1),
                colorMap=COLORMAPS["weights"],
                interactive=False,
                width=18,
                colorMapMenu=False,
            )
            self.bar.setImageItem(self.image_item)
            self.view.addItem(self.bar, row=0, col=1)
        self._hover_box = QGraphicsRectItem()
        self._hover_box.setPen(_cosmetic(QColor(255, 140, 0), 3))
        self._hover_box.setZValue(20)
        self._hover_box.hide()
        self.plot.addItem(self._hover_box)
        self.view.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.view.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        small = QFont()
        small.setPointSize(7 if compact else 9)
        for side in ("left", "bottom"):
            self.plot.getAxis(side).setStyle(tickFont=small)
            self.plot.getAxis(side).enableAutoSIPrefix(False)  # token axes have no units
        self.plot.setAspectLocked(True)  # square cells

    # ---------------------------------------------------------------- content

    def show_panel(self, panel: Panel) -> None:
        """Render one panel: fixed levels, float32 row-major image, labels, numbers."""
        self.panel = panel
        rows, cols = panel.image.shape
        cmap = pg.colormap.get(COLORMAPS[panel.kind])
        # the fast path: fixed levels, float32 C-contiguous row-major data
        self.image_item.setColorMap(cmap)
        self.image_item.setImage(panel.image, autoLevels=False, levels=panel.levels)
        self.image_item.setRect(QRectF(-0.5, -0.5, cols, rows))
        self._backdrop.setRect(QRectF(-0.5, -0.5, cols, rows))
        if self.bar is not None:
            self.bar.setColorMap(cmap)
            self.bar.setLevels(values=panel.levels)
        self.plot.setTitle(panel.title, size="9pt" if self.compact else "11pt")
        most_x = 3 if self.compact else MAX_TICKS
        self.plot.getAxis("bottom").setTicks([tick_list(panel.col_labels, most_x)])
        self.plot.getAxis("left").setTicks([tick_list(panel.row_labels)])
        if not self.compact:
            self.plot.setLabel("left", panel.row_axis)
            self.plot.setLabel("bottom", panel.col_axis)
        # one call for both axes: with the aspect locked, setting x then y lets the second call
        # shrink the first range to keep cells square, cutting columns off the view
        self.plot.vb.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)
        self.clear_highlight()
        self._hover = None
        self._hover_box.hide()
        self._update_texts(panel, cmap)

    def _update_texts(self, panel: Panel, cmap: pg.ColorMap) -> None:
        """Numbers in the cells for small matrices (text colour chosen for contrast)."""
        for item in self._texts:
            self.plot.removeItem(item)
        self._texts = []
        if self.compact or not panel.show_text:
            return
        lo, hi = panel.levels
        font = QFont()
        font.setPointSize(9 if max(panel.image.shape) <= 8 else 7)
        finite = np.abs(panel.raw[np.isfinite(panel.raw)])
        tiny = bool(finite.size) and float(finite.max()) < 0.01
        for (i, j), raw in np.ndenumerate(panel.raw):
            v = float(raw)
            if math.isfinite(v):
                colour = cmap.map((min(max(v, lo), hi) - lo) / (hi - lo), mode="qcolor")
                light = 0.299 * colour.red() + 0.587 * colour.green() + 0.114 * colour.blue()
                pen = "k" if light > 140 else "w"
            else:
                pen = (90, 90, 90)
            item = pg.TextItem(cell_text(v, tiny), color=pen, anchor=(0.5, 0.5))
            item.setFont(font)
            item.setPos(j, i)
            self.plot.addItem(item)
            self._texts.append(item)

    # ---------------------------------------------------------------- highlight and hover

    def clear_highlight(self) -> None:
        """Remove the row/column marks."""
        for mark in self._marks:
            self.plot.removeItem(mark)
        self._marks = []

    def highlight(self, axis: int, index: int) -> None:
        """Outline row `index` (axis 0) or column `index` (axis 1): a source of the hovered cell."""
        if self.panel is None:
            return
        rows, cols = self.panel.image.shape
        if axis == 0 and 0 <= index < rows:
            rect = QRectF(-0.5, index - 0.5, cols, 1)
        elif axis == 1 and 0 <= index < cols:
            rect = QRectF(index - 0.5, -0.5, 1, rows)
        else:
            return
        mark = QGraphicsRectItem(rect)
        mark.setPen(_cosmetic(QColor(255, 140, 0), 3))
        mark.setBrush(QBrush(QColor(255, 165, 0, 70)))
        mark.setZValue(10)
        self.plot.addItem(mark)
        self._marks.append(mark)

    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        """The (row, col) under a scene position, or None outside the matrix."""
        if self.panel is None or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.plot.vb.mapSceneToView(scene_pos)
        row, col = math.floor(p.y() + 0.5), math.floor(p.x() + 0.5)
        rows, cols = self.panel.image.shape
        return (row, col) if 0 <= row < rows and 0 <= col < cols else None

    def _on_mouse_moved(self, scene_pos) -> None:
        cell = self.cell_at(scene_pos)
        if cell == self._hover:
            return
        self._hover = cell
        if cell is None:
            self._hover_box.hide()
        else:
            self._hover_box.setRect(QRectF(cell[1] - 0.5, cell[0] - 0.5, 1, 1))
            self._hover_box.show()
        self.cellHovered.emit(cell)

    def _on_mouse_clicked(self, event) -> None:
        if self.compact:
            self.clicked.emit()

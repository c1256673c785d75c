"""Model view: every head of every layer as a small heatmap; click one to open it."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QPointF, QRectF, Qt, pyqtSignal
from PyQt6.QtGui import QColor, QFont, QImage, QPainter, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

LABEL = 34  # pixels for the layer labels on the left and the head labels on top
GAP = 4  # pixels between cells


def colour_table() -> np.ndarray:
    """viridis as 256 RGBA rows (uint8), the weights colour map of the pipeline."""
    return pg.colormap.get("viridis").getLookupTable(0.0, 1.0, 256, alpha=True)


def head_image(weights: np.ndarray, table: np.ndarray) -> QImage:
    """One (T, T) head as an RGBA QImage, scaled to its own maximum (cells stay sharp)."""
    top = float(weights.max()) or 1.0
    index = np.clip((weights / top * 255).round(), 0, 255).astype(np.uint8)
    rgba = np.ascontiguousarray(table[index])  # (T, T, 4)
    h, w = index.shape
    image = QImage(rgba.data, w, h, 4 * w, QImage.Format.Format_RGBA8888)
    return image.copy()  # owns its pixels: the array may go away


class ModelGrid(QWidget):
    """A layers x heads grid of attention maps; emits headClicked(layer, head)."""

    headClicked = pyqtSignal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attentions: np.ndarray | None = None  # (layers, heads, T, T)
        self.images: list[list[QImage]] = []
        self.selected: tuple[int, int] | None = None
        self.setMinimumSize(320, 240)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)
        self.setToolTip("Each square is one head: row i, column j = how much token i attends to j")

    def set_attentions(self, attentions: np.ndarray) -> None:
        """Show a run's (layers, heads, T, T) weights."""
        table = colour_table()
        self.attentions = attentions
        self.images = [[head_image(h, table) for h in layer] for layer in attentions]
        self.selected = None
        self.update()

    def select(self, layer: int, head: int) -> None:
        """Outline one head (the one open in the pipeline)."""
        self.selected = (layer, head)
        self.update()

    def cell_size(self) -> float:
        """Side of one square in pixels."""
        if not self.images:
            return 0.0
        layers, heads = len(self.images), len(self.images[0])
        width = (self.width() - LABEL) / heads - GAP
        height = (self.height() - LABEL) / layers - GAP
        return max(4.0, min(width, height))

    def cell_rect(self, layer: int, head: int) -> QRectF:
        """Where one head is drawn."""
        side = self.cell_size()
        return QRectF(LABEL + head * (side + GAP), LABEL + layer * (side + GAP), side, side)

    def head_at(self, point: QPointF) -> tuple[int, int] | None:
        """The (layer, head) under a point, if any."""
        if not self.images:
            return None
        for layer in range(len(self.images)):
            for head in range(len(self.images[0])):
                if self.cell_rect(layer, head).contains(point):
                    return layer, head
        return None

    def mousePressEvent(self, event) -> None:
        found = self.head_at(event.position())
        if found is not None:
            self.select(*found)
            self.headClicked.emit(*found)

    def mouseMoveEvent(self, event) -> None:
        found = self.head_at(event.position())
        self.setCursor(Qt.CursorShape.PointingHandCursor if found else Qt.CursorShape.ArrowCursor)
        if found is not None and self.attentions is not None:
            layer, head = found
            self.setToolTip(f"layer {layer}, head {head}: click to open it in the pipeline")

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("white"))
        if not self.images:
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Run a text to see heads")
            return
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)  # sharp cells
        font = QFont()
        font.setPointSize(8)
        painter.setFont(font)
        side = self.cell_size()
        for layer, row in enumerate(self.images):
            rect = self.cell_rect(layer, 0)
            painter.drawText(
                QRectF(0, rect.top(), LABEL - 4, side),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                f"L{layer}",
            )
            for head, image in enumerate(row):
                painter.drawImage(self.cell_rect(layer, head), image)
        for head in range(len(self.images[0])):
            rect = self.cell_rect(0, head)
            painter.drawText(
                QRectF(rect.left(), 0, side, LABEL - 4),
                Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom,
                f"H{head}",
            )
        if self.selected is not None:
            painter.setPen(QPen(QColor(220, 30, 30), 3))
            painter.drawRect(self.cell_rect(*self.selected).adjusted(-2, -2, 2, 2))
        painter.end()

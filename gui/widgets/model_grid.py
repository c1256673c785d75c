"""Model view: every head of every layer as a small heatmap; click one to open it."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QPointF, QRectF, Qt, pyqtSignal
from PyQt6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

from gui.present import pooled
from gui.widgets import controls

LABEL = 34  # pixels for the layer labels on the left and the head labels on top
GAP = 4  # pixels between cells
GROUP_GAP = 10  # extra pixels between the groups of query heads that share a key/value head
BAND = 18  # pixels of the band naming a group's key/value head
MIN_SIDE = 26  # a cell never shrinks below this: more layers than fit scroll instead
MAX_SIDE = 48  # nor grows above this (more layers in view)


def label_font() -> QFont:
    """The grid's layer and head labels' font."""
    return controls.font(8)


def colour_table(name: str = "viridis") -> np.ndarray:
    """A colour map as 256 RGBA rows (uint8); viridis: the weights colour map of the pipeline."""
    return pg.colormap.get(name).getLookupTable(0.0, 1.0, 256, alpha=True)


def coloured(index: np.ndarray, table: np.ndarray) -> QImage:
    """A (rows, cols) uint8 index into `table` as an RGBA QImage that owns its pixels."""
    rgba = np.ascontiguousarray(table[index])  # (rows, cols, 4)
    rows, cols = index.shape
    return QImage(rgba.data, cols, rows, 4 * cols, QImage.Format.Format_RGBA8888).copy()


def head_image(weights: np.ndarray, table: np.ndarray) -> QImage:
    """One (T, T) head as an RGBA QImage, scaled to its own maximum (cells stay sharp).

    A head longer than a cell has pixels (MAX_SIDE) is max-pooled to fit: drawn by sampling,
    a 512-token head showed one cell in 11 along each axis and a sharp head one flat colour."""
    blocks = tuple(-(-n // MAX_SIDE) for n in weights.shape)  # cells per pixel (ceil)
    weights = pooled.maximum(weights, blocks)  # (ceil(T / bt), ceil(S / bs))
    top = float(weights.max()) or 1.0
    index = np.clip((weights / top * 255).round(), 0, 255).astype(np.uint8)
    return coloured(index, table)


class ModelGrid(QWidget):
    """A layers x heads grid of attention maps; emits headClicked(layer, head).

    Query heads that read the same key/value head (grouped-query attention) stand side by side
    under a coloured band naming that KV head. Cells never shrink below MIN_SIDE pixels: a deep
    model (30 layers) grows taller than its scroll area and scrolls. With newest_only each cell
    shows only the last row of its head: what the newest token attends to.
    """

    headClicked = pyqtSignal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attentions: np.ndarray | None = None  # (layers, heads, T, T)
        self.images: list[list[QImage]] = []
        self.kv_heads: list[int] = []  # query head h reads key/value head kv_heads[h]
        self.columns: list[int] = []  # the heads in the order drawn: grouped by KV head
        self.newest_only = False
        self.selected: tuple[int, int] | None = None
        self.count_from = 0  # the labels' first number (the Train tab counts from 1, as papers do)
        self.empty_text = "Run a text to see heads"  # what an empty grid says
        self.setMinimumSize(320, 240)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)
        self.setToolTip("Each square is one head: row i, column j = how much token i attends to j")

    def set_attentions(
        self,
        attentions: np.ndarray,
        kv_heads: list[int] | None = None,
        newest_only: bool = False,
    ) -> None:
        """Show a run's (layers, heads, T, T) weights; kv_heads[h]: the key/value head query
        head h reads (None: each its own); newest_only: each head's last row alone."""
        table = colour_table()
        heads = attentions.shape[1]
        self.attentions = attentions
        self.kv_heads = list(range(heads)) if kv_heads is None else list(kv_heads)
        self.columns = sorted(range(heads), key=lambda h: (self.kv_heads[h], h))
        self.newest_only = newest_only
        shown = attentions[:, :, -1:, :] if newest_only else attentions  # (layers, heads, 1|T, T)
        self.images = [[head_image(h, table) for h in layer] for layer in shown]
        self.selected = None
        gaps = GROUP_GAP * (self.groups() - 1)
        self.setMinimumWidth(int(LABEL + heads * (MIN_SIDE + GAP) + gaps))
        self.setMinimumHeight(int(self.top() + attentions.shape[0] * (self.row_height() + GAP)))
        self.update()

    def groups(self) -> int:
        """How many key/value heads the query heads share."""
        return len(set(self.kv_heads)) or 1

    def grouped(self) -> bool:
        """True when some query heads share a key/value head (GQA): the bands are drawn."""
        return self.groups() < len(self.kv_heads)

    def top(self) -> float:
        """Pixels above the first row: the head labels, and the KV bands when grouped."""
        return LABEL + (BAND if self.grouped() else 0)

    def select(self, layer: int, head: int) -> None:
        """Outline one head (the one open in the pipeline)."""
        self.selected = (layer, head)
        self.update()

    def cell_size(self) -> float:
        """Side of one square in pixels: the heads fill the width (MIN_SIDE to MAX_SIDE); the
        layers take the height they need (resizeEvent asks for it: the scroll area scrolls)."""
        if not self.images:
            return 0.0
        heads = len(self.images[0])
        width = (self.width() - LABEL - GROUP_GAP * (self.groups() - 1)) / heads - GAP
        return min(max(width, MIN_SIDE), MAX_SIDE)

    def row_height(self) -> float:
        """Height of one layer's cells: a square, or a strip for the newest row alone."""
        side = self.cell_size()
        # a strip (the newest row alone) is at least a label's line high, in whatever font
        strip = QFontMetrics(label_font()).height()
        return max(strip, side / 3) if self.newest_only else side

    def resizeEvent(self, event) -> None:
        if self.images:
            needed = int(self.top() + len(self.images) * (self.row_height() + GAP))
            if self.minimumHeight() != needed:
                self.setMinimumHeight(needed)
        super().resizeEvent(event)

    def column_x(self, head: int) -> float:
        """Left edge of head `head`'s column (a gap between KV groups)."""
        side = self.cell_size()
        column = self.columns.index(head)
        group = sorted(set(self.kv_heads)).index(self.kv_heads[head])
        return LABEL + column * (side + GAP) + group * GROUP_GAP

    def cell_rect(self, layer: int, head: int) -> QRectF:
        """Where one head is drawn."""
        side, height = self.cell_size(), self.row_height()
        return QRectF(self.column_x(head), self.top() + layer * (height + GAP), side, height)

    def band_rect(self, kv: int) -> QRectF:
        """The band over the query heads that read key/value head `kv`."""
        heads = [h for h in self.columns if self.kv_heads[h] == kv]
        left, right = self.column_x(heads[0]), self.column_x(heads[-1]) + self.cell_size()
        return QRectF(left, 2, right - left, BAND - 4)

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
            kv = f", reads KV head {self.kv_heads[head]}" if self.grouped() else ""
            layer, head = layer + self.count_from, head + self.count_from
            self.setToolTip(f"layer {layer}, head {head}{kv}: click to open it in the pipeline")

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("white"))
        if not self.images:
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.empty_text)
            return
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)  # sharp cells
        painter.setFont(label_font())
        side = self.cell_size()
        for layer, row in enumerate(self.images):
            rect = self.cell_rect(layer, 0)
            painter.drawText(
                QRectF(0, rect.top(), LABEL - 4, rect.height()),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                f"L{layer + self.count_from}",
            )
            for head, image in enumerate(row):
                painter.drawImage(self.cell_rect(layer, head), image)
        colours = kv_colours(self.groups())
        kv_order = sorted(set(self.kv_heads))
        for head in self.columns:
            rect = self.cell_rect(0, head)
            if self.grouped():
                painter.setPen(colours[kv_order.index(self.kv_heads[head])])
            painter.drawText(
                QRectF(rect.left() - GAP, self.top() - LABEL, side + 2 * GAP, LABEL - 4),
                Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom,
                f"H{head + self.count_from}",
            )
        if self.grouped():
            for n, kv in enumerate(kv_order):
                band = self.band_rect(kv)
                painter.fillRect(band, colours[n])
                painter.setPen(QColor("white"))
                painter.drawText(band, Qt.AlignmentFlag.AlignCenter, f"KV {kv}")
        if self.selected is not None:
            painter.setPen(QPen(QColor(220, 30, 30), 3))
            painter.drawRect(self.cell_rect(*self.selected).adjusted(-2, -2, 2, 2))
        painter.end()


def kv_colours(count: int) -> list[QColor]:
    """One dark colour per key/value head (white text reads on each)."""
    return [pg.intColor(n, hues=max(count, 1), values=1, maxValue=170) for n in range(count)]

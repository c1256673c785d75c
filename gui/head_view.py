"""Head view: lines from each token (left) to the tokens it attends to (right), width = weight."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QPointF, QRectF, Qt
from PyQt6.QtGui import QColor, QFont, QPainter, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

MAX_WIDTH = 6.0  # pixels for a weight of 1
SHOWN = 0.02  # lines for weights below this are left out (they would only add grey)


def head_colours(count: int) -> list[QColor]:
    """One distinct colour per head."""
    return [pg.intColor(h, hues=max(count, 1), values=1, maxValue=200) for h in range(count)]


class HeadView(QWidget):
    """One layer's heads as lines between two columns of tokens; hover a token to isolate it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tokens: list[str] = []
        self.weights: np.ndarray | None = None  # (heads, T, T) of one layer
        self.heads: list[int] = []
        self.focus: int | None = None  # the hovered query token
        self.pinned: int | None = None  # the token focused when no token is hovered
        self.setMinimumSize(260, 200)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)

    def set_layer(
        self, tokens: list[str], weights: np.ndarray, heads: list[int], focus: int | None = None
    ) -> None:
        """Show heads `heads` of one layer's (heads, T, T) weights; focus: only that query
        token's lines (a decoder's newest token), until the mouse moves over a token."""
        self.tokens, self.weights, self.heads = list(tokens), weights, list(heads)
        self.focus = self.pinned = focus
        self.update()

    def row_y(self, i: int) -> float:
        """Vertical centre of token i's label."""
        step = (self.height() - 20) / max(len(self.tokens), 1)
        return 10 + step * (i + 0.5)

    def columns(self) -> tuple[float, float]:
        """x of the left and right ends of the lines."""
        return self.width() * 0.3, self.width() * 0.7

    def mouseMoveEvent(self, event) -> None:
        if not self.tokens:
            return
        left, _ = self.columns()
        pos = event.position()
        i = None
        if pos.x() < left:
            step = (self.height() - 20) / len(self.tokens)
            i = int((pos.y() - 10) // step)
            i = i if 0 <= i < len(self.tokens) else None
        i = self.pinned if i is None else i
        if i != self.focus:
            self.focus = i
            self.update()

    def leaveEvent(self, event) -> None:
        self.focus = self.pinned
        self.update()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("white"))
        if self.weights is None:
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Run a text to see lines")
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        left, right = self.columns()
        T = len(self.tokens)
        font = QFont()
        font.setPointSize(9 if T <= 40 else 7)
        painter.setFont(font)
        colours = head_colours(self.weights.shape[0])
        for h in self.heads:
            colour = QColor(colours[h])
            for i in range(T):
                if self.focus is not None and i != self.focus:
                    continue
                for j in range(T):
                    w = float(self.weights[h, i, j])
                    if w < SHOWN:
                        continue
                    colour.setAlphaF(min(1.0, 0.25 + 0.75 * w))
                    painter.setPen(QPen(colour, max(0.5, MAX_WIDTH * w)))
                    painter.drawLine(QPointF(left, self.row_y(i)), QPointF(right, self.row_y(j)))
        painter.setPen(QColor("black"))
        every = max(1, T // 60)  # thin the labels when there are many tokens
        for i in range(0, T, every):
            y = self.row_y(i)
            bold = self.focus == i
            font.setBold(bold)
            painter.setFont(font)
            painter.drawText(
                QRectF(0, y - 9, left - 6, 18),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                self.tokens[i],
            )
            painter.drawText(
                QRectF(right + 6, y - 9, self.width() - right - 6, 18),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                self.tokens[i],
            )
        painter.end()

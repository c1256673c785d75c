"""The head view's drawing: every token labelled in both columns, one line per head and weight."""

from __future__ import annotations

import numpy as np
from PyQt6.QtCore import QLineF, QRectF, Qt
from PyQt6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

from gui.present import head_lines
from gui.present.head_lines import HeadLines
from gui.widgets import controls
from gui.widgets.head_legend import head_colours

MAX_WIDTH = 6.0  # pixels for a weight of 1
WIDE = 1.5  # pixels: thinner lines are drawn 1 pixel wide (wide pens cost 10x to stroke)
LEVELS = 20  # weights are drawn in this many steps of width and opacity (one pen each)
LABEL_SHARE = 0.34  # a column of labels takes at most this share of the width (longer: elided)
PAD = 6  # pixels between a label and its line ends
POINT_SIZE = 8


def label_font(bold: bool = False) -> QFont:
    """The token labels' type (bold: the token in focus)."""
    return controls.font(POINT_SIZE, bold=bold)


class HeadCanvas(QWidget):
    """Two columns of tokens (queries left, keys right) and the lines between them; as tall as
    its tokens need (it scrolls): each token has a row of at least ROW_MIN pixels."""

    def __init__(self, state: HeadLines, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.available = 200.0  # the height in view (the scroll area's), shared by the rows
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)
        self.refit()

    def step(self) -> float:
        """Pixels per token row."""
        return head_lines.row_step(len(self.state.tokens), self.available)

    def refit(self, available: float | None = None) -> None:
        """Take the height the rows need (available: the height in view, when it changed)."""
        if available is not None:
            self.available = available
        tokens = len(self.state.tokens)
        self.setFixedHeight(int(np.ceil(head_lines.height(tokens, self.step()))) if tokens else 0)
        self.update()

    def label_width(self) -> float:
        """Pixels of one column of labels: the widest token's, at most LABEL_SHARE of the width."""
        metrics = QFontMetrics(label_font(bold=True))
        widest = max((metrics.horizontalAdvance(t) for t in self.state.tokens), default=0)
        return min(widest + PAD, self.width() * LABEL_SHARE)

    def columns(self) -> tuple[float, float]:
        """x of the left and right ends of the lines."""
        labels = self.label_width()
        return labels + PAD, self.width() - labels - PAD

    def token_y(self, i: int) -> float:
        """Vertical centre of token i's label (the same on both sides)."""
        return head_lines.row_y(i, self.step())

    def side_at(self, x: float) -> str | None:
        """'query' over the left labels, 'key' over the right ones, None between them."""
        left, right = self.columns()
        return "query" if x < left else "key" if x > right else None

    def mouseMoveEvent(self, event) -> None:
        pos = event.position()
        side = self.side_at(pos.x())
        token = head_lines.token_at(pos.y(), len(self.state.tokens), self.step())
        if self.state.set_hover(side or "query", token if side else None):
            self.update()

    def leaveEvent(self, event) -> None:
        if self.state.set_hover("query", None):
            self.update()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("white"))
        state = self.state
        if state.weights is None:
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Run a text to see lines")
            return
        self._draw_lines(painter, event.rect())
        self._draw_labels(painter, event.rect())
        painter.end()

    def _draw_lines(self, painter: QPainter, exposed) -> None:
        left, right = self.columns()
        step = self.step()
        lines = self.state.lines()
        y0 = head_lines.MARGIN + step * (lines.query + 0.5)  # (n,) left ends
        y1 = head_lines.MARGIN + step * (lines.key + 0.5)  # (n,) right ends
        # only the lines that cross the exposed strip (a long text is mostly out of view)
        seen = (np.minimum(y0, y1) <= exposed.bottom() + 1) & (
            np.maximum(y0, y1) >= exposed.top() - 1
        )
        colours = head_colours(self.state.count)
        shifts = {h: self.state.offset(h, step) for h in self.state.on}
        seen = np.nonzero(seen)[0]
        # one pen per head and weight level: drawn level by level, weakest first, so the
        # strongest lines end on top (lines() sorted them; a level keeps that order)
        levels = np.minimum((lines.weight[seen] * LEVELS).astype(int), LEVELS - 1)
        for level in np.unique(levels):
            chosen = seen[levels == level]
            w = (int(level) + 0.5) / LEVELS
            # smooth edges on the wide lines only: the many thin ones stay on the fast path
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, MAX_WIDTH * w >= WIDE)
            for h in np.unique(lines.head[chosen]):
                colour = QColor(colours[h])
                colour.setAlphaF(min(1.0, 0.25 + 0.75 * w))
                width = MAX_WIDTH * w
                painter.setPen(QPen(colour, width if width >= WIDE else 0))  # 0: a 1-px line
                d = shifts[int(h)]
                batch = chosen[lines.head[chosen] == h]
                painter.drawLines(
                    [QLineF(left, y0[n] + d, right, y1[n] + d) for n in batch.tolist()]
                )

    def _draw_labels(self, painter: QPainter, exposed) -> None:
        left, right = self.columns()
        step = self.step()
        focus = self.state.focus()
        half = step / 2
        first = max(0, int((exposed.top() - head_lines.MARGIN) // step))
        last = min(len(self.state.tokens), int((exposed.bottom() - head_lines.MARGIN) // step) + 1)
        for side, box_x, align in (
            ("query", 0.0, Qt.AlignmentFlag.AlignRight),
            ("key", right + PAD, Qt.AlignmentFlag.AlignLeft),
        ):
            width = left - PAD if side == "query" else self.width() - right - PAD
            for i in range(first, last):
                bold = focus == (side, i)
                font = label_font(bold)
                painter.setFont(font)
                painter.setPen(QColor("black") if focus is None or bold else QColor(90, 90, 90))
                text = QFontMetrics(font).elidedText(
                    self.state.tokens[i], Qt.TextElideMode.ElideRight, int(width)
                )
                y = self.token_y(i)
                painter.drawText(
                    QRectF(box_x, y - half, width, step),
                    align | Qt.AlignmentFlag.AlignVCenter,
                    text,
                )

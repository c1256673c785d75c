"""The head view's legend: one coloured entry per head; click toggles it, double click solos."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PyQt6.QtCore import QRectF, Qt, pyqtSignal
from PyQt6.QtGui import QColor, QPainter, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

from gui.present.head_lines import HeadLines
from gui.widgets import controls

ENTRY_W = 46  # pixels per entry: a colour square and 'H11'
ENTRY_H = 20
SWATCH = 12
ALL = -1  # the first entry: every head on


def head_colours(count: int) -> list[QColor]:
    """One distinct colour per head."""
    return [pg.intColor(h, hues=max(count, 1), values=1, maxValue=200) for h in range(count)]


class HeadLegend(QWidget):
    """Entries 'all', H0, H1, ... wrapped into rows; emits changed() after a click."""

    changed = pyqtSignal()

    def __init__(self, state: HeadLines, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip("Click a head to show or hide its lines; double-click to show it alone")
        self.setMouseTracking(True)
        self.refit()

    def per_row(self) -> int:
        """Entries in one row at the current width."""
        return max(1, self.width() // ENTRY_W)

    def entry_rect(self, head: int) -> QRectF:
        """Where head `head`'s entry (ALL: the 'all' entry) is drawn."""
        n = head + 1  # 'all' comes first
        row, col = divmod(n, self.per_row())
        return QRectF(col * ENTRY_W, row * ENTRY_H, ENTRY_W - 2, ENTRY_H - 2)

    def entry_at(self, x: float, y: float) -> int | None:
        """The head (or ALL) whose entry holds the point, if any."""
        for head in range(ALL, self.state.count):
            if self.entry_rect(head).contains(x, y):
                return head
        return None

    def refit(self) -> None:
        """Take the height the rows need at the current width."""
        rows = math.ceil((self.state.count + 1) / self.per_row())
        self.setFixedHeight(max(1, rows) * ENTRY_H)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.refit()

    def mousePressEvent(self, event) -> None:
        head = self.entry_at(event.position().x(), event.position().y())
        if head is None or event.button() != Qt.MouseButton.LeftButton:
            return
        self.state.all_on() if head == ALL else self.state.toggle(head)
        self.update()
        self.changed.emit()

    def mouseDoubleClickEvent(self, event) -> None:
        head = self.entry_at(event.position().x(), event.position().y())
        if head is None or head == ALL:
            return
        self.state.solo(head)
        self.update()
        self.changed.emit()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setFont(controls.font(8))
        colours = head_colours(self.state.count)
        for head in range(ALL, self.state.count):
            rect = self.entry_rect(head)
            on = head == ALL or head in self.state.on
            swatch = QRectF(rect.left() + 2, rect.center().y() - SWATCH / 2, SWATCH, SWATCH)
            if head != ALL:
                # a filled square: on; an outline: off (its colour still says which head)
                painter.setPen(QPen(colours[head], 2))
                painter.setBrush(colours[head] if on else QColor("white"))
                painter.drawRect(swatch)
            painter.setPen(QColor("black") if on else QColor(150, 150, 150))
            text = rect.adjusted(SWATCH + 5 if head != ALL else 2, 0, 0, 0)
            label = "all" if head == ALL else f"H{head}"
            painter.drawText(
                text, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, label
            )
        painter.end()

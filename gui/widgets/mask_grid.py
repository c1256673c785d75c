"""Mask grid: one square per (query, key); click a square to toggle 'may attend'."""

from __future__ import annotations

from PyQt6.QtCore import QPointF, QRectF, QSize, Qt, pyqtSignal
from PyQt6.QtGui import QColor, QPainter, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

ALLOWED, MASKED = QColor(70, 130, 180), QColor(235, 235, 235)


class MaskGrid(QWidget):
    """Shows an (L, S) bool grid (True = may attend); emits toggled(i, j) on a click."""

    toggled = pyqtSignal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.grid: list[list[bool]] = [[True]]
        self.editable = False
        self.setMinimumSize(120, 120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.setToolTip(
            "mask: blue = may attend, grey = masked; click a cell to toggle (a drawn mask)"
        )

    def sizeHint(self) -> QSize:
        return QSize(180, 180)

    def set_grid(self, grid, editable: bool) -> None:
        """Show a new grid; clicks toggle only when editable (custom mask)."""
        self.grid = [list(r) for r in grid] or [[True]]
        self.editable = editable
        self.update()

    def _cell_size(self) -> float:
        rows, cols = len(self.grid), len(self.grid[0])
        return max(1.0, min(self.width() / cols, self.height() / rows))

    def cell_center(self, i: int, j: int) -> QPointF:
        """Widget coordinates of the centre of cell (i, j) (used by tests and hit tests)."""
        size = self._cell_size()
        return QPointF((j + 0.5) * size, (i + 0.5) * size)

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        size = self._cell_size()
        grid_pen = QPen(QColor(255, 255, 255)) if size >= 6 else Qt.PenStyle.NoPen
        painter.setPen(grid_pen)
        for i, row in enumerate(self.grid):
            for j, ok in enumerate(row):
                painter.setBrush(ALLOWED if ok else MASKED)
                painter.drawRect(QRectF(j * size, i * size, size, size))
        painter.end()

    def mousePressEvent(self, event) -> None:
        if not self.editable:
            return
        size = self._cell_size()
        pos = event.position()
        i, j = int(pos.y() // size), int(pos.x() // size)
        if 0 <= i < len(self.grid) and 0 <= j < len(self.grid[0]):
            self.toggled.emit(i, j)

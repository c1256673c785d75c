"""Overview: every step of the trace at once as small multiples; click one to open it."""

from __future__ import annotations

import math

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QGridLayout, QWidget

from gui import view_model
from gui.heatmap import Heatmap


class Overview(QWidget):
    """A grid of small heatmaps, one per step; emits stepChosen(name) on a click."""

    stepChosen = pyqtSignal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.grid = QGridLayout(self)
        self.pool: list[Heatmap] = []
        self.heatmaps: dict[str, Heatmap] = {}
        self.trace = None
        self.head = "0"
        self._dirty = False

    def set_trace(self, trace: object, head: str | None = None) -> None:
        """Show every step of `trace`; drawn now if visible, else when next shown."""
        self.trace = trace
        if head is not None:
            self.head = head
        self._dirty = True
        if self.isVisible():
            self.render_all()

    def set_head(self, head: str) -> None:
        """Re-render with another head choice (head steps at that head, or their average)."""
        self.set_trace(self.trace, head) if self.trace is not None else None

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._dirty:
            self.render_all()

    def render_all(self) -> None:
        """Draw one small heatmap per step."""
        self._dirty = False
        trace = self.trace
        names = trace.names()
        while len(self.pool) < len(names):
            hm = Heatmap(compact=True)
            hm.setMinimumSize(140, 120)
            hm.clicked.connect(lambda h=hm: self.stepChosen.emit(h.panel.step))
            self.pool.append(hm)
        cols = max(1, math.ceil(math.sqrt(len(names) * 1.5)))
        head = self.head if self.head.isdigit() else view_model.HEAD_AVERAGE
        self.heatmaps = {}
        for n, hm in enumerate(self.pool):
            self.grid.removeWidget(hm)
            if n >= len(names):
                hm.setVisible(False)
                continue
            name = names[n]
            hm.show_panel(view_model.panels(trace, name, head)[0])
            hm.setToolTip(f"{trace[name].formula}\nclick to open this step")
            self.grid.addWidget(hm, n // cols, n % cols)  # reparent first, then show
            hm.setVisible(True)
            self.heatmaps[name] = hm

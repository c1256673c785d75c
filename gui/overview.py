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
        self.heatmaps: dict[str, Heatmap] = {}
        self.trace = None
        self.head = "0"

    def set_trace(self, trace: object, head: str | None = None) -> None:
        """Show every step of `trace` (head steps at the chosen head, or their average)."""
        self.trace = trace
        if head is not None:
            self.head = head
        for hm in self.heatmaps.values():
            self.grid.removeWidget(hm)
            hm.deleteLater()
        self.heatmaps = {}
        names = trace.names()
        cols = max(1, math.ceil(math.sqrt(len(names) * 1.5)))
        head = self.head if self.head.isdigit() else view_model.HEAD_AVERAGE
        for n, name in enumerate(names):
            hm = Heatmap(compact=True)
            hm.setMinimumSize(140, 120)
            hm.show_panel(view_model.panels(trace, name, head)[0])
            hm.setToolTip(f"{trace[name].formula}\nclick to open this step")
            hm.clicked.connect(lambda name=name: self.stepChosen.emit(name))
            self.grid.addWidget(hm, n // cols, n % cols)
            self.heatmaps[name] = hm

    def set_head(self, head: str) -> None:
        """Re-render with another head choice."""
        self.head = head
        if self.trace is not None:
            self.set_trace(self.trace)

"""Overview: the flow x -> q, k, v -> scores -> ... -> output, each step a small heatmap."""

from __future__ import annotations

import dataclasses
import math

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from gui.present import view_model
from gui.widgets import controls
from gui.widgets.heatmap import Heatmap

STAGES_PER_ROW = 4  # a long flow wraps onto more rows, each entered by a turning arrow


def _arrow(text: str, first_in_row: bool) -> QLabel:
    """An arrow with the operation it stands for written on it."""
    label = QLabel(f"{'↳' if first_in_row else '→'}\n{text}")
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    label.setFont(controls.font(9))
    label.setStyleSheet("color: #114477;")
    return label


class Overview(QWidget):
    """Every step as a small heatmap in flow order with arrows; emits stepChosen on a click."""

    stepChosen = pyqtSignal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.grid = QGridLayout(self)
        self.grid.setHorizontalSpacing(4)
        self.pool: list[Heatmap] = []
        self.heatmaps: dict[str, Heatmap] = {}
        self.arrows: list[QLabel] = []
        self.columns: list[QWidget] = []
        self.stages: list[view_model.Stage] = []
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

    def _tile(self, n: int) -> Heatmap:
        while len(self.pool) <= n:
            hm = Heatmap(compact=True)
            hm.setMinimumSize(80, 80)
            hm.clicked.connect(lambda h=hm: self.stepChosen.emit(h.panel.step))
            self.pool.append(hm)
        return self.pool[n]

    def _clear(self) -> None:
        """Take the tiles out of the old columns (kept, hidden, as children of the overview)."""
        for hm in self.pool:
            hm.hide()
            hm.setParent(self)  # never a parentless (top-level) widget
        for w in self.arrows + self.columns:
            self.grid.removeWidget(w)
            w.hide()
            w.deleteLater()  # still a child of the overview until Qt deletes it
        self.arrows, self.columns = [], []

    def render_all(self) -> None:
        """Lay the stages out left to right (wrapping) with an arrow before each."""
        self._dirty = False
        trace = self.trace
        self._clear()
        self.stages = view_model.flow_stages(trace.names())
        head = self.head if self.head.isdigit() else view_model.HEAD_AVERAGE
        self.heatmaps = {}
        per_row = min(STAGES_PER_ROW, max(1, math.ceil(len(self.stages) / 2)))
        tallest: dict[int, int] = {}  # a row's height follows its tallest stage
        for s, stage in enumerate(self.stages):
            tallest[s // per_row] = max(tallest.get(s // per_row, 1), len(stage.names))
        n = 0
        for s, stage in enumerate(self.stages):
            row, col = divmod(s, per_row)
            column = QWidget(self)
            box = QVBoxLayout(column)
            box.setContentsMargins(0, 0, 0, 0)
            # a stage of fewer tiles than its row's tallest keeps one tile's height, centred: x
            # over the height of w_q, w_k and w_v drew its 6 x 8 cells in 13% of its axes
            spare = tallest[row] - len(stage.names)
            if spare:
                box.addStretch(spare)
            for name in stage.names:
                hm = self._tile(n)
                n += 1
                step = trace[name]
                panel = view_model.panels(trace, name, head, "auto")[0]  # as the pipeline opens
                size = view_model.shape_text(step.shape, step.axes)
                title = f"{name}<br><span style='font-size:7pt'>{size}</span>"
                hm.show_panel(dataclasses.replace(panel, title=title))
                hm.setToolTip(f"{step.formula}\nshape {size}\nclick to open this step")
                box.addWidget(hm, 2)
                hm.setVisible(True)
                self.heatmaps[name] = hm
            if stage.arrow:
                arrow = _arrow(stage.arrow, first_in_row=col == 0)
                arrow.setParent(self)
                self.grid.addWidget(arrow, row, 2 * col)
                self.arrows.append(arrow)
            if spare:
                box.addStretch(spare)
            self.grid.addWidget(column, row, 2 * col + 1)
            self.grid.setColumnStretch(2 * col + 1, 1)
            self.grid.setRowStretch(row, tallest[row])
            self.columns.append(column)

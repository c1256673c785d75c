"""Loss curve of a training run: every position and the scored part, the phase change in red."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PyQt6.QtGui import QColor

from gui.widgets import controls

TOTAL, SCORED, PHASE, NOW = "#888888", "#1f4e9c", "#b2182b", "#e08000"


class LossPlot(pg.PlotWidget):
    """Two loss curves over the steps, a red line at the phase change and an orange one at
    the step the scrubber shows."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        controls.still_plot(self)
        self.setMinimumSize(200, 150)
        item = self.getPlotItem()
        item.setTitle("loss (smoothed)", size="9pt")
        item.setLabel("bottom", "step")
        item.showGrid(x=True, y=True, alpha=0.2)
        self.legend = item.addLegend(offset=(4, -4), labelTextSize="8pt")  # bottom left: the
        # curves start high and reach the bottom only at the end
        self.total = item.plot(pen=pg.mkPen(TOTAL, width=1.5), name="every position")
        self.scored = item.plot(pen=pg.mkPen(SCORED, width=2), name="scored part")
        self.phase = pg.InfiniteLine(angle=90, pen=pg.mkPen(PHASE, width=2))
        self.now = pg.InfiniteLine(angle=90, pen=pg.mkPen(QColor(NOW), width=1.5))
        for line in (self.phase, self.now):
            line.setVisible(False)
            item.addItem(line)

    def set_curves(
        self, steps: np.ndarray, total: np.ndarray, scored: np.ndarray, part: str, steps_in_all: int
    ) -> None:
        """Draw the curves over 0..steps_in_all (the run's whole length, so the axis stays)."""
        self.total.setData(steps, total)
        self.scored.setData(steps, scored)
        self.legend.getLabel(self.scored).setText(f"on the {part}")
        top = float(max(total.max(initial=0.0), scored.max(initial=0.0))) or 1.0
        self.getPlotItem().setRange(xRange=(0, max(steps_in_all, 1)), yRange=(0, top * 1.05))

    def set_phase(self, step: int | None) -> None:
        """The phase change's step (None: none found yet)."""
        self.phase.setVisible(step is not None)
        if step is not None:
            self.phase.setValue(step)

    def set_now(self, step: int | None) -> None:
        """The scrubbed step (None: hidden)."""
        self.now.setVisible(step is not None)
        if step is not None:
            self.now.setValue(step)

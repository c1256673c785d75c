"""Each head's scores over the training steps: one small plot per score, one line per head."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from gui.widgets import controls

# layer 1's heads in blues, layer 2's in reds, deeper layers in other hues: which layer a
# line belongs to reads at a glance (layer 1's previous-token head rises first)
LAYER_HUES = (0.6, 0.0, 0.33, 0.8, 0.12)


def head_colour(layer: int, head: int, heads: int) -> pg.QtGui.QColor:
    """One colour per head: its layer's hue, lighter for later heads."""
    hue = LAYER_HUES[layer % len(LAYER_HUES)]
    value = 0.55 + 0.4 * head / max(heads - 1, 1)
    return pg.hsvColor(hue, sat=0.85, val=value)


class ScorePlots(pg.GraphicsLayoutWidget):
    """Plots side by side, one per score name; set_lines draws (layers, heads, snapshots)."""

    def __init__(self, titles: dict[str, str], parent=None) -> None:
        super().__init__(parent)
        self.setMinimumSize(200, 130)
        self.plots: dict[str, pg.PlotItem] = {}
        self.lines: dict[str, list[list[pg.PlotDataItem]]] = {}
        self.now: dict[str, pg.InfiniteLine] = {}
        small = controls.font(7)
        for column, (name, title) in enumerate(titles.items()):
            plot = self.addPlot(row=0, col=column)
            controls.still_plot(plot)
            plot.setTitle(title, size="8pt")
            plot.setYRange(0, 1, padding=0.02)
            for side in ("left", "bottom"):
                plot.getAxis(side).setStyle(tickFont=small)
            line = pg.InfiniteLine(angle=90, pen=pg.mkPen("#e08000", width=1))
            line.setVisible(False)
            plot.addItem(line)
            self.plots[name], self.now[name], self.lines[name] = plot, line, []

    def set_lines(self, steps: np.ndarray, lines: dict[str, np.ndarray], steps_in_all: int) -> None:
        """Each score's (layers, heads, snapshots) values over the snapshots' steps."""
        for name, plot in self.plots.items():
            values = lines[name]
            layers, heads = values.shape[:2]
            drawn = self.lines[name]
            if len(drawn) != layers or (drawn and len(drawn[0]) != heads):
                for row in drawn:
                    for item in row:
                        plot.removeItem(item)
                drawn[:] = [
                    [
                        plot.plot(pen=pg.mkPen(head_colour(n, h, heads), width=1.5))
                        for h in range(heads)
                    ]
                    for n in range(layers)
                ]
            for n in range(layers):
                for h in range(heads):
                    shown = np.isfinite(values[n, h])
                    drawn[n][h].setData(steps[shown], values[n, h][shown])
            plot.setXRange(0, max(steps_in_all, 1), padding=0.02)

    def set_now(self, step: int | None) -> None:
        """The scrubbed step, on every plot (None: hidden)."""
        for line in self.now.values():
            line.setVisible(step is not None)
            if step is not None:
                line.setValue(step)

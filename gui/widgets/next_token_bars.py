"""Next-token bars: a decoder's likeliest next tokens as horizontal bars, likeliest on top."""

from __future__ import annotations

import pyqtgraph as pg

from gui.state.token_text import readable
from gui.widgets import controls

BAR = (70, 110, 180)


class NextTokenBars(pg.PlotWidget):
    """The probabilities of the k likeliest next tokens (the softmax of the last logits row)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.tokens: list[str] = []
        self.probabilities: list[float] = []
        self.bars: pg.BarGraphItem | None = None
        self.labels: list[pg.TextItem] = []
        item = self.getPlotItem()
        item.invertY(True)  # the likeliest token on top
        controls.still_plot(item)
        item.setLabel("bottom", "probability of the next token")
        item.getAxis("bottom").enableAutoSIPrefix(False)  # 0.04, not 40 (x0.001)
        item.getAxis("left").setWidth(96)
        item.getAxis("left").setStyle(tickFont=controls.font(9))
        item.setTitle("Next token: run the text")
        self.setBackground("w")
        self.setMinimumHeight(150)

    def set_tokens(self, top: list[tuple[str, float]], title: str) -> None:
        """Show (token, probability) pairs, likeliest first, under `title`."""
        item = self.getPlotItem()
        for old in [self.bars, *self.labels]:
            if old is not None:
                item.removeItem(old)
        self.tokens = [t for t, _ in top]
        self.probabilities = [float(p) for _, p in top]
        k = len(top)
        self.bars = pg.BarGraphItem(
            x0=0.0, y=list(range(k)), height=0.7, width=self.probabilities, brush=pg.mkBrush(BAR)
        )
        item.addItem(self.bars)
        self.labels = []
        for i, p in enumerate(self.probabilities):
            label = pg.TextItem(f"{p:.3f}", color=(40, 40, 40), anchor=(0, 0.5))
            label.setPos(p, i)
            item.addItem(label)
            self.labels.append(label)
        item.getAxis("left").setTicks([[(i, readable(t)) for i, t in enumerate(self.tokens)]])
        top_p = max(self.probabilities, default=1.0)
        item.setXRange(0.0, top_p * 1.25, padding=0)  # room for the numbers right of the bars
        item.setYRange(-0.5, k - 0.5, padding=0)
        item.setTitle(title)

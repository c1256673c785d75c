"""FlashAttention's tiles, block by block: the online softmax of the example on screen.

scratch.learn.online_softmax walks the keys in tiles (in a worker); this view steps through its
record: the tile on the scores, the partial output, its distance to the exact output per
tile, and one row's running max, rescale, denominator and log-sum-exp.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QRectF, Qt
from PyQt6.QtGui import QBrush, QColor
from PyQt6.QtWidgets import QGraphicsRectItem, QGridLayout, QPushButton, QSlider, QWidget

from gui.present.learn_model import (
    HeadInputs,
    matrix_panel,
    number,
    shared_levels,
    table,
    tile_rows,
)
from gui.views.learn_page import LearnPage
from gui.widgets import controls
from gui.widgets.heatmap import Heatmap
from gui.widgets.spin_boxes import SpinBox
from scratch.learn.online_softmax import online_softmax

DTYPES = {"float64": "float64 (exact)", "float16": "float16 tiles", "bfloat16": "bfloat16 tiles"}
FLOOR = 1e-17  # differences of 0 drawn here on the log axis
TABLE_TILES = 10  # the running-values table shows the latest this many tiles


def default_block(S: int) -> int:
    """A block that gives a few tiles: 2 for 6 keys, 8 for 64, 64 for 512."""
    return max(2, S // 8)


class TilesView(LearnPage):
    """Block size, dtype, row and tile pickers; the scores with the tile, the partial output."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.walk = None  # scratch's OnlineSoftmax on screen
        # step 1: the pickers, in two short rows (they fit 1024 pixels)
        self.block = self.spin("keys per tile (FlashAttention uses 64 or 128)")
        self.row = SpinBox()
        self.dtype = controls.combo(
            DTYPES, "emulate a 16-bit kernel: q, k, v and p stored in 16 bits"
        )
        self.back, self.forward = QPushButton("<"), QPushButton(">")
        self.step = QSlider(Qt.Orientation.Horizontal)
        self.where = controls.label()  # word-wrapped: a long tile sentence takes two lines
        first = ("block", self.block, "tiles in", self.dtype, "row", self.row, (self.status, 1))
        self.outer.addLayout(controls.row(*first))
        second = (self.back, (self.step, 1), self.forward, (self.where, 1))
        self.outer.addLayout(controls.row(*second))
        # step 2: scores with the tile, partial output; the difference per tile, the row's values
        grid = QGridLayout()
        self.scores, self.partial = Heatmap(), Heatmap()
        self.differences = pg.PlotWidget()
        self.differences.setLogMode(y=True)
        self.differences.setMenuEnabled(False)
        self.differences.hideButtons()
        self.differences.setLabel("bottom", "tile")
        self.differences.setLabel("left", "max |partial - exact|")
        self.differences.getAxis("left").enableAutoSIPrefix(False)
        self.differences.addLegend(offset=(8, -8))  # bottom left: the curves start high
        self.values = controls.label(rich=True, top_left=True)
        grid.addWidget(self.scores, 0, 0)
        grid.addWidget(self.partial, 0, 1)
        grid.addWidget(self.differences, 1, 0)
        grid.addWidget(self.values, 1, 1)
        grid.setRowStretch(0, 3)
        grid.setRowStretch(1, 2)
        self.outer.addLayout(grid, 1)
        self.tile_mark = QGraphicsRectItem()
        self.tile_mark.setPen(pg.mkPen((255, 140, 0), width=3, cosmetic=True))
        self.tile_mark.setBrush(QBrush(QColor(255, 165, 0, 60)))
        self.tile_mark.setZValue(10)
        self.scores.plot.addItem(self.tile_mark)
        self.now_line = pg.InfiniteLine(angle=90, pen=pg.mkPen((255, 140, 0), width=2))
        self.dtype.currentIndexChanged.connect(lambda _: self.refresh())
        self.row.valueChanged.connect(lambda _: self.show_step())
        self.step.valueChanged.connect(lambda _: self.show_step())
        self.back.clicked.connect(lambda: self.step.setValue(self.step.value() - 1))
        self.forward.clicked.connect(lambda: self.step.setValue(self.step.value() + 1))
        self.worker.finished.connect(self._on_walked)

    def fit_pickers(self, inputs: HeadInputs) -> None:
        """The block and row pickers fit the example's sizes: at first (or for another number
        of keys) a few tiles and the last row, which a causal mask lets see every tile."""
        S, L = inputs.k.shape[0], len(tile_rows(inputs.q.shape[0]))
        fresh = self.inputs is None or self.inputs.k.shape[0] != S
        controls.set_quietly(self.block, 1, max(S, 1), min(default_block(S), S) if fresh else None)
        controls.set_quietly(self.row, 0, max(L - 1, 0), L - 1 if fresh else None)

    def request(self) -> tuple:
        """The example, the block and the dtype on screen."""
        return self.inputs, self.block.value(), self.dtype.currentData()

    def work(self, x: HeadInputs, block: int, dtype: str):
        """Walk the tiles (in the worker)."""
        rows = tile_rows(x.q.shape[0])
        q, k, v = x.q[rows].tolist(), x.k.tolist(), x.v.tolist()
        allowed = None if x.allowed is None else x.allowed[rows].tolist()
        more = f" ({len(rows)} of {x.q.shape[0]} query rows)" if len(rows) < x.q.shape[0] else ""
        self.status.setText(f"walking the keys in tiles of {block}{more}...")
        return lambda report, stop: online_softmax(
            q, k, v, scale=x.scale, allowed=allowed, block=block, dtype=dtype
        )

    def _on_walked(self, walk: object) -> None:
        self.walk = walk
        x = self.inputs
        self.rows = tile_rows(x.q.shape[0])  # the query rows walked
        rows = len(self.rows)
        more = (
            f"; {rows} of {x.q.shape[0]} query rows, evenly spread" if rows < x.q.shape[0] else ""
        )
        last = walk.steps[-1]
        within = (
            f"float64 bound {number(walk.bound)}"
            if walk.dtype == "float64"
            else f"{walk.dtype} rounding {number(last.rounding)}"
        )
        self.status.setText(
            f"{len(walk.steps)} tiles of {walk.block} keys{more}; last tile vs exact "
            f"{number(last.difference)} ({within})"
        )
        scores = np.array([sum((st.scores[i] for st in walk.steps), []) for i in range(rows)])
        tokens = [x.tokens[i] for i in self.rows]
        labels = (tokens, x.key_tokens)
        self.scores.show_panel(matrix_panel("masked scores", scores, labels, ("query", "key")))
        self._levels = shared_levels(np.array(walk.exact))
        steps = np.arange(len(walk.steps))
        every = max(1, len(steps) // 16)  # whole tiles on the axis, never 0.5
        self.differences.getAxis("bottom").setTicks([[(t, str(t)) for t in steps[::every]]])
        self.differences.clear()
        self.differences.addItem(self.now_line)
        diff = [max(st.difference, FLOOR) for st in walk.steps]
        self.differences.plot(
            steps, diff, pen="b", symbol="o", symbolSize=5, name="to the exact output"
        )
        if walk.dtype != "float64":
            rounding = [max(st.rounding, FLOOR) for st in walk.steps]
            self.differences.plot(
                steps, rounding, pen="r", symbol="t", symbolSize=5, name="rounding"
            )
        final = len(walk.steps) - 1
        controls.set_quietly(self.step, 0, final, min(self.step.value(), final))
        self.show_step()

    def show_step(self) -> None:
        """The tile on the scores, the partial output and the row's running values."""
        walk, x = self.walk, self.inputs
        if walk is None:
            return
        t = self.step.value()
        st = walk.steps[t]
        rows = len(walk.exact)
        self.tile_mark.setRect(QRectF(st.start - 0.5, -0.5, st.stop - st.start, rows))
        i = min(self.row.value(), rows - 1)
        self.scores.clear_highlight()
        self.scores.highlight(0, i)
        cols = [str(c) for c in range(len(walk.exact[0]))]
        title = f"acc / l, tile {t}"  # short: a long title widens the plot past its room
        tokens = [x.tokens[r] for r in self.rows]
        panel = matrix_panel(
            title, np.array(st.partial), (tokens, cols), ("query", "feature"), self._levels
        )
        self.partial.show_panel(panel)
        self.now_line.setValue(t)
        self.where.setText(tile_words(walk, t))
        self.values.setText(row_text(walk, t, i, tokens[i]))


def tile_words(walk: object, t: int) -> str:
    """'tile 0 of 3 (numbered 0..2): keys 0..1; max |partial - exact| 0.12' for tile t."""
    st, count = walk.steps[t], len(walk.steps)
    keys = f"keys {st.start}..{st.stop - 1}" if st.stop - st.start > 1 else f"key {st.start}"
    numbered = f" (numbered 0..{count - 1})" if count > 1 else ""
    return f"tile {t} of {count}{numbered}: {keys}; max |partial - exact| {number(st.difference)}"


def row_text(walk: object, t: int, i: int, token: str) -> str:
    """Row i's running values over the tiles up to t (the latest TABLE_TILES of them)."""
    rows = []
    for n in range(max(0, t + 1 - TABLE_TILES), t + 1):
        st = walk.steps[n]
        rows.append(
            [
                str(n),
                f"{st.start}..{st.stop - 1}",
                number(st.tile_max[i]),
                number(st.running_max[i]),
                number(st.rescale[i]),
                number(st.denominator[i]),
                number(st.lse[i]),
            ]
        )
    st = walk.steps[t]
    partial = ", ".join(number(a) for a in st.partial[i][:4])
    exact = ", ".join(number(a) for a in walk.exact[i][:4])
    return (
        f"<b>row {i} ({token!r})</b>: m = running max, alpha = exp(m_old - m_new) rescales l "
        "and acc, l = running denominator, lse = m + log l<br>"
        + table(["tile", "keys", "tile max", "m", "alpha", "l", "lse"], rows)
        + f"<br>acc / l = [{partial}]<br>exact = [{exact}]"
    )

"""FlashAttention's tiles, block by block: the online softmax of the example on screen.

scratch.online_softmax walks the keys in tiles (in a worker); this view steps through its
record: the tile on the scores, the partial output, its distance to the exact output per
tile, and one row's running max, rescale, denominator and log-sum-exp.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QRectF, Qt
from PyQt6.QtGui import QBrush, QColor
from PyQt6.QtWidgets import (
    QComboBox,
    QGraphicsRectItem,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from gui.heatmap import Heatmap
from gui.learn_model import HeadInputs, matrix_panel, number, shared_levels, table, tile_rows
from gui.learn_worker import LearnWorker
from gui.spin_boxes import SpinBox
from scratch.online_softmax import online_softmax

DTYPES = {"float64 (exact)": "float64", "float16 tiles": "float16", "bfloat16 tiles": "bfloat16"}
FLOOR = 1e-17  # differences of 0 drawn here on the log axis
TABLE_TILES = 10  # the running-values table shows the latest this many tiles


def default_block(S: int) -> int:
    """A block that gives a few tiles: 2 for 6 keys, 8 for 64, 64 for 512."""
    return max(2, S // 8)


class TilesView(QWidget):
    """Block size, dtype, row and tile pickers; the scores with the tile, the partial output."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.inputs: HeadInputs | None = None
        self.walk = None  # scratch's OnlineSoftmax on screen
        self._asked: tuple | None = None
        self.worker = LearnWorker(self)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        # step 1: the pickers, in two short rows (they fit 1024 pixels)
        first, second = QHBoxLayout(), QHBoxLayout()
        self.block, self.row = SpinBox(), SpinBox()
        self.block.setKeyboardTracking(False)
        self.block.setToolTip("keys per tile (FlashAttention uses 64 or 128)")
        self.dtype = QComboBox()
        self.dtype.addItems(list(DTYPES))
        self.dtype.setToolTip("emulate a 16-bit kernel: q, k, v and p stored in 16 bits")
        for label, widget in (("block", self.block), ("tiles in", self.dtype), ("row", self.row)):
            first.addWidget(QLabel(label))
            first.addWidget(widget)
        self.status = QLabel()
        self.status.setWordWrap(True)
        first.addWidget(self.status, 1)
        self.back, self.forward = QPushButton("<"), QPushButton(">")
        self.step = QSlider(Qt.Orientation.Horizontal)
        self.where = QLabel()
        second.addWidget(self.back)
        second.addWidget(self.step, 1)
        second.addWidget(self.forward)
        second.addWidget(self.where, 1)
        outer.addLayout(first)
        outer.addLayout(second)
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
        self.values = QLabel()
        self.values.setWordWrap(True)
        self.values.setTextFormat(Qt.TextFormat.RichText)
        self.values.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        grid.addWidget(self.scores, 0, 0)
        grid.addWidget(self.partial, 0, 1)
        grid.addWidget(self.differences, 1, 0)
        grid.addWidget(self.values, 1, 1)
        grid.setRowStretch(0, 3)
        grid.setRowStretch(1, 2)
        outer.addLayout(grid, 1)
        self.tile_mark = QGraphicsRectItem()
        self.tile_mark.setPen(pg.mkPen((255, 140, 0), width=3, cosmetic=True))
        self.tile_mark.setBrush(QBrush(QColor(255, 165, 0, 60)))
        self.tile_mark.setZValue(10)
        self.scores.plot.addItem(self.tile_mark)
        self.now_line = pg.InfiniteLine(angle=90, pen=pg.mkPen((255, 140, 0), width=2))
        self.block.valueChanged.connect(lambda _: self.refresh())
        self.dtype.currentIndexChanged.connect(lambda _: self.refresh())
        self.row.valueChanged.connect(lambda _: self.show_step())
        self.step.valueChanged.connect(lambda _: self.show_step())
        self.back.clicked.connect(lambda: self.step.setValue(self.step.value() - 1))
        self.forward.clicked.connect(lambda: self.step.setValue(self.step.value() + 1))
        self.worker.finished.connect(self._on_walked)
        self.worker.failed.connect(self.status.setText)

    def set_inputs(self, inputs: HeadInputs) -> None:
        """A new example: the block and row pickers fit its sizes."""
        S, L = inputs.k.shape[0], len(tile_rows(inputs.q.shape[0]))
        fresh = self.inputs is None or self.inputs.k.shape[0] != S
        self.inputs = inputs
        for box, top in ((self.block, S), (self.row, L - 1)):
            box.blockSignals(True)
            box.setRange(1 if box is self.block else 0, max(top, 1 if box is self.block else 0))
            box.blockSignals(False)
        if fresh:  # a few tiles; the last row, which a causal mask lets see every tile
            for box, value in ((self.block, min(default_block(S), S)), (self.row, L - 1)):
                box.blockSignals(True)
                box.setValue(value)
                box.blockSignals(False)
        self.refresh()

    def refresh(self) -> None:
        """Walk the tiles for the block and dtype on screen (in the worker)."""
        x = self.inputs
        ask = (x, self.block.value(), DTYPES[self.dtype.currentText()])
        if x is None or ask == self._asked:
            return
        self._asked = ask
        rows = tile_rows(x.q.shape[0])
        q, k, v = x.q[rows].tolist(), x.k.tolist(), x.v.tolist()
        allowed = None if x.allowed is None else x.allowed[rows].tolist()
        _, block, dtype = ask
        more = f" ({len(rows)} of {x.q.shape[0]} query rows)" if len(rows) < x.q.shape[0] else ""
        self.status.setText(f"walking the keys in tiles of {block}{more}...")
        self.worker.start(
            lambda report, stop: online_softmax(
                q, k, v, scale=x.scale, allowed=allowed, block=block, dtype=dtype
            )
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
        self.step.blockSignals(True)
        self.step.setRange(0, len(walk.steps) - 1)
        self.step.setValue(min(self.step.value(), len(walk.steps) - 1))
        self.step.blockSignals(False)
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

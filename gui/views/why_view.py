"""Why each step exists, with the learner's numbers: the scale, the max subtraction, the mask.

The numbers come from scratch.learn.why (gui.present.learn_model.why) in a worker; this view words
them as
tables and draws the weights as grouped bars, one page per step.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PyQt6.QtWidgets import QScrollArea, QTabWidget, QVBoxLayout, QWidget

from gui.present.learn_model import HeadInputs, key_rows, number, shown_keys, table, why
from gui.views.learn_page import LearnPage
from gui.widgets import controls

COLOURS = ((150, 150, 150), (31, 119, 180), (214, 39, 40))  # grey, blue, red
PAGES = ("Scale", "Softmax", "Mask")
STEP_PAGE = {"scores": 0, "scaled": 0, "masked": 2, "weights": 1}  # the page of a pipeline step
TICK_LIMIT = 24  # key names under the bars up to this many keys, indices past it


class Bars(pg.PlotWidget):
    """Grouped bars: one series per colour, one group per key."""

    def __init__(self) -> None:
        super().__init__()
        controls.still_plot(self)
        self.setMinimumHeight(140)
        # the legend in a row of its own above the bars (the title's row: no title here);
        # drawn over the plot's top right corner it covered the bars of the last keys
        plot = self.getPlotItem()
        self.legend = pg.LegendItem(offset=None)
        plot.layout.removeItem(plot.titleLabel)
        plot.layout.addItem(self.legend, 0, 1)
        self.items: list[pg.BarGraphItem] = []

    def show_series(self, series: list[tuple[str, list[float]]], keys: list[str]) -> None:
        """Draw `series` [(name, heights per key)] side by side over `keys`."""
        self.clear()
        self.items = []
        width = 0.8 / len(series)
        # outlined only while bars are wide: past TICK_LIMIT keys a bar is a few pixels and its
        # black outline hid the fill (at 512 keys the three series drew one black mass)
        pen = pg.mkPen("k") if len(keys) <= TICK_LIMIT else None
        for n, (name, heights) in enumerate(series):
            x = [j - 0.4 + width * (n + 0.5) for j in range(len(heights))]
            item = pg.BarGraphItem(
                x=x, height=heights, width=width, brush=COLOURS[n], pen=pen, name=name
            )
            self.addItem(item)
            self.items.append(item)
        self.legend.clear()
        self.legend.setColumnCount(len(series))  # one line: the bars keep the height
        for item, (name, _) in zip(self.items, series):
            self.legend.addItem(item, name)
        self.getPlotItem().layout.setRowFixedHeight(0, self.legend.boundingRect().height())
        if len(keys) <= TICK_LIMIT:
            self.getAxis("bottom").setTicks([list(enumerate(keys))])
        else:
            self.getAxis("bottom").setTicks(None)
        top = max((h for _, heights in series for h in heights if h == h), default=1.0)
        self.setYRange(0, max(top, 1e-3) * 1.08, padding=0)  # 1/512 each: not one flat line
        self.setXRange(-0.6, len(keys) - 0.4, padding=0)


class WhyPage(QWidget):
    """One reason: its words and tables above, its bars below."""

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.text = controls.label(rich=True, top_left=True)
        self.scroll = scroll = QScrollArea()
        scroll.setWidget(self.text)
        scroll.setWidgetResizable(True)
        self.bars = Bars()
        layout.addWidget(scroll, 3)
        layout.addWidget(self.bars, 2)

    def show_text(self, html: str) -> None:
        """The words and tables, their box no taller than they are (the bars get the rest)."""
        self.text.setText(html)
        self._fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()  # a narrower page wraps the words onto more lines

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit()  # filled while hidden (another page on top), at another width

    def _fit(self) -> None:
        """At most the words' height: a short reason (Scale: ~150 pixels) kept 3/5 of the page
        and left a blank band above the bars; a long one still scrolls within its 3/5."""
        margins = self.layout().contentsMargins()
        frame = self.scroll.frameWidth()
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        # the width left with a scroll bar shown: measured without it, a box one line short
        # showed the bar, the narrower words took another line, and the bar stayed
        width = self.width() - margins.left() - margins.right() - 2 * frame - bar
        words = self.text.heightForWidth(width) if self.text.text() else 0
        self.scroll.setMaximumHeight(max(words, 0) + 2 * frame + 4)


class WhyView(LearnPage):
    """The row picker, then one page per step: Scale, Softmax, Mask."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: tuple | None = None  # (ScaleWhy, MaxWhy, MaskWhy) on screen
        self.row = self.spin("the query row whose weights each page explains")
        self.outer.addLayout(controls.row("query row", self.row, (self.status, 1)))
        self.pages = QTabWidget()
        self.scale_page, self.max_page, self.mask_page = WhyPage(), WhyPage(), WhyPage()
        for page, name in zip((self.scale_page, self.max_page, self.mask_page), PAGES):
            self.pages.addTab(page, name)
        self.outer.addWidget(self.pages, 1)
        self.worker.finished.connect(self._on_finished)

    def fit_pickers(self, inputs: HeadInputs) -> None:
        """The row stays where it fits (the middle row at first)."""
        L = len(inputs.tokens)
        controls.set_quietly(self.row, 0, L - 1, L // 2 if self.inputs is None else None)

    def show_step(self, step: str) -> None:
        """Open the page of a pipeline step (scaled: Scale, masked: Mask, weights: Softmax)."""
        if step in STEP_PAGE:
            self.pages.setCurrentIndex(STEP_PAGE[step])

    def request(self) -> tuple:
        """The example and the row on screen."""
        return self.inputs, self.row.value()

    def work(self, x: HeadInputs, i: int):
        """Compute the reasons for row i (in the worker)."""
        scores, scaled, masked = x.scores.tolist(), x.scaled.tolist(), x.masked.tolist()
        allowed = x.allowed_lists()
        self.status.setText("computing...")
        return lambda report, stop: why(scores, scaled, masked, x.d_k, i, allowed)

    def _on_finished(self, result: tuple) -> None:
        self.result = result
        x = self.inputs
        scale, top, mask = result
        i = scale.row
        head = f", head {x.head} of {x.heads}" if x.heads > 1 else ""
        self.status.setText(f"row {i} ({x.tokens[i]!r}){head}: the reasons on its numbers")
        self.scale_page.show_text(scale_text(scale, x))
        series = [
            ("without scale", scale.unscaled.weights),
            ("with 1/sqrt(d_k)", scale.scaled.weights),
        ]
        self.scale_page.bars.show_series(series, x.key_tokens)
        self.max_page.show_text(max_text(top, x))
        self.max_page.bars.show_series([("weights", top.weights)], x.key_tokens)
        self.mask_page.show_text(mask_text(mask, x))
        three = [
            ("-inf before softmax", mask.before),
            ("0 after softmax", mask.after),
            ("score 0, not -inf", mask.zero_score),
        ]
        self.mask_page.bars.show_series(three, x.key_tokens)


def scale_text(w: object, x: HeadInputs) -> str:
    """The scale's reason in words and one table."""
    S = len(w.scaled.weights)
    own = (
        ""
        if abs(x.scale - w.scale) < 1e-12
        else f" (this example itself uses scale {number(x.scale)})"
    )
    rows = [
        [
            "entropy (nats; uniform = ln S = " + number(math.log(S)) + ")",
            number(w.unscaled.entropy),
            number(w.scaled.entropy),
        ],
        ["largest weight", number(w.unscaled.largest), number(w.scaled.largest)],
        ["on key", x.key_tokens[w.unscaled.argmax], x.key_tokens[w.scaled.argmax]],
    ]
    return (
        "<b>Why multiply by 1/sqrt(d_k)?</b> A score q·k is a sum of d_k products, so its "
        f"variance grows with d_k. Here d_k = {w.d_k}: over the visible scores the variance is "
        f"<b>{number(w.variance_unscaled)}</b> without the scale and "
        f"<b>{number(w.variance_scaled)}</b> with 1/sqrt({w.d_k}) = {number(w.scale)}{own}. "
        "Larger gaps between scores make softmax pick one key; "
        + _scale_claim(w)
        + f" Row {w.row}:<br>"
        + table(["", "without scale", "with 1/sqrt(d_k)"], rows)
    )


def _scale_claim(w: object) -> str:
    """What the scale did to this row: more keys in play only where its entropy rose (it does
    unless the scale is 1 or the row's visible scores are all equal, one key among them)."""
    if w.scaled.entropy > w.unscaled.entropy:
        return "scaled, the row keeps more keys in play."
    if w.scale == 1:
        return f"here d_k = {w.d_k}, so 1/sqrt(d_k) = 1 and the scale changes nothing."
    return "on this row the scale changes no weight: its visible scores are all equal."


def max_text(w: object, x: HeadInputs) -> str:
    """The max subtraction's reason: the row, then the row at large logits in float32/float16."""
    keys = shown_keys(w.weights)  # past 12 keys: the 12 with the largest weights
    first = key_rows(keys, x.key_tokens, [w.scores, w.shifted, w.exps, w.weights])
    f32, f16 = w.overflows
    columns = [w.large, f32.exps, f32.naive, f16.exps, f16.naive, f32.stable]
    second = key_rows(keys, x.key_tokens, columns)
    more = "" if len(keys) == len(w.scores) else f" (the {len(keys)} largest of {len(w.scores)})"
    intro = f"Row {w.row}, max {number(w.top)}{more}:<br>"
    return (
        "<b>Why subtract the row max?</b> exp(s - max) / sum exp(s - max) is the same as "
        "exp(s) / sum exp(s), but every exp(s - max) is at most 1, so it never overflows. "
        + intro
        + table(["key", "s", "s - max", "exp(s - max)", "weight"], first)
        + f"<br>The same row plus {number(w.shift)} (max 100; softmax ignores the shift: same "
        f"weights). Without the subtraction exp overflows past {number(f32.limit)} in float32 "
        f"and past {number(f16.limit)} in float16; inf / inf = nan:<br>"
        + table(
            ["key", "logit", "float32 exp", "weight", "float16 exp", "weight", "max subtracted"],
            second,
        )
        + f"<br>sums of exp: float32 {number(f32.total)}, float16 {number(f16.total)}"
    )


def mask_text(w: object, x: HeadInputs) -> str:
    """The mask's reason: the weights three ways and their sums."""
    keys = shown_keys([max(a, b) for a, b in zip(w.before, w.zero_score)])
    n = len(w.before)
    more = "" if len(keys) == n else f" (the {len(keys)} keys of largest weight of {n})"
    rows = [
        [
            x.key_tokens[j],
            "yes" if w.allowed[j] else "no",
            number(w.before[j]),
            number(w.after[j]),
            number(w.zero_score[j]),
        ]
        for j in keys
    ]
    rows.append(["<b>sum</b>", "", *(f"<b>{number(s)}</b>" for s in w.sums)])
    assumed = (
        "<br><i>This example has no mask; the causal mask (key j &lt;= query i) is shown.</i>"
        if w.assumed_causal
        else ""
    )
    if all(w.allowed):  # nothing masked on this row: the three ways agree, and it says so
        claim = (
            f"Row {w.row} sees every key, so here the three agree; a row with a masked key "
            "shows the difference"
        )
    else:
        claim = (
            "Zeroing weights after softmax leaves a row that sums to less than 1 (the masked "
            "keys took their share first); a score of 0 is not a mask at all: exp(0 - max) > 0"
        )
    return (
        "<b>Why -inf before softmax, not 0 after it?</b> exp(-inf) = 0, so a masked key gets "
        f"weight 0 and the visible keys share all of 1. {claim}. Row {w.row}{more}:{assumed}<br>"
        + table(["key", "may attend", "-inf before softmax", "0 after softmax", "score 0"], rows)
    )

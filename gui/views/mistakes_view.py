"""A mistakes gallery: each classic mistake planted on the example on screen, beside the right
attention, with the checker's own diagnosis of a kernel that makes it.

The plants (NumPy, fast) and the checks (scratch.check on each planted kernel, seconds) run in
two workers; the checks do not depend on the example, so they run once per window.
"""

from __future__ import annotations

import html
import math

import numpy as np
from PyQt6.QtCore import Qt
from PyQt6.QtWidgets import QGridLayout, QListView, QListWidget, QWidget

from gui.present.learn_model import HeadInputs, matrix_panel, number, shared_levels
from gui.views.learn_page import LearnPage
from gui.widgets.heatmap import Heatmap
from gui.work.jobs import Worker
from scratch.learn import mistakes


def plant_all(x: HeadInputs) -> dict:
    """{name: Planted} for every mistake on head inputs `x` (the plant worker's job)."""
    allowed = x.allowed
    return {name: mistakes.plant(name, x.q, x.k, x.v, x.scale, allowed) for name in mistakes.NAMES}


def diagnose_all(report, stop) -> dict:
    """{name: Diagnosis} of every planted kernel (the check worker's job)."""
    names = mistakes.NAMES
    found = {}
    for n, name in enumerate(names):
        if stop():
            return found
        report(n, len(names), f"checking the kernel with {name}")
        found[name] = mistakes.diagnose(name)
    return found


class MistakesView(LearnPage):
    """The mistakes on the left; the chosen one's weights and output beside the right ones."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.planted: dict = {}
        self.diagnoses: dict = {}
        self.plant_worker, self.check_worker = self.worker, Worker(self)
        outer = self.outer
        # the mistakes in rows across the top: the four heatmaps get the whole width
        self.names = QListWidget()
        self.names.setFlow(QListView.Flow.LeftToRight)
        self.names.setWrapping(True)
        self.names.setSpacing(2)
        self.names.addItems(mistakes.NAMES)
        self.names.setCurrentRow(0)
        self.names.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit_names()
        outer.addWidget(self.names)
        self.text = self.status  # the mistake in words, the checker's progress and verdict
        self.text.setTextFormat(Qt.TextFormat.RichText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.text)
        grid = QGridLayout()
        self.maps = {
            key: Heatmap()
            for key in ("right weights", "wrong weights", "right output", "wrong output")
        }
        for n, m in enumerate(self.maps.values()):
            grid.addWidget(m, n // 2, n % 2)
        for key in ("right weights", "right output"):  # same colours as the panel beside it:
            heat = self.maps[key]  # one colour bar per pair leaves the cells their room
            heat.view.ci.removeItem(heat.bar)
            heat.bar = None
        outer.addLayout(grid, 1)
        self.names.currentRowChanged.connect(lambda _: self.show_current())
        self.plant_worker.finished.connect(self._on_planted)
        self.check_worker.progress.connect(lambda d, t, what: self._show_text(f"{what} ({d}/{t})"))
        self.check_worker.finished.connect(self._on_checked)
        self.check_worker.failed.connect(lambda m: self._show_text(f"the checker failed: {m}"))

    def work(self, x: HeadInputs):
        """Plant every mistake on a new example; check the kernels the first time."""
        if not self.diagnoses and not self.check_worker.busy:
            self.check_worker.start(diagnose_all)
        return lambda report, stop: plant_all(x)

    def wait(self) -> None:
        """Join both workers (closing, tests)."""
        self.plant_worker.wait()
        self.check_worker.wait()

    def _on_planted(self, planted: dict) -> None:
        self.planted = planted
        self.show_current()

    def _on_checked(self, diagnoses: dict) -> None:
        self.diagnoses = diagnoses
        self.show_current()

    def current(self) -> str:
        return self.names.currentItem().text()

    def show_current(self) -> None:
        """The chosen mistake's four heatmaps and words."""
        x, p = self.inputs, self.planted.get(self.current())
        if x is None or p is None:
            return
        labels = (x.tokens, x.key_tokens)
        out_labels = (x.tokens, [str(c) for c in range(p.right_output.shape[-1])])
        right = matrix_panel(
            "weights: right", p.right_weights, labels, ("query", "key"), weights=True
        )
        self.maps["right weights"].show_panel(right)
        wrong = (
            p.wrong_weights
            if p.wrong_weights is not None
            else np.full_like(p.right_weights, np.nan)
        )
        self.maps["wrong weights"].show_panel(
            matrix_panel("weights: mistake", wrong, labels, ("query", "key"), right.levels, True)
        )
        levels = shared_levels(p.right_output, p.wrong_output)
        self.maps["right output"].show_panel(
            matrix_panel("output: right", p.right_output, out_labels, ("query", "feature"), levels)
        )
        wrong_out = (
            p.wrong_output if p.wrong_output is not None else np.full_like(p.right_output, np.nan)
        )
        cols = [str(c) for c in range(wrong_out.shape[-1])]
        self.maps["wrong output"].show_panel(
            matrix_panel(
                "output: mistake", wrong_out, (x.tokens, cols), ("query", "feature"), levels
            )
        )
        self._keep_least_widths()
        self._show_text("")

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_names()

    def _fit_names(self) -> None:
        """The list as tall as its wrapped rows at its width: every mistake in view (three rows
        of fixed height hid two of them behind a scroll bar with Noto at 1024 x 700)."""
        names = self.names
        names.doItemsLayout()
        rects = [names.visualItemRect(names.item(i)) for i in range(names.count())]
        bottom = max((r.bottom() + 1 for r in rects), default=0) + names.verticalOffset()
        height = bottom + names.spacing() + 2 * names.frameWidth()
        if height != names.height():
            names.setFixedHeight(height)

    def _keep_least_widths(self) -> None:
        """Each heatmap at least as wide as its axes, cells and colour bar need: word labels
        widen the query axis, and squeezed below that the bar's labels were cut at 1024 x 700."""
        for hm in self.maps.values():
            least = hm.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
            hm.setMinimumWidth(math.ceil(least))

    def _show_text(self, checking: str) -> None:
        p = self.planted.get(self.current())
        if p is None:
            self.text.setText(checking)
            return
        self.text.setText(mistake_text(p, self.diagnoses.get(self.current()), checking))


def row_sums_words(sums: np.ndarray) -> str:
    """'rows of the wrong weights each sum to 1', or 'sum to 0.5 to 1.5' when they differ."""
    finite = sums[~np.isnan(sums)]
    nan = "; nan in some rows" if finite.size < sums.size else ""
    if finite.size == 0:
        return "every row of the wrong weights sums to nan"
    lo, hi = number(float(finite.min())), number(float(finite.max()))
    said = f"each sum to {lo}" if lo == hi else f"sum to {lo} to {hi}"
    return f"rows of the wrong weights {said}{nan}"


def mistake_text(p: object, d: object, checking: str) -> str:
    """The planted mistake in words: its line of code, what it does here, the checker's verdict."""
    lines = [f"<b>{p.mistake.name}</b>: <code>{html.escape(p.mistake.code)}</code>"]
    if p.note:
        lines.append(f"<i>{html.escape(p.note)}</i>")
    if p.error:
        lines.append(f"It does not run on this example: {html.escape(p.error)}.")
    else:
        diff = p.difference()
        lines.append(
            f"max |output difference| {number(diff)}; "
            + row_sums_words(np.sum(p.wrong_weights, axis=-1))
        )
        if diff == 0.0:
            lines.append("On this example the mistake changes nothing (try another example).")
    if d is not None:
        named = html.escape(d.diagnosis or "(no mistake named)")
        lines.append(
            f"The checker on a kernel with this mistake: {d.verdict}. Diagnosis: <b>{named}</b>"
        )
    elif checking:
        lines.append(checking)
    return "<br>".join(lines)

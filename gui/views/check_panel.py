"""Check panel: the chosen backend's trace against the ground truth, step by step."""

from __future__ import annotations

import html

import numpy as np
from PyQt6.QtCore import Qt
from PyQt6.QtGui import QColor, QFontMetrics
from PyQt6.QtWidgets import (
    QFrame,
    QLabel,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.present import view_model
from gui.state import sampled_check
from gui.widgets import controls
from gui.widgets.heatmap import Heatmap

PASS, FAIL = QColor(200, 240, 200), QColor(255, 190, 190)
SIDE_BY_SIDE_WIDTH = 900  # the Check tab's width from which table and map sit side by side
MAP_ROOM = 300  # pixels a map beside its table keeps at least: its axis, cells and colour bar
HEADERS = ("step", "shape", "max |difference|", "bound", "check")


def _number(v: object) -> float:
    """A scalar from a bound that may be a number or a nested per-element list."""
    try:
        return float(v)
    except TypeError:
        a = np.asarray(v, dtype=np.float64)
        return float(np.nanmax(a)) if a.size else 0.0


def shape_text(trace: object, name: str) -> str:
    """The shape of the step a check compares; for a sampled check the query axis reads
    "16 of 4096"."""
    sampled = sampled_check.sampled_view(name, trace)
    if sampled is None:
        return " x ".join(map(str, trace[name].shape)) if name in trace else ""
    step, rows = sampled
    parts = [str(n) for n in trace[step].shape]
    if "query" in trace[step].axes:
        axis = trace[step].axes.index("query")
        parts[axis] = f"{len(rows)} of {parts[axis]}"
    return " x ".join(parts)


def _token_label(tokens: list[str], i: int) -> str:
    """Query row i's label: its token, with the row number when the token does not say it."""
    token = str(tokens[i])
    return token if token == f"t{i}" else f"{i}: {token}"


def _per_head(step: object, row: int, panel: CheckPanel) -> bool:
    """Whether a check's |difference| grid has a head axis (drawn as its largest over heads)."""
    if row >= panel.forward_rows:  # the gradient checks compare (heads, n, d) per head
        return True
    return step is not None and step.axes[0] == "head"


def _verdict(checks: list, passed: str, failed: str) -> tuple[str, str]:
    """(the coloured verdict on `checks`, the first failed check's message or '')."""
    bad = [c.name for c in checks if not c.ok]
    if not checks:  # nothing compared (the sampled check says why): no verdict to colour
        return "not checked", ""
    if not bad:
        return f"<span style='color:#1a7f37'>{passed}</span>", ""
    first = next((c.message for c in checks if not c.ok and c.message), "")
    return f"<span style='color:#b00020'>{failed}: {', '.join(bad)}</span>", first


def report_table(headers: tuple[str, ...]) -> QTableWidget:
    """A read-only table of check results, one selectable row per check, verdict (the last of
    `headers`) shown in the first column."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    table.verticalHeader().setVisible(False)
    # the verdict (the last column) is drawn first: a narrow window or a scroll bar never hides it
    table.horizontalHeader().moveSection(len(headers) - 1, 0)
    return table


def side_by_side(split: QSplitter, width: int) -> None:
    """A table and its map side by side from SIDE_BY_SIDE_WIDTH pixels, one above the other
    below (at 1024 pixels the map was too narrow for its colour bar's labels, cut off)."""
    wide = width >= SIDE_BY_SIDE_WIDTH
    orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
    if split.orientation() == orientation:
        return  # the user's split stays
    split.setOrientation(orientation)
    fit_table(split)


def fit_table(split: QSplitter) -> None:
    """Stacked, the table (the split's first widget) takes the height of its rows, at most half,
    and the map the rest: with 3/5 a checked kernel's map got ~60 pixels; with half, two sampled
    rows left empty room above a map that drew 8 of its 16 query labels."""
    table = split.widget(0)
    if not table.isVisible():  # its header is laid out once on screen: fitted then
        split.setProperty("fit_pending", True)
        return
    split.setProperty("fit_pending", False)
    total = sum(split.sizes())
    if split.orientation() != Qt.Orientation.Vertical:
        # side by side: the table as wide as its columns (with Noto at 1400 x 900 the bound and
        # err/bound columns were cut at 3/5 of the width), the map at least MAP_ROOM
        columns = (
            sum(table.columnWidth(c) for c in range(table.columnCount()))
            + table.verticalScrollBar().sizeHint().width()
            + 2 * table.frameWidth()
        )
        total = split.width() - split.handleWidth()  # (a hidden map's handle is in sizes())
        if total > 0:
            width = max(table.minimumWidth(), min(columns, total - MAP_ROOM))
            split.setSizes([width, total - width])
        return
    rows = (
        table.horizontalHeader().sizeHint().height()
        + sum(table.rowHeight(r) for r in range(table.rowCount()))
        + table.horizontalScrollBar().sizeHint().height()
        + 2 * table.frameWidth()
    )
    if total <= 0:  # not laid out yet: half each
        split.setSizes([1, 1])
        return
    height = min(max(rows, table.minimumSizeHint().height()), total // 2)
    split.setSizes([height, total - height])


class ReportSplit(QSplitter):
    """A table of checks (report_table) beside or above the selected check's |difference| map
    (side_by_side), fitted to the table's columns or rows (fit_table)."""

    def __init__(
        self, headers: tuple[str, ...], least: int, stretch: tuple[int, int], sizes: list[int]
    ) -> None:
        super().__init__(Qt.Orientation.Horizontal)
        self.table = report_table(headers)
        self.table.setMinimumWidth(least)
        self.diff_map = Heatmap()
        self.addWidget(self.table)
        self.addWidget(self.diff_map)
        self.setStretchFactor(0, stretch[0])
        self.setStretchFactor(1, stretch[1])
        self.setSizes(sizes)

    def showEvent(self, event) -> None:
        """A table filled while hidden is fitted to its rows once on screen."""
        super().showEvent(event)
        if self.property("fit_pending"):
            fit_table(self)

    def fill(self, rows: list[tuple[tuple[str, ...], QColor, str]], current: int, show) -> None:
        """One table row per (cells, colour, tooltip); row `current` selected and shown with
        show(row) (with the map shown or hidden, the table gets its columns' width)."""
        self.table.setRowCount(len(rows))
        for r, (cells, colour, tip) in enumerate(rows):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setBackground(colour)
                if tip:
                    item.setToolTip(tip)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        if rows:
            self.table.setCurrentCell(current, 0)
            show(current)
        fit_table(self)


def diff_panel(
    image: np.ndarray, title: str, labels: tuple, axes: tuple, step: str, bound: float = 0.0
) -> view_model.Panel:
    """A |difference| image as a panel coloured from 0 to max(its largest, bound), within the
    display's range; labels and axes: (rows, columns)."""
    top = min(
        max(view_model.largest_finite(image), bound, view_model.LEVEL_FLOOR),
        view_model.DISPLAY_LIMIT,
    )
    return view_model.Panel(
        title=title,
        image=image,
        raw=image.astype(np.float64),
        row_labels=labels[0],
        col_labels=labels[1],
        row_axis=axes[0],
        col_axis=axes[1],
        kind="weights",
        levels=(0.0, top),
        step=step,
        head=None,
    )


def _gradient_text(gradients: object) -> str:
    """The gradient check's line of the header: what it compared and the verdict."""
    if gradients is None:
        return "Gradients: open the Backward tab to compute and check them."
    if gradients.refused:
        return f"Gradients: not computed. {html.escape(gradients.refused)}"
    if not gradients.checks:
        return f"Gradients: {html.escape(gradients.compared)}"
    verdict, first = _verdict(
        gradients.checks, "dQ, dK, dV within their bounds", "gradient outside the bound"
    )
    why = f" {html.escape(first)}." if first else ""
    return f"Gradients: {verdict}.{why} Compared {html.escape(gradients.compared, quote=False)}."


class CheckPanel(QWidget):
    """A table of StepChecks plus the |difference| heatmap of the selected step."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.checks: list = []
        self.trace = None
        self.forward_rows = 0  # the first rows are the forward checks, then the gradients'
        self.gradient_trace = None  # the backward trace the gradient rows belong to
        outer = QVBoxLayout(self)
        self.header = QLabel()
        font = controls.font(12)
        self.header.setFont(font)
        self.header.setWordWrap(True)
        # the header scrolls when its lines outgrow the room: never pushes the window taller
        self.header_box = header_box = QScrollArea()
        header_box.setWidget(self.header)
        header_box.setWidgetResizable(True)
        header_box.setFrameShape(QFrame.Shape.NoFrame)
        self._least_header = QFontMetrics(font).lineSpacing() * 4  # 4 lines at least
        header_box.setFixedHeight(self._least_header)
        outer.addWidget(header_box)
        self.split = ReportSplit(HEADERS, 300, (2, 3), [520, 600])
        self.table, self.diff_map = self.split.table, self.split.diff_map
        outer.addWidget(self.split, 1)
        self.table.currentCellChanged.connect(lambda row, *_: self.show_diff(row))

    def resizeEvent(self, event) -> None:
        """Table beside the map when there is room, above it when not (a 1024-pixel window
        left the map too narrow for its colour bar's labels, which were cut off)."""
        side_by_side(self.split, event.size().width())
        super().resizeEvent(event)
        self._fit_header(event.size().width(), event.size().height())

    def _fit_header(self, width: int, height: int) -> None:
        """The header as tall as its lines, at least 4 (at its least height a sampled check's
        five lines at 1024 x 700 showed three), at most half the panel: it scrolls only past
        that. Capped at 6 lines, the gradients' verdict (7 to 9 lines at 1024 x 700) lost its
        last line behind a scroll bar."""
        margins = self.layout().contentsMargins()
        bar = self.header_box.verticalScrollBar().sizeHint().width()  # room for it, if it comes
        lines = self.header.heightForWidth(width - margins.left() - margins.right() - bar)
        least = self._least_header
        self.header_box.setFixedHeight(min(max(lines, least), max(least, height // 2)))

    def set_outcome(self, outcome: object, gradients: object = None) -> None:
        """Fill the table from outcome.checks, then the gradient checks of `gradients` (a
        BackwardOutcome of the same inputs, or None); always say which backend and dtype ran."""
        self.trace, self.checks = outcome.trace, list(outcome.checks)
        self.forward_rows = len(self.checks)
        self.gradient_trace = gradients.trace if gradients is not None else None
        if gradients is not None:
            self.checks += gradients.checks
        ran = (
            f"backend <b>{outcome.backend}</b>, dtype <b>{outcome.dtype}</b>, "
            f"kernel {outcome.kernel}, {outcome.seconds * 1000:.0f} ms"
        )
        verdict, first = _verdict(
            outcome.checks, "every step within its bound", "outside the bound"
        )
        why = f"<br>{html.escape(first)}" if first else ""  # e.g. the values outgrew float16
        sampled = getattr(outcome, "sampled", "")
        how = f"<br>Sampled check: {html.escape(sampled)}." if sampled else ""
        self.header.setText(
            f"{ran} vs the exact ground truth (scratch, float64): {verdict}{why}{how}"
            f"<br>{_gradient_text(gradients)}"
        )
        self._fit_header(self.width(), self.height())
        self.diff_map.setVisible(bool(self.checks))
        rows = []
        for r, check in enumerate(self.checks):
            cells = (
                check.name,
                shape_text(self.trace, check.name)
                if r < self.forward_rows
                else " x ".join(map(str, np.shape(check.diff))),  # (heads, n, d)
                f"{check.max_abs_diff:.3g}",
                f"{_number(check.bound):.3g}",
                "pass" if check.ok else "FAIL",
            )
            rows.append((cells, PASS if check.ok else FAIL, check.message))
        first_bad = next((r for r, c in enumerate(self.checks) if not c.ok), None)
        row = first_bad if first_bad is not None else self._default_row()
        self.split.fill(rows, row, self.show_diff)

    def _trace_of(self, row: int) -> object:
        """The trace a table row's check belongs to: the backend's, or the backward trace."""
        return self.trace if row < self.forward_rows else self.gradient_trace

    def _default_row(self) -> int:
        names = [c.name for c in self.checks]
        return names.index("output") if "output" in names else 0

    def show_diff(self, row: int) -> None:
        """Show check `row`'s |difference| as a heatmap from 0 to max(largest diff, bound)."""
        if not 0 <= row < len(self.checks):
            return
        check = self.checks[row]
        if check.diff is None:  # e.g. a shape mismatch: nothing to draw
            self.diff_map.setVisible(False)
            return
        self.diff_map.setVisible(True)
        image = view_model.diff_image(check.diff)
        rows, cols = image.shape
        trace = self._trace_of(row)
        sampled = sampled_check.sampled_view(check.name, trace)
        name = sampled[0] if sampled else check.name
        step = trace[name] if name in trace else None
        axes = list(step.axes[-2:]) if step is not None and len(step.axes) >= 2 else ["row", "col"]
        if row >= self.forward_rows:  # a gradient per head (H, n, d): its rows are tokens
            axes = ["query" if name == "grad_query" else "key", "feature"]
        row_labels = view_model.labels_for(trace, axes[0], rows)
        row_axis = axes[0]
        if sampled and axes[0] == "query" and len(sampled[1]) == rows:
            row_labels = [_token_label(trace.tokens, i) for i in sampled[1]]
            row_axis = f"query ({rows} sampled of {len(trace.tokens)})"
        col_axis = axes[-1] + (", largest over heads" if _per_head(step, row, self) else "")
        panel = diff_panel(
            image,
            f"|{name} - ground truth|",  # short: a long one widens the plot past its room
            (row_labels, view_model.labels_for(trace, axes[-1], cols)),
            (row_axis, col_axis),
            check.name,
            _number(check.bound),
        )
        self.diff_map.show_panel(panel)

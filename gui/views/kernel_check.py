"""Kernel check tab: load your attention kernel, run scratch.check in a thread, show the report."""

from __future__ import annotations

import html
import importlib.util
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from PyQt6.QtGui import QColor
from PyQt6.QtWidgets import QProgressBar, QVBoxLayout, QWidget

import scratch
from gui.present import numbers, view_model
from gui.views.check_panel import ReportSplit, diff_panel, side_by_side
from gui.views.kernel_check_options import KernelCheckOptions
from gui.widgets import controls
from gui.work.jobs import Worker

COLOURS = {"pass": QColor(200, 240, 200), "fail": QColor(255, 190, 190)}
COLOURS["unsupported"] = QColor(235, 235, 235)
HEADERS = ("case", "dtype", "shapes q / k / v", "max error", "bound", "err/bound", "verdict")


def load_kernel(source: str, function: str = "") -> Callable:
    """`package.module:function`, or a .py file plus a function name -> the function.

    ValueError (one line) for anything that does not give a callable."""
    source = source.strip()
    if source.endswith(".py"):
        path = Path(source).expanduser()
        if not path.is_file():
            raise ValueError(f"kernel file: no such file {str(path)!r}")
        name = function.strip()
        if not name:
            raise ValueError("function: name the function to check in the file")
        spec = importlib.util.spec_from_file_location(f"user_kernel_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file: a syntax error or its own exception
            raise ValueError(
                f"kernel file: loading {path.name} raised {type(exc).__name__}: {exc}"
            ) from exc
        fn = getattr(module, name, None)
        if not callable(fn):
            raise ValueError(f"function: {path.name} has no function {name!r}")
        return fn
    if function.strip() and ":" not in source:
        source = f"{source}:{function.strip()}"
    if "" not in sys.path:
        sys.path.insert(0, "")  # modules in the current folder, as on the command line
    return scratch.checker.load(source)


class KernelCheckWorker(Worker):
    """Runs scratch.check in a pool thread; only the newest request's report arrives."""

    WAIT_MS = 300000

    def submit(self, fn: Callable, direction: str = "forward", **options) -> int:
        """Check fn off the GUI thread: its output (forward), fn as a backward (backward) or the
        gradients torch.autograd takes through fn (autograd), with scratch.check's options."""
        if direction == "forward":
            return self.start(lambda report, stop: scratch.check(fn, progress=report, **options))
        forward, backward = (None, fn) if direction == "backward" else (fn, None)
        return self.start(
            lambda report, stop: scratch.check_backward(
                forward, backward=backward, progress=report, **options
            )
        )


class KernelCheckPanel(QWidget):
    """Kernel source, options and Check; then whose results they are, the case table, a diff
    heatmap and the diagnosis."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.report = None
        self.worker = KernelCheckWorker(self)
        outer = QVBoxLayout(self)
        # step 1: what to check and how (the same options as python -m scratch.check)
        self.form = KernelCheckOptions()
        self.source, self.function = self.form.source, self.form.function
        self.array, self.dtype, self.cases = self.form.array, self.form.dtype, self.form.cases
        self.run_button = self.form.run_button
        outer.addWidget(self.form)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        outer.addWidget(self.progress)
        self.header = controls.label(
            "Load your attention kernel and press Check.", selectable=True, top_left=True
        )
        self.header.setMinimumHeight(3 * self.header.fontMetrics().height())
        outer.addWidget(self.header)
        # step 2: the report, under a line that says whose results they are
        self.results_label = controls.label("no results yet", style="color: #555555;")
        outer.addWidget(self.results_label)
        self.split = ReportSplit(HEADERS, 240, (3, 2), [560, 340])
        self.table, self.diff_map = self.split.table, self.split.diff_map
        outer.addWidget(self.split, 1)
        self._asked = ""  # the kernel and options of the check under way, in words
        self.diff_map.setVisible(False)  # no map until a report has a case to draw
        self.run_button.clicked.connect(self.start)
        self.table.currentCellChanged.connect(lambda r, *_: self.show_case(r))
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self.show_report)
        self.worker.failed.connect(self._say_error)

    def resizeEvent(self, event) -> None:
        """Table beside the map when there is room, above it when not."""
        side_by_side(self.split, event.size().width())
        super().resizeEvent(event)

    def clear_results(self, why: str) -> None:
        """Forget the last report: its table and map belong to another kernel or options."""
        self.report = None
        self.table.setRowCount(0)
        self.diff_map.setVisible(False)
        self.results_label.setText(why)

    def start(self) -> bool:
        """Load the kernel and start the check; a bad source is said in the header."""
        name = self.source.text().strip()
        function = self.function.text().strip()
        kernel = f"{name} ({function})" if function and name.endswith(".py") else name
        self._asked = f"{kernel or 'no kernel'}: {self.form.summary()}"
        self.clear_results(f"no results: {self._asked}, at {time.strftime('%H:%M:%S')}")
        try:
            fn = load_kernel(name, function)
        except ValueError as exc:
            self._say_error(str(exc))
            return False
        self.run_button.setEnabled(False)
        self.progress.setVisible(True)
        self.progress.setValue(0)
        self.header.setText(f"checking {html.escape(kernel)} ...")
        self.worker.submit(fn, self.form.direction_key(), **self.form.options())
        return True

    def _on_progress(self, done: int, total: int, name: str) -> None:
        self.progress.setMaximum(total)
        self.progress.setValue(done)
        self.progress.setFormat(f"case {done}/{total}: {name}")

    def _say_error(self, message: str) -> None:
        self.run_button.setEnabled(True)
        self.progress.setVisible(False)
        self.header.setText(f"<span style='color:#b00020'>{html.escape(message)}</span>")

    def show_report(self, report: object) -> None:
        """The verdict and diagnosis in the header, one row per case, the worst case's diff."""
        self.report = report
        self.run_button.setEnabled(True)
        self.results_label.setText(f"results of {self._asked}, at {time.strftime('%H:%M:%S')}")
        self.progress.setVisible(False)
        colour = "#1a7f37" if report else "#b00020"
        lines = [f"<b style='color:{colour}'>{html.escape(report.verdict)}</b>"]
        if report.diagnosis:
            lines.append(f"diagnosis: {html.escape(report.diagnosis)}")
        elif not report:
            lines.append("diagnosis: no known mistake matches")
        self.header.setText("<br>".join(lines))
        rows = []
        for case in report.cases:
            cells = (
                case.name,
                case.dtype,
                case.shapes,
                numbers.error(case.max_error),
                numbers.error(case.bound),
                "-" if math.isnan(case.ratio) else numbers.significant(case.ratio),
                {"pass": "pass", "fail": "FAIL"}.get(case.status, case.status),
            )
            rows.append((cells, COLOURS[case.status], case.message))
        failed = [r for r, c in enumerate(report.cases) if c.status == "fail" and c.diff]
        shown = [r for r, c in enumerate(report.cases) if c.diff]
        self.split.fill(rows, (failed or shown or [0])[0], self.show_case)

    def show_case(self, row: int) -> None:
        """Case `row`'s |output - truth| (largest over heads) from 0 to its own largest error,
        so where the errors sit shows even far below the bound (scaled to the bound, a passing
        kernel's map was one flat colour); the title gives the largest error and the bound."""
        cases = self.report.cases if self.report is not None else []
        if not 0 <= row < len(cases) or not cases[row].diff:
            self.diff_map.setVisible(False)
            return
        case = cases[row]
        self.diff_map.setVisible(True)
        image = view_model.diff_image(case.diff)
        rows, cols = image.shape
        largest = view_model.largest_finite(image)
        title = f"|output - truth|, {case.name}: largest {largest:.2g}, bound {case.bound:.2g}"
        labels = (_sparse_labels("q", rows), _sparse_labels("c", cols))
        panel = diff_panel(image, title, labels, ("query", "feature"), "output")
        self.diff_map.show_panel(panel)


def _sparse_labels(prefix: str, n: int, most: int = 8) -> list[str]:
    """Labels for n rows or columns, at most `most` of them written (the rest left blank)."""
    every = max(1, math.ceil(n / most))
    return [f"{prefix}{i}" if i % every == 0 else "" for i in range(n)]

"""The "Check a kernel" tab's form: the kernel (typed or browsed) and the checker's options,
the same ones as `python -m scratch.check` (see scratch/checker/cli.py)."""

from __future__ import annotations

from PyQt6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

import scratch
from gui.widgets import controls
from gui.widgets.spin_boxes import SpinBox

# what is checked: the CLI's plain function, --backward and --autograd
DIRECTIONS = {
    "forward": "forward: the output",
    "backward": "backward: your (dq, dk, dv) function",
    "autograd": "autograd: torch's gradients through your forward",
}
ARRAYS = ("numpy", "torch", "list")
DTYPES = ("float32", "float64", "float16", "bfloat16")
CASE_SETS = scratch.checker.CASE_SETS  # standard, full, large, medium
MASKED_ROWS = ("zero", "nan", "uniform")
MAX_SEED = 2**31 - 1


class KernelCheckOptions(QWidget):
    """Kernel source, function, direction and the check's options in a grid that fits 600 px."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        self.source = QLineEdit()
        self.source.setPlaceholderText("path/to/kernel.py  or  package.module:function")
        self.browse_button = QPushButton("Browse...")
        self.function = QLineEdit()
        self.function.setPlaceholderText("function (for a .py file)")
        self.direction = controls.combo(DIRECTIONS)
        self.array = controls.combo(ARRAYS)
        self.dtype = controls.combo(DTYPES)
        self.cases = controls.combo(CASE_SETS)
        self.masked_rows = controls.combo(
            MASKED_ROWS, "what a fully masked row of the output should hold"
        )
        self.seed = SpinBox(0, MAX_SEED, "seed of the cases' random inputs")
        self.require = QLineEdit()
        features = ",".join([*scratch.checker.FEATURES, "dropout"])
        self.require.setPlaceholderText("e.g. mask,causal")
        self.require.setToolTip(
            f"features your kernel must support, comma-separated: {features} (dropout: "
            "backward only); a case it refuses for one of them fails instead of being skipped"
        )
        self.run_button = QPushButton("Check")
        rows = (
            (("kernel", self.source, 4), ("", self.browse_button, 1)),
            (("function", self.function, 1), ("checks", self.direction, 3)),
            (("arrays", self.array, 1), ("dtype", self.dtype, 1), ("cases", self.cases, 1)),
            (
                ("masked rows", self.masked_rows, 1),
                ("seed", self.seed, 1),
                ("require", self.require, 1),
            ),
        )
        for r, row in enumerate(rows):
            col = 0
            for text, widget, span in row:
                if text:
                    grid.addWidget(QLabel(text), r, col)
                grid.addWidget(widget, r, col + 1 if text else col, 1, span if text else 1)
                col += span + 1 if text else 1
        grid.addWidget(self.run_button, len(rows), 5)
        for c in (1, 3, 5):
            grid.setColumnStretch(c, 1)
        self.ask_file = self._ask_file  # replaced in tests (no dialog offscreen)
        self.browse_button.clicked.connect(self.browse)

    def _ask_file(self) -> str:
        start = self.source.text().strip() if self.source.text().endswith(".py") else ""
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose the file of your kernel", start, "Python files (*.py)"
        )
        return path

    def browse(self) -> None:
        """Ask for a .py file and put its path in the kernel field."""
        path = self.ask_file()
        if path:
            self.source.setText(path)

    def options(self) -> dict:
        """The checker's keyword options, as scratch.check and check_backward take them."""
        return {
            "array": self.array.currentText(),
            "dtype": self.dtype.currentText(),
            "cases": self.cases.currentText(),
            "masked_rows": self.masked_rows.currentText(),
            "seed": self.seed.value(),
            "require": self.require.text().strip(),
        }

    def direction_key(self) -> str:
        """'forward', 'backward' or 'autograd'."""
        return self.direction.currentData()

    def summary(self) -> str:
        """The options in words, as the results' label says them."""
        o = self.options()
        words = [
            self.direction_key(),
            f"{o['array']} {o['dtype']}",
            f"{o['cases']} cases",
            f"seed {o['seed']}",
            f"masked rows {o['masked_rows']}",
        ]
        if o["require"]:
            words.append(f"require {o['require']}")
        return ", ".join(words)

"""Backward view: the dO choice, then dO -> dV -> dP -> D -> dS -> dQ, dK ... step by step."""

from __future__ import annotations

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gui import backward_check, view_model
from gui import session as sm
from gui.pipeline_view import PipelineView
from gui.spin_boxes import SpinBox

GRAD_LABELS = {"ones": "ones", "random": "random", "target": "one-hot target"}


class BackwardView(QWidget):
    """Shows the backward steps of a ground-truth trace; emits gradOutputChosen(kind, seed)."""

    gradOutputChosen = pyqtSignal(str, int)
    cancelRequested = pyqtSignal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: sm.Session | None = None
        self.outcome = None  # the BackwardOutcome on screen
        self._updating = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        # step 1: the dO choice (part of the session) and what is being computed
        row = QHBoxLayout()
        row.setContentsMargins(4, 4, 4, 0)
        row.addWidget(QLabel("dO"))
        self.kind = QComboBox()
        for key, text in GRAD_LABELS.items():
            self.kind.addItem(text, key)
        self.kind.setToolTip(
            "dO, the gradient of the loss with respect to the output: ones (loss = sum(output)), "
            "random (seeded), or a one-hot target (loss = sum(output * target), cell from the seed)"
        )
        self.seed = SpinBox()
        self.seed.setRange(0, sm.MAX_SEED)
        self.seed.setKeyboardTracking(False)
        self.seed.setToolTip("seed of the random dO, or of the one-hot target's cell")
        self.status = QLabel()
        self.status.setWordWrap(True)  # a long progress text wraps: the row fits 1024 pixels
        self.status.setMinimumWidth(80)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        row.addWidget(self.kind)
        row.addWidget(QLabel("seed"))
        row.addWidget(self.seed)
        row.addWidget(self.status, 1)
        row.addWidget(self.cancel_button)
        outer.addLayout(row)
        self.about = QLabel()  # what dO is, in words
        self.about.setWordWrap(True)
        self.about.setContentsMargins(4, 0, 4, 0)
        self.about.setStyleSheet("color: #114477;")
        outer.addWidget(self.about)
        # step 2: the refusal (too many tokens) or the steps themselves
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setContentsMargins(12, 12, 12, 12)
        self.message.setVisible(False)
        outer.addWidget(self.message)
        # lower input panels than the forward view's: the dO rows above fit 700 pixels too
        self.pipeline = PipelineView(names_of=view_model.backward_steps, source_height=80)
        self.pipeline.step_name = "grad_output"
        self.pipeline.setVisible(False)
        outer.addWidget(self.pipeline, 1)
        self.filler = QWidget()  # in the steps' place while they are hidden: rows stay on top
        outer.addWidget(self.filler, 1)
        self.kind.activated.connect(lambda _: self._chosen())
        self.seed.valueChanged.connect(lambda _: self._chosen())
        self.cancel_button.clicked.connect(self.cancelRequested)

    def _chosen(self) -> None:
        if not self._updating:
            self.gradOutputChosen.emit(self.kind.currentData(), self.seed.value())

    def set_session(self, s: sm.Session) -> None:
        """Show the session's dO choice (no signal)."""
        self.session = s
        self._updating = True
        try:
            self.kind.setCurrentIndex(max(0, self.kind.findData(s.grad_output)))
            self.seed.setValue(s.grad_seed)
            self.seed.setEnabled(s.grad_output != "ones")
        finally:
            self._updating = False
        self.about.setText(backward_check.describe_grad_output(s))

    def set_busy(self, text: str) -> None:
        """Say what is being computed ('' when nothing is)."""
        self.status.setText(text)
        self.cancel_button.setVisible(bool(text))

    def set_outcome(self, outcome: object) -> None:
        """Show a BackwardOutcome: its backward steps, or why there are none."""
        self.outcome = outcome
        self.set_busy("")
        if outcome.trace is None:
            self.show_message(outcome.refused)
            return
        self.message.setVisible(False)
        self.filler.setVisible(False)
        self.pipeline.setVisible(True)
        self.pipeline.set_trace(outcome.trace)
        self.status.setText(f"ground truth (float64), {outcome.seconds:.2f} s")

    def show_message(self, text: str) -> None:
        """A sentence in place of the steps (too many tokens, or the computation failed)."""
        self.pipeline.setVisible(False)
        self.filler.setVisible(True)
        self.message.setText(text)
        self.message.setVisible(True)

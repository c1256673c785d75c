"""Backward view: the dO choice, then dO -> dV -> dP -> D -> dS -> dQ, dK ... step by step."""

from __future__ import annotations

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QPushButton, QVBoxLayout, QWidget

from gui.present import view_model
from gui.state import backward_check
from gui.state import session as sm
from gui.views.pipeline_view import PipelineView
from gui.widgets import controls
from gui.widgets.spin_boxes import SpinBox

GRAD_LABELS = {"ones": "ones", "random": "random", "target": "one-hot target"}
TRAINING = "training"  # the choice offered only to an example opened from a training run
TRAINING_LABEL = "from the training step"


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
        self.kind = controls.combo(
            GRAD_LABELS,
            "dO, the gradient of the loss with respect to the output: ones (loss = sum(output)), "
            "random (seeded), a one-hot target (loss = sum(output * target), cell from the "
            "seed), or, for a layer opened from the Train tab, the training loss's own gradient",
        )
        self.seed = SpinBox(
            0, sm.MAX_SEED, "seed of the random dO, or of the one-hot target's cell", False
        )
        self.status = controls.label()  # a long progress text wraps: the row fits 1024 pixels
        self.status.setMinimumWidth(80)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        row = ("dO", self.kind, "seed", self.seed, (self.status, 1), self.cancel_button)
        outer.addLayout(controls.row(*row, margins=(4, 4, 4, 0)))
        self.about = controls.label(style="color: #114477;")  # what dO is, in words
        self.about.setContentsMargins(4, 0, 4, 0)
        outer.addWidget(self.about)
        # step 2: the refusal (too many tokens) or the steps themselves
        self.message = controls.label()
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
            self._offer_training(s.grad_given is not None)
            self.kind.setCurrentIndex(max(0, self.kind.findData(s.grad_output)))
            self.seed.setValue(s.grad_seed)
            self.seed.setEnabled(s.grad_output in ("random", "target"))
        finally:
            self._updating = False
        self.about.setText(backward_check.describe_grad_output(s))

    def _offer_training(self, offered: bool) -> None:
        """The 'from the training step' choice listed only when the session carries its dO."""
        index = self.kind.findData(TRAINING)
        if offered and index < 0:
            self.kind.addItem(TRAINING_LABEL, TRAINING)
        elif not offered and index >= 0:
            self.kind.removeItem(index)

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

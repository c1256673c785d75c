"""Opening a model head replaces the toy example: a banner says so and offers the way back."""

from __future__ import annotations

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QFrame, QPushButton, QVBoxLayout, QWidget

from gui.state import session as sm
from gui.widgets import controls

MODEL = "model:"  # the preset of a model head's session (gui.state.model_session)


def is_model_head(s: sm.Session) -> bool:
    """Whether `s` is a real model's head opened from the Model tab."""
    return s.preset.startswith(MODEL)


class ToyBanner(QFrame):
    """'The toy example was replaced by <model head>' and [Back to the toy example]; back
    carries the toy session exactly as it was (inputs, mask, step)."""

    back = pyqtSignal(object)  # gui.state.session.Session: the toy example to show again

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.toy: sm.Session | None = None  # the example the first model head replaced
        self.setStyleSheet("ToyBanner { background: #fff3cd; }")
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        self.label = controls.label()  # never widens the Inputs dock
        self.button = QPushButton("Back to the toy example")
        self.button.setToolTip("Show the example you had before, its inputs and mask unchanged")
        box.addWidget(self.label)
        box.addWidget(self.button)
        self.button.clicked.connect(self._back)
        self.setVisible(False)

    def replaced(self, before: sm.Session, head: sm.Session) -> None:
        """`head` (a model head) replaces `before`; a second head keeps the first toy example."""
        if self.toy is None and not is_model_head(before):
            self.toy = before
        if self.toy is None:
            return  # the window opened on a model head: no toy example to go back to
        toy = self.toy
        v = toy.variant  # the one mask, causal with its alignment (as main.py's --mask)
        mask = f"causal-{v.align}" if v.mask == "causal" else v.mask
        self.label.setText(
            f"The toy example ({toy.preset}, {toy.num_tokens} tokens, mask {mask}) was "
            f"replaced by {head.preset.removeprefix(MODEL).replace(':', ', ')}: its inputs "
            "and mask are the model's."
        )
        self.setVisible(True)

    def follow(self, s: sm.Session) -> None:
        """A session now shown: another example chosen (a preset, random, a file) ends the
        offer; an edit of the model head's numbers ('custom') keeps it."""
        if self.toy is not None and not is_model_head(s) and s.preset != "custom":
            self.forget()

    def forget(self) -> None:
        """No toy example to go back to: the banner goes."""
        self.toy = None
        self.setVisible(False)

    def _back(self) -> None:
        toy = self.toy
        self.forget()
        if toy is not None:
            self.back.emit(toy)

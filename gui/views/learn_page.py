"""A page of the Learn tab: the head inputs it shows, its worker, a status line, and the request
it last started (it computes again only when the example or one of its pickers changes)."""

from __future__ import annotations

from PyQt6.QtWidgets import QVBoxLayout, QWidget

from gui.present.learn_model import HeadInputs
from gui.widgets import controls
from gui.widgets.spin_boxes import SpinBox
from gui.work.jobs import Work, Worker


class LearnPage(QWidget):
    """The pages' common part; each says its request() and the work(*request) it starts."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.inputs: HeadInputs | None = None
        self._asked: tuple | None = None
        self.worker = Worker(self)  # its expected failures (too large, NumPy missing) are said
        self.outer = QVBoxLayout(self)
        self.outer.setContentsMargins(4, 4, 4, 4)
        self.status = controls.label()  # placed by the page
        self.worker.failed.connect(self.status.setText)

    def spin(self, tip: str) -> SpinBox:
        """A picker whose finished number starts the page's work again."""
        box = SpinBox(tip=tip, tracking=False)
        box.valueChanged.connect(lambda _: self.refresh())
        return box

    def set_inputs(self, inputs: HeadInputs) -> None:
        """A new example: the pickers fit it, then the page follows it."""
        self.fit_pickers(inputs)
        self.inputs = inputs
        self.refresh()

    def fit_pickers(self, inputs: HeadInputs) -> None:
        """Fit the pickers to a new example (self.inputs is still the last one, or None)."""

    def request(self) -> tuple:
        """What the page's work depends on: the example, and the pickers that change it."""
        return (self.inputs,)

    def refresh(self) -> None:
        """Start the work of the request on screen, unless it is the one started last."""
        ask = self.request()
        if self.inputs is None or ask == self._asked:
            return
        self._asked = ask
        self.worker.start(self.work(*ask))

    def work(self, *ask: object) -> Work:
        """The job that computes what the page shows for request `ask`."""
        raise NotImplementedError

"""The Learn tab: why each step exists, a mistakes gallery, FlashAttention's tiles.

Each page reads one head of the trace on screen (gui.present.learn_model.head_inputs) and computes
in its own worker, only while it is visible: a hidden page costs nothing. The pages are made on
the tab's first use (making all three took 0.3 s of every window's start).
"""

from __future__ import annotations

from PyQt6.QtWidgets import QTabWidget, QVBoxLayout, QWidget

from gui.present.learn_model import head_inputs
from gui.views.mistakes_view import MistakesView
from gui.views.tiles_view import TilesView
from gui.views.why_view import WhyView
from gui.widgets import controls
from gui.widgets.wheel_guard import guard_wheel

TITLES = ("Why, with your numbers", "Mistakes gallery", "FlashAttention's tiles")


class LearnTab(QWidget):
    """Why / Mistakes / Tiles, fed the trace on screen."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace = None
        self.head = 0  # the pipeline's head (0 while it shows all heads or their average)
        self.inputs = None  # HeadInputs of self.trace (made when a page first needs them)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.message = controls.label()
        self.message.setVisible(False)
        layout.addWidget(self.message)
        self._pages = QTabWidget()
        layout.addWidget(self._pages, 1)
        self._views: tuple[WhyView, MistakesView, TilesView] | None = None  # made on first use
        self._step: str | None = None  # the pipeline's step, for the Why page once it is made

    def _made(self) -> tuple[WhyView, MistakesView, TilesView]:
        """The three pages, made (and put in their tabs) the first time anything asks."""
        if self._views is None:
            self._views = (WhyView(), MistakesView(), TilesView())
            for view, title in zip(self._views, TITLES):
                self._pages.addTab(view, title)
            if self._step is not None:
                self._views[0].show_step(self._step)
            guard_wheel(self)  # made after the window guarded its boxes: guard these too
            self._pages.currentChanged.connect(lambda _: self.refresh())
        return self._views

    @property
    def pages(self) -> QTabWidget:
        """The pages' tabs: Why, Mistakes gallery, FlashAttention's tiles."""
        self._made()
        return self._pages

    @property
    def why(self) -> WhyView:
        """The Why page: each step's reason, with the numbers on screen."""
        return self._made()[0]

    @property
    def mistakes(self) -> MistakesView:
        """The Mistakes gallery: planted mistakes beside the right answer."""
        return self._made()[1]

    @property
    def tiles(self) -> TilesView:
        """FlashAttention's tiles: the online softmax, block by block."""
        return self._made()[2]

    def set_trace(self, trace: object) -> None:
        """A new trace on screen; the visible page follows it."""
        self.trace, self.inputs = trace, None
        self.refresh()

    def set_head(self, choice: str) -> None:
        """The pipeline's head choice: a head number is followed; 'all' / 'average' give 0."""
        head = int(choice) if choice.isdigit() else 0
        if head != self.head:
            self.head, self.inputs = head, None
            self.refresh()

    def show_step(self, step: str) -> None:
        """The pipeline's step: the Why page opens its reason (once the page is made)."""
        self._step = step
        if self._views is not None:
            self.why.show_step(step)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()

    def refresh(self) -> None:
        """Give the visible page the current head's inputs."""
        if self.trace is None or not self.isVisible():
            return
        if self.inputs is None:
            try:
                self.inputs = head_inputs(self.trace, self.head)
            except ValueError as exc:
                self.message.setText(str(exc))
                self.message.setVisible(True)
                self.pages.setVisible(False)  # not the last example's numbers, greyed
                return
        self.message.setVisible(False)
        self.pages.setVisible(True)
        self.pages.currentWidget().set_inputs(self.inputs)

    def wait(self) -> None:
        """Cancel and join every page's workers (closing the window): the checks of the
        mistakes stop between two kernels instead of running all seven."""
        if self._views is None:  # never made: no worker ever started
            return
        workers = (self.why.worker, self.mistakes.worker, self.mistakes.check_worker)
        for worker in (*workers, self.tiles.worker):
            worker.cancel()
            worker.wait()

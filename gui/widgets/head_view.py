"""Head view: lines from each token (left) to the tokens it attends to (right), width = weight;
a legend of the heads above, every token labelled in a scrolling column."""

from __future__ import annotations

import numpy as np
from PyQt6 import sip
from PyQt6.QtCore import QEvent, QObject, QTimer, pyqtSignal
from PyQt6.QtWidgets import QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from gui.present.head_lines import HeadLines
from gui.widgets.head_canvas import HeadCanvas
from gui.widgets.head_legend import HeadLegend

HINT = "hover a token (left: what it attends to; right: what attends to it)"


class HeadView(QWidget):
    """One layer's heads as lines between two columns of tokens; emits headsChanged(heads) when
    the legend turns heads on or off."""

    headsChanged = pyqtSignal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = HeadLines()
        self.legend = HeadLegend(self.state)
        self.canvas = HeadCanvas(self.state)
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.canvas)
        self.scroll.setWidgetResizable(True)  # the canvas takes the width; its height scrolls
        self.hint = QLabel(HINT)
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet("color: #114477; font-size: 8pt;")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.legend)
        layout.addWidget(self.hint)
        layout.addWidget(self.scroll, 1)
        # the legend, the hint and a few rows of lines (the scroll area shows the rest): at
        # 1024 x 700 the Model tab's wrapped note above takes three or four lines of the box
        self.setMinimumSize(260, 140)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.legend.changed.connect(self._legend_changed)
        self.scroll.viewport().installEventFilter(self)  # the rows share the height in view

    @property
    def tokens(self) -> list[str]:
        """The tokens on screen."""
        return self.state.tokens

    @property
    def weights(self) -> np.ndarray | None:
        """The layer's (heads, T, T) weights on screen."""
        return self.state.weights

    @property
    def heads(self) -> list[int]:
        """The heads drawn, ascending."""
        return list(self.state.on)

    @property
    def focus(self) -> int | None:
        """The token whose lines alone are drawn (hovered on either side, or pinned), if any."""
        focus = self.state.focus()
        return None if focus is None else focus[1]

    def set_layer(
        self, tokens: list[str], weights: np.ndarray, heads: list[int], focus: int | None = None
    ) -> None:
        """Show heads `heads` of one layer's (heads, T, T) weights; focus: only that query
        token's lines (a decoder's newest token), until the mouse moves over a token."""
        self.state.set_layer(tokens, weights, heads, focus)
        self.legend.refit()
        self.legend.update()
        self.canvas.refit()
        QTimer.singleShot(0, self._show_pinned)  # once the scroll area knows the new height

    def _show_pinned(self) -> None:
        """Scroll the pinned token (a decoder's newest) into view."""
        if sip.isdeleted(self) or sip.isdeleted(self.scroll):  # closed before the timer fired
            return
        if self.state.pinned is not None and self.state.pinned < len(self.state.tokens):
            y = int(self.canvas.token_y(self.state.pinned))
            self.scroll.ensureVisible(0, y, 0, int(self.canvas.step()))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.scroll.viewport() and event.type() == QEvent.Type.Resize:
            self.canvas.refit(event.size().height())
            QTimer.singleShot(0, self._show_pinned)
        return super().eventFilter(watched, event)

    def _legend_changed(self) -> None:
        self.canvas.update()
        self.headsChanged.emit(self.heads)

"""A label of a fixed number of lines: a longer text is cut with '…', the whole of it in the
tooltip, so a changing text (the hover explanation) never resizes what is above it."""

from __future__ import annotations

from PyQt6.QtCore import QRect, Qt
from PyQt6.QtWidgets import QLabel, QSizePolicy, QWidget

from gui.widgets import controls

ELLIPSIS = "…"


class FixedLines(QLabel):
    """Word-wrapped plain text in exactly `lines` lines of height; text() is the whole text."""

    def __init__(
        self, lines: int, point_size: int, mono: bool = False, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setFont(controls.font(point_size, mono))
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.lines = lines
        self.setFixedHeight(lines * self.fontMetrics().lineSpacing() + 4)
        self.full = ""

    def text(self) -> str:
        """The whole text, also when the label shows it cut."""
        return self.full

    def shown(self) -> str:
        """The text as drawn (cut with '…' when the whole would need more lines)."""
        return super().text()

    def setText(self, text: str) -> None:
        self.full = text
        self._fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fits(self, text: str) -> bool:
        width = max(1, self.contentsRect().width())
        flags = int(Qt.TextFlag.TextWordWrap)
        needed = self.fontMetrics().boundingRect(QRect(0, 0, width, 1 << 20), flags, text)
        return needed.height() <= self.contentsRect().height()

    def _fit(self) -> None:
        text = self.full
        if not self._fits(text):
            # the cut goes before the result: a long sum keeps its last ' = value' on screen
            at = text.rfind(" = ")
            tail = text[at:] if 0 < at and len(text) - at <= 40 and "\n" not in text[at:] else ""
            head = text[: len(text) - len(tail)]
            lo, hi = 0, len(head)  # the longest start of the text that fits with '…' and tail
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._fits(head[:mid].rstrip() + ELLIPSIS + tail):
                    lo = mid
                else:
                    hi = mid - 1
            text = head[:lo].rstrip() + ELLIPSIS + tail
        super().setText(text)
        self.setToolTip(self.full if text != self.full else "")

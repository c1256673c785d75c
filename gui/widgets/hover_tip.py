"""A tooltip that stays inside the window: a label on the window itself, moved within its edges.

Qt places its own tooltips on the screen beside the mouse; near the window's right edge a long
hover explanation ran past it (cut off in a window the size of its screen, or under Xvfb).
Shown as a child of the top-level window it cannot leave it: it is placed below and right of the
mouse, moved left or above where it would cross an edge, and wraps at MAX_WIDTH pixels."""

from __future__ import annotations

from PyQt6.QtCore import QPoint, Qt
from PyQt6.QtWidgets import QLabel, QWidget

MAX_WIDTH = 480  # pixels; a longer text wraps
OFFSET = 16  # pixels right of and below the mouse
MARGIN = 4  # pixels kept free at the window's edges


class HoverTip(QLabel):
    """The one tooltip label of a top-level window (made on first use)."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setStyleSheet(
            "background: #ffffe1; color: black; border: 1px solid #767676; padding: 3px;"
        )
        self.hide()

    @staticmethod
    def of(widget: QWidget) -> HoverTip:
        """The tooltip label of `widget`'s window."""
        window = widget.window()
        tip = window.findChild(HoverTip, options=Qt.FindChildOption.FindDirectChildrenOnly)
        return tip if tip is not None else HoverTip(window)

    def show_text(self, widget: QWidget, pos: QPoint, text: str) -> None:
        """Show `text` beside point `pos` of `widget`, wholly inside the window."""
        window = self.parentWidget()
        room = window.rect().adjusted(MARGIN, MARGIN, -MARGIN, -MARGIN)
        self.setText(text)
        self.setFixedWidth(min(MAX_WIDTH, room.width()))
        self.adjustSize()
        self.setFixedWidth(min(self.sizeHint().width(), room.width()))
        self.adjustSize()
        mouse = widget.mapTo(window, pos)
        x, y = mouse.x() + OFFSET, mouse.y() + OFFSET
        if x + self.width() > room.right():
            x = max(room.left(), room.right() - self.width())
        if y + self.height() > room.bottom():  # above the mouse, else as low as it fits
            above = mouse.y() - OFFSET - self.height()
            y = above if above >= room.top() else max(room.top(), room.bottom() - self.height())
        self.move(x, y)
        self.show()
        self.raise_()

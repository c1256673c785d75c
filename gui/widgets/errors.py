"""Last-resort error handling: log every unexpected exception, show it, keep the session alive."""

from __future__ import annotations

import logging
import sys
import traceback

log = logging.getLogger("gui")


class ErrorHandler:
    """A sys.excepthook that logs and shows a message box; tests record instead of showing."""

    def __init__(self, show_dialog: bool = True) -> None:
        self.show_dialog = show_dialog
        self.errors: list[str] = []
        self._previous = None

    def install(self) -> ErrorHandler:
        """Become sys.excepthook (PyQt6 then reports exceptions in slots here, not abort)."""
        self._previous = sys.excepthook
        sys.excepthook = self.handle
        return self

    def uninstall(self) -> None:
        """Restore the previous hook."""
        if self._previous is not None:
            sys.excepthook = self._previous
            self._previous = None

    def handle(self, exc_type, exc, tb) -> None:
        """Log, record, and (unless suppressed) show a non-blocking dialog."""
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        self.errors.append(text)
        log.error("unexpected error\n%s", text)
        if self.show_dialog:
            self._show(f"{exc_type.__name__}: {exc}", text)

    def _show(self, summary: str, detail: str) -> None:
        from PyQt6.QtWidgets import QApplication, QMessageBox

        if QApplication.instance() is None:
            return
        box = QMessageBox(
            QMessageBox.Icon.Critical,
            "Unexpected error",
            f"{summary}\n\nThe session is kept; the details are in the log.",
        )
        box.setDetailedText(detail)
        box.setModal(False)
        box.show()  # non-blocking: the window keeps working
        self._box = box

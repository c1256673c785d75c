"""Runs the controller in a worker thread and reports progress, results and failures."""

from __future__ import annotations

import traceback

from PyQt6.QtCore import QObject, pyqtSignal

from gui.state import controller, interrupt
from gui.state.session import Session
from gui.work.jobs import Worker

__all__ = ["TraceWorker"]


class TraceWorker(Worker):
    """Computes traces off the GUI thread; only the newest request's result is delivered."""

    started = pyqtSignal(object)  # Session
    QUIET = (controller.Cancelled,)

    def __init__(self, parent: QObject | None = None, compute=None) -> None:
        super().__init__(parent, threads=2)  # a cancelled job may still be finishing
        # compute(session, progress=, cancelled=) -> an outcome; None: controller.run
        self.compute = compute

    def submit(self, session: Session) -> int:
        """Start computing `session`; older jobs are superseded and queued ones skipped."""
        # queued older jobs stay queued: each ends at once, unrun, and releases its pause
        job = self.start(lambda report, stop: self._compute(session, report, stop))
        self.started.emit(session)  # before any of the job's signals: those are queued
        return job

    def _compute(self, session: Session, report, stop) -> object:
        compute = self.compute or controller.run  # looked up now: tests replace it
        try:
            return compute(session, progress=report, cancelled=stop)
        except controller.Cancelled:
            pass  # leaving this block frees the stopped computation's frames and lists ...
        interrupt.return_memory()  # ... and the allocator hands their pages back
        raise controller.Cancelled

    def describe(self, exc: Exception) -> str:
        """A computation's error in words; an unexpected one with its traceback (a thread must
        report, never die silently)."""
        if isinstance(exc, (ValueError, TypeError, KeyError, ArithmeticError)):
            return f"{type(exc).__name__}: {exc}"
        detail = "".join(traceback.format_exception(exc, limit=4))
        return f"unexpected {type(exc).__name__}: {exc}\n{detail}"

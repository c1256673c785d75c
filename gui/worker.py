"""Runs the controller in a worker thread and reports progress, results and failures."""

from __future__ import annotations

import traceback

from PyQt6.QtCore import QObject, QRunnable, QThreadPool, pyqtSignal

from gui import controller
from gui.session import Session


class _Signals(QObject):
    progress = pyqtSignal(int, int, int, str)  # job, done, total, what
    finished = pyqtSignal(int, object)  # job, Outcome
    failed = pyqtSignal(int, str)  # job, message


class _Job(QRunnable):
    def __init__(self, job: int, session: Session, signals: _Signals, worker: TraceWorker):
        super().__init__()
        self.job, self.session, self.signals, self.worker = job, session, signals, worker

    def run(self) -> None:
        stop = lambda: self.worker.current != self.job  # noqa: E731 - a newer job or Cancel
        if stop():
            return  # superseded while it waited in the queue: never start a stale computation
        try:
            report = lambda d, t, w: self.signals.progress.emit(self.job, d, t, w)  # noqa: E731
            outcome = controller.run(self.session, progress=report, cancelled=stop)
        except controller.Cancelled:
            return
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            self.signals.failed.emit(self.job, f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - a thread must report, never die silently
            detail = traceback.format_exc(limit=4)
            self.signals.failed.emit(self.job, f"unexpected {type(exc).__name__}: {exc}\n{detail}")
            return
        self.signals.finished.emit(self.job, outcome)


class TraceWorker(QObject):
    """Computes traces off the GUI thread; only the newest request's result is delivered."""

    started = pyqtSignal(object)  # Session
    progress = pyqtSignal(int, int, str)  # done, total, what
    finished = pyqtSignal(object)  # Outcome
    failed = pyqtSignal(str)
    cancelled = pyqtSignal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(2)  # a cancelled job may still be finishing
        self.current = 0
        self.busy = False
        self._signals = _Signals()
        self._signals.progress.connect(self._on_progress)
        self._signals.finished.connect(self._on_finished)
        self._signals.failed.connect(self._on_failed)

    def submit(self, session: Session) -> int:
        """Start computing `session`; older jobs are superseded and queued ones dropped."""
        self.current += 1
        self.busy = True
        self.pool.clear()  # jobs still waiting for a thread are stale now: never run them
        self.started.emit(session)
        self.pool.start(_Job(self.current, session, self._signals, self))
        return self.current

    def cancel(self) -> None:
        """Drop the running job's result (the thread stops at its next checkpoint)."""
        if self.busy:
            self.current += 1
            self.pool.clear()
            self.busy = False
            self.cancelled.emit()

    def wait(self, msecs: int = 60000) -> bool:
        """Block until the pool is idle (for the command line and tests)."""
        return self.pool.waitForDone(msecs)

    def _on_progress(self, job: int, done: int, total: int, what: str) -> None:
        if job == self.current:
            self.progress.emit(done, total, what)

    def _on_finished(self, job: int, outcome: object) -> None:
        if job == self.current:
            self.busy = False
            self.finished.emit(outcome)

    def _on_failed(self, job: int, message: str) -> None:
        if job == self.current:
            self.busy = False
            self.failed.emit(message)

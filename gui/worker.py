"""Runs the controller in a worker thread and reports progress, results and failures."""

from __future__ import annotations

import gc
import threading
import traceback

from PyQt6.QtCore import QObject, QRunnable, QThreadPool, pyqtSignal

from gui import controller
from gui.session import Session


class _CollectorPause(QObject):
    """Python's automatic garbage collection is off while any job is queued or running.

    A collection runs in whichever thread allocates when a threshold trips. In a worker thread it
    would destroy garbage Qt objects there (a closed window's widgets and menus) while the GUI
    thread paints, and Qt crashes. The GUI thread turns collection back on after the last job.
    """

    _resume = pyqtSignal()

    def __init__(self) -> None:
        super().__init__()  # made in the GUI thread: _resume is delivered there
        self._lock = threading.Lock()
        self._jobs = 0
        self._paused = False
        self._was_enabled = False
        self._resume.connect(self._on_resume)

    def hold(self) -> None:
        """A job is about to be queued (GUI thread)."""
        with self._lock:
            if not self._paused:
                self._paused, self._was_enabled = True, gc.isenabled()
                gc.disable()
            self._jobs += 1

    def release(self) -> None:
        """A job has ended (any thread); the last one hands collection back to the GUI thread."""
        with self._lock:
            self._jobs -= 1
            last = self._jobs == 0
        if last:
            self._resume.emit()

    def jobs(self) -> int:
        """Jobs queued or running in every TraceWorker."""
        with self._lock:
            return self._jobs

    def _on_resume(self) -> None:
        with self._lock:
            if self._jobs or not self._paused:
                return  # a new job started meanwhile: it resumes collection when it ends
            self._paused = False
            if self._was_enabled:
                gc.enable()


_pause: _CollectorPause | None = None


def collector_pause() -> _CollectorPause:
    """The one pause shared by every TraceWorker (made on first use, in the GUI thread)."""
    global _pause
    if _pause is None:
        _pause = _CollectorPause()
    return _pause


class _Signals(QObject):
    progress = pyqtSignal(int, int, int, str)  # job, done, total, what
    finished = pyqtSignal(int, object)  # job, Outcome
    failed = pyqtSignal(int, str)  # job, message


class _Job(QRunnable):
    def __init__(self, job: int, session: Session, signals: _Signals, worker: TraceWorker):
        super().__init__()
        self.job, self.session, self.signals, self.worker = job, session, signals, worker

    def run(self) -> None:
        try:
            self._run()
        finally:
            collector_pause().release()

    def _run(self) -> None:
        stop = lambda: self.worker.current != self.job  # noqa: E731 - a newer job or Cancel
        if stop():
            return  # superseded while it waited in the queue: never start a stale computation
        try:
            report = lambda d, t, w: self.signals.progress.emit(self.job, d, t, w)  # noqa: E731
            compute = self.worker.compute or controller.run  # looked up now: tests replace it
            outcome = compute(self.session, progress=report, cancelled=stop)
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

    def __init__(self, parent: QObject | None = None, compute=None) -> None:
        super().__init__(parent)
        # compute(session, progress=, cancelled=) -> an outcome; None: controller.run
        self.compute = compute
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(2)  # a cancelled job may still be finishing
        self._pause = collector_pause()
        self.current = 0
        self.busy = False
        self._signals = _Signals()
        self._signals.progress.connect(self._on_progress)
        self._signals.finished.connect(self._on_finished)
        self._signals.failed.connect(self._on_failed)

    def submit(self, session: Session) -> int:
        """Start computing `session`; older jobs are superseded and queued ones skipped."""
        self.current += 1
        self.busy = True
        self.started.emit(session)
        # queued older jobs stay queued: each ends at once, unrun, and releases its pause
        self._pause.hold()
        self.pool.start(_Job(self.current, session, self._signals, self))
        return self.current

    def cancel(self) -> None:
        """Drop the running job's result (the thread stops at its next checkpoint)."""
        if self.busy:
            self.current += 1
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

"""Work off the GUI thread: one worker base whose jobs pause Python's collector while they run,
and of whose requests only the newest reports its progress and result (TraceWorker, ModelWorker
and KernelCheckWorker are this base with their own work and messages; the Learn pages and the
model's block view use it as it is)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

from PyQt6.QtCore import QObject, QRunnable, QThreadPool, pyqtSignal

# work(progress, cancelled) -> result: progress(done, total, what) reports, cancelled() is True
# once a newer request (or a Cancel) has superseded this one
Work = Callable[[Callable[[int, int, str], None], Callable[[], bool]], object]
# failures a view says in words (an example too large, a row that sees no key, NumPy missing)
SAID = (ValueError, TypeError, ImportError)


class _CollectorPause(QObject):
    """Python's automatic garbage collection is off while any job is queued or running.

    A collection runs in whichever thread allocates when a threshold trips. In a worker thread it
    would destroy garbage Qt objects there (a closed window's widgets and menus) while the GUI
    thread paints, and Qt crashes. The GUI thread turns collection back on after the last job,
    unless the app owns collection (gui.work.collector: then it stays off and a GUI timer collects).
    """

    _resume = pyqtSignal()

    def __init__(self) -> None:
        super().__init__()  # made in the GUI thread: _resume is delivered there
        self._lock = threading.Lock()
        self._jobs = 0
        self._paused = False
        self._was_enabled = False
        self.app_owns = (
            False  # gui.work.collector: automatic collection stays off, whatever was before
        )
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

    def paused(self) -> bool:
        """True from a job's hold() until the GUI thread has handled the last release()."""
        with self._lock:
            return self._paused

    def jobs(self) -> int:
        """Jobs queued or running in every worker."""
        with self._lock:
            return self._jobs

    def _on_resume(self) -> None:
        with self._lock:
            if self._jobs or not self._paused:
                return  # a new job started meanwhile: it resumes collection when it ends
            self._paused = False
            if self._was_enabled and not self.app_owns:
                gc.enable()  # never while the app owns collection (gui.work.collector)


_pause: _CollectorPause | None = None


def collector_pause() -> _CollectorPause:
    """The one pause shared by every worker (made on first use, in the GUI thread)."""
    global _pause
    if _pause is None:
        _pause = _CollectorPause()
    return _pause


class _Signals(QObject):
    progress = pyqtSignal(int, int, int, str)  # job, done, total, what
    finished = pyqtSignal(int, object)  # job, result
    failed = pyqtSignal(int, str)  # job, message


class _Job(QRunnable):
    """One request: its work in a pool thread; the collector pause is released however it ends."""

    def __init__(self, job: int, work: Work, worker: Worker) -> None:
        super().__init__()
        self.job, self.work, self.worker, self.signals = job, work, worker, worker._signals

    def run(self) -> None:
        try:
            self._run()
        finally:
            collector_pause().release()  # garbage collection resumes in the GUI thread

    def _run(self) -> None:
        stale = lambda: self.worker.current != self.job  # noqa: E731 - a newer job or Cancel
        if stale():
            return  # superseded while it waited in the queue: never start a stale computation
        report = lambda d, t, w: self.signals.progress.emit(self.job, d, t, w)  # noqa: E731
        try:
            result = self.work(report, stale)
        except self.worker.QUIET:
            return
        except Exception as exc:
            message = self.worker.describe(exc)
            if message is None:
                raise  # not a failure this worker expects: a bug, left to propagate
            self.signals.failed.emit(self.job, message)
            return
        self.signals.finished.emit(self.job, result)


class Worker(QObject):
    """Runs work in a thread pool (the window never freezes); of the requests made, only the
    newest's progress, result or failure is delivered."""

    progress = pyqtSignal(int, int, str)  # done, total, what
    finished = pyqtSignal(object)  # the work's result
    failed = pyqtSignal(str)  # describe(exc)'s message
    cancelled = pyqtSignal()  # cancel() dropped the newest request
    QUIET: tuple[type[BaseException], ...] = ()  # exceptions that end a job without a word
    WAIT_MS = 60000  # wait()'s default

    def __init__(
        self,
        parent: QObject | None = None,
        threads: int = 1,
        said: tuple[type[Exception], ...] = SAID,
    ) -> None:
        super().__init__(parent)
        self.said = said  # the exceptions whose words describe() reports
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(threads)
        self.current = 0  # the newest request's number
        self.busy = False  # the newest request has not reported yet
        self._signals = _Signals()
        self._signals.progress.connect(self._on_progress)
        self._signals.finished.connect(self._on_finished)
        self._signals.failed.connect(self._on_failed)

    def describe(self, exc: Exception) -> str | None:
        """The message a job that raised `exc` reports (its words, for the exceptions in
        `said`); None: not expected, raised on."""
        return str(exc) if isinstance(exc, self.said) else None

    def start(self, work: Work) -> int:
        """Queue `work`; older requests are superseded (queued ones never start)."""
        self.current += 1
        self.busy = True
        collector_pause().hold()
        self.pool.start(_Job(self.current, work, self))
        return self.current

    def cancel(self) -> None:
        """Drop the running job's result (its stop() turns True: it ends at its next check)."""
        if self.busy:
            self.current += 1
            self.busy = False
            self.cancelled.emit()

    def wait(self, msecs: int | None = None) -> bool:
        """Block until the pool is idle (closing the window, the command line, tests)."""
        return self.pool.waitForDone(self.WAIT_MS if msecs is None else msecs)

    def _on_progress(self, job: int, done: int, total: int, what: str) -> None:
        if job == self.current:
            self.progress.emit(done, total, what)

    def _on_finished(self, job: int, result: object) -> None:
        if job == self.current:
            self.busy = False
            self.finished.emit(result)

    def _on_failed(self, job: int, message: str) -> None:
        if job == self.current:
            self.busy = False
            self.failed.emit(message)

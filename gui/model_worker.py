"""Loads a model and runs a text off the GUI thread; only the newest request's result arrives."""

from __future__ import annotations

from PyQt6.QtCore import QObject, QRunnable, QThreadPool, pyqtSignal

from gui import core_api
from gui.worker import collector_pause


class _Signals(QObject):
    finished = pyqtSignal(int, object)  # job, scratch.models.Run
    failed = pyqtSignal(int, str)  # job, message


class _Job(QRunnable):
    def __init__(self, job: int, path: str, text: str, signals: _Signals) -> None:
        super().__init__()
        self.job, self.path, self.text, self.signals = job, path, text, signals

    def run(self) -> None:
        try:
            model = core_api.load_model(None if self.path in ("", "default") else self.path)
            run = model.run(self.text)
        except ImportError as exc:
            self.signals.failed.emit(self.job, f"real models need {exc.name}: run make run")
        except (ValueError, TypeError, OSError, RuntimeError) as exc:
            self.signals.failed.emit(self.job, str(exc))
        else:
            self.signals.finished.emit(self.job, run)
        finally:
            collector_pause().release()  # garbage collection resumes in the GUI thread


class ModelWorker(QObject):
    """Runs models.load(path).run(text) in a pool thread (the window never freezes)."""

    finished = pyqtSignal(object)  # Run
    failed = pyqtSignal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(1)  # one model in memory at a time; requests queue
        self.current = 0
        self.busy = False
        self._signals = _Signals()
        self._signals.finished.connect(self._on_finished)
        self._signals.failed.connect(self._on_failed)

    def submit(self, path: str, text: str) -> int:
        """Load (once per directory) and run; an older pending result is dropped."""
        self.current += 1
        self.busy = True
        collector_pause().hold()
        self.pool.start(_Job(self.current, path, text, self._signals))
        return self.current

    def wait(self, msecs: int = 120000) -> bool:
        """Block until idle (command line and tests)."""
        return self.pool.waitForDone(msecs)

    def _on_finished(self, job: int, run: object) -> None:
        if job == self.current:
            self.busy = False
            self.finished.emit(run)

    def _on_failed(self, job: int, message: str) -> None:
        if job == self.current:
            self.busy = False
            self.failed.emit(message)

"""Loads a model and runs a text off the GUI thread; only the newest request's result arrives."""

from __future__ import annotations

from PyQt6.QtCore import QObject

from gui import core_api
from gui.jobs import Worker


class ModelWorker(Worker):
    """Runs models.load(path).run(text) in a pool thread (the window never freezes); finished
    carries a scratch.models.Run."""

    WAIT_MS = 120000

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent, threads=1)  # one model in memory at a time; requests queue

    def submit(self, path: str, text: str) -> int:
        """Load (once per directory) and run; an older pending result is dropped."""
        directory = None if path in ("", "default") else path
        return self.start(lambda report, stop: core_api.load_model(directory).run(text))

    def describe(self, exc: Exception) -> str | None:
        """What the user reads for a model or text that cannot run."""
        if isinstance(exc, ImportError):
            return f"real models need {exc.name}: run make run"
        if isinstance(exc, (ValueError, TypeError, OSError, RuntimeError)):
            return str(exc)
        return None

"""The Learn tab's worker: its explanations, walks and checks run off the GUI thread."""

from __future__ import annotations

from gui.jobs import Worker


class LearnWorker(Worker):
    """A Worker whose expected failures (an example too large, a row that sees no key, NumPy
    missing) reach the view as a message."""

    def describe(self, exc: Exception) -> str | None:
        """The message a view shows; None for a bug (raised on)."""
        if isinstance(exc, (ValueError, TypeError, ImportError)):
            return str(exc)
        return None

    def cancel(self) -> None:
        """Drop the running job's result; a job that checks stop() ends at its next check."""
        if self.busy:
            self.current += 1
            self.busy = False

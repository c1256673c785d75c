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

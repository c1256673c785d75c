"""Long work's progress and its stop: one Progress, given once, ticked where the work is done.

`models.load(path, progress=Progress(report, cancelled))` hands it over once; the loading code
reads it with `current()` (a context variable, so no inner signature carries it) and ticks it
between pieces: `tick("dequantize", done, total)`. A tick first asks `cancelled()`: once that is
True it raises Cancelled, so the work stops at its next piece and keeps nothing half-built (a
cache never stores a load that raised). Standard library only.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO


class Cancelled(Exception):
    """The work was cancelled (a Cancel button, Ctrl+C); what it was building is dropped."""


@dataclass(frozen=True)
class Progress:
    """report(stage, done, total) as each piece ends; cancelled() -> True stops the work.

    Attributes:
        report: called with (stage, done, total) after each piece; None: no report.
        cancelled: asked before each report; True raises Cancelled. None: never cancelled.
    """

    report: Callable[[str, int, int], None] | None = None
    cancelled: Callable[[], bool] | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        """One piece of `stage` is done: raise Cancelled if asked to stop, else report."""
        if self.cancelled is not None and self.cancelled():
            raise Cancelled(f"cancelled during {stage} ({percent(done, total)} done)")
        if self.report is not None:
            self.report(stage, done, total)


_current: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "scratch_progress", default=None
)
_NOTHING = Progress()  # reports nothing and is never cancelled


def current() -> Progress:
    """The Progress of the work running in this thread (one that does nothing when none)."""
    return _current.get() or _NOTHING


@contextlib.contextmanager
def reporting(progress: Progress | None) -> Iterator[Progress]:
    """Make `progress` current inside the block (None: keep the one already current).

    Args:
        progress: the Progress long work inside the block reports to, or None.

    Returns:
        A context manager that yields the Progress now current.
    """
    if progress is None:
        yield current()
        return
    if not isinstance(progress, Progress):
        raise TypeError(f"progress: expected a scratch.ops.progress.Progress, found {progress!r}")
    token = _current.set(progress)
    try:
        yield progress
    finally:
        _current.reset(token)


def percent(done: int, total: int) -> str:
    """done of total as a whole percentage, '100%' when total is 0 (nothing to do)."""
    return f"{100 * done // total if total else 100}%"


class Line:
    """A report that draws one progress line on a stream (stderr): redrawn in place with '\\r'
    on a terminal, else one line per stage when it ends (a log stays readable)."""

    WIDTH = 24  # characters of the bar

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown: tuple[str, str] | None = None  # (stage, percent) last drawn

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Draw `stage` at done of total, when its percentage changed."""
        now = (stage, percent(done, total))
        if now == self.shown:
            return
        self.shown = now
        end = done >= total
        if not self.tty:
            if end:
                self.stream.write(f"{stage}: done\n")
                self.stream.flush()
            return
        filled = self.WIDTH * done // total if total else self.WIDTH
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r{stage:<12} [{bar}] {now[1]:>4}" + ("\n" if end else ""))
        self.stream.flush()

    def interrupted(self) -> None:
        """End a half-drawn line (before a message that follows a cancel)."""
        if self.tty and self.shown is not None and not self.shown[1] == "100%":
            self.stream.write("\n")
            self.stream.flush()

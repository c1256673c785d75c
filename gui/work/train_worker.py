"""Trains the tiny transformer off the GUI thread, in pieces the window draws between.

One job runs Trainer.advance(piece) again and again and sends a copy of the record after each
piece (`pieceDone`); Pause ends the job after its piece (the Trainer is kept: Resume starts a
new job on it), Cancel ends it between two steps (scratch.ops.progress raises Cancelled there).
"""

from __future__ import annotations

import dataclasses
import threading
import time

from PyQt6.QtCore import QObject, QTimer, pyqtSignal

from gui.work.jobs import Worker
from scratch import Cancelled, Progress, reporting
from scratch.train import Run, Trainer

PAUSED = "paused"  # finished carries this when a Pause ended the job (else "done")
DONE = "done"


def frozen(run: Run) -> Run:
    """A copy of `run` whose lists the trainer no longer appends to (the snapshots themselves
    are never changed once kept, so they are shared)."""
    return dataclasses.replace(
        run,
        losses=list(run.losses),
        scored_losses=list(run.scored_losses),
        snapshots=list(run.snapshots),
        seconds=list(run.seconds),
    )


class _Pieces(QObject):
    piece = pyqtSignal()  # a newer piece waits in TrainWorker._latest


class TrainWorker(Worker):
    """One Trainer advanced in pieces; pieceDone(run) after each, finished(DONE or PAUSED).

    Pieces the window has not drawn yet are never queued up: the worker keeps only the newest
    one and signals once until the window takes it, so a window slower than training skips
    pieces instead of falling behind (Pause and Cancel act at once, not after a backlog). After
    a redraw the window rests at least as long as the redraw took (REST_MS at least) before it
    takes the next piece: a redraw posted the moment the last one ended left the GUI thread no
    idle time, and Qt's timers (a test's wait, the window's own) never fired."""

    REST_MS = 30

    pieceDone = pyqtSignal(object)  # a frozen Run: what the window draws
    QUIET = (Cancelled,)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent, threads=1)
        self.trainer: Trainer | None = None
        self.piece = 10  # steps between two redraws (the speed control)
        self._pause = threading.Event()
        self._lock = threading.Lock()
        self._latest: tuple[int, Run] | None = None  # (job, run): the newest undrawn piece
        self._armed = True  # the next piece signals at once (else the window is resting)
        self._pieces = _Pieces()
        self._pieces.piece.connect(self._on_piece)
        self._rest = QTimer(self)  # the window's rest after a redraw
        self._rest.setSingleShot(True)
        self._rest.timeout.connect(self._rested)

    def begin(self, trainer: Trainer) -> int:
        """Train `trainer` from where it is (a new run, or a paused one resumed)."""
        self.trainer = trainer
        self._pause.clear()
        job = self.current + 1  # the number start() gives this request
        return self.start(lambda report, stop: self._train(job, trainer, report, stop))

    def resume(self) -> int | None:
        """Go on with the paused trainer (None when there is none or it has finished)."""
        if self.trainer is None or self.trainer.finished or self.busy:
            return None
        return self.begin(self.trainer)

    def pause(self) -> None:
        """End the job after its current piece; the trainer waits for resume()."""
        self._pause.set()

    def _train(self, job: int, trainer: Trainer, report, stop) -> str:
        steps = trainer.config.steps
        with reporting(Progress(None, stop)):  # a Cancel raises Cancelled between two steps
            while not trainer.finished:
                trainer.advance(max(1, self.piece))
                self._deliver(job, frozen(trainer.run))
                report(trainer.run.steps_done, steps, "train")
                if self._pause.is_set():
                    return PAUSED
        return DONE

    def _deliver(self, job: int, run: Run) -> None:
        """Keep the newest piece (worker thread); signal only when the window is ready for it."""
        with self._lock:
            self._latest = (job, run)
            ready, self._armed = self._armed, False
        if ready:
            self._pieces.piece.emit()

    def _on_piece(self) -> None:
        """Draw the newest piece (GUI thread), then rest before taking another."""
        with self._lock:
            latest, self._latest = self._latest, None
        began = time.perf_counter()
        if latest is not None and latest[0] == self.current:
            self.pieceDone.emit(latest[1])
        took_ms = 1000 * (time.perf_counter() - began)
        self._rest.start(max(self.REST_MS, round(took_ms)))

    def _rested(self) -> None:
        """After the rest: draw a piece that came meanwhile, or signal the next one at once."""
        with self._lock:
            waiting = self._latest is not None
            self._armed = not waiting
        if waiting:
            self._on_piece()


__all__ = ["DONE", "PAUSED", "TrainWorker", "frozen"]

"""Trains the tiny transformer off the GUI thread, in pieces the window draws between.

One job runs Trainer.advance(piece) again and again and sends a copy of the record after each
piece (`pieceDone`); Pause ends the job after its piece (the Trainer is kept: Resume starts a
new job on it), Cancel ends it between two steps (scratch.ops.progress raises Cancelled there).
"""

from __future__ import annotations

import dataclasses
import threading

from PyQt6.QtCore import QObject, pyqtSignal

from gui.work.jobs import Worker
from scratch.ops.progress import Cancelled, Progress, reporting
from scratch.train.run import Run, Trainer

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
    piece = pyqtSignal(int, object)  # job, a frozen Run


class TrainWorker(Worker):
    """One Trainer advanced in pieces; pieceDone(run) after each, finished(DONE or PAUSED)."""

    pieceDone = pyqtSignal(object)  # a frozen Run: what the window draws
    QUIET = (Cancelled,)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent, threads=1)
        self.trainer: Trainer | None = None
        self.piece = 10  # steps between two redraws (the speed control)
        self._pause = threading.Event()
        self._pieces = _Pieces()
        self._pieces.piece.connect(self._on_piece)

    def begin(self, trainer: Trainer) -> int:
        """Train `trainer` from where it is (a new run, or a paused one resumed)."""
        self.trainer = trainer
        self._pause.clear()
        return self.start(lambda report, stop: self._train(trainer, report, stop))

    def resume(self) -> int | None:
        """Go on with the paused trainer (None when there is none or it has finished)."""
        if self.trainer is None or self.trainer.finished or self.busy:
            return None
        return self.begin(self.trainer)

    def pause(self) -> None:
        """End the job after its current piece; the trainer waits for resume()."""
        self._pause.set()

    def _train(self, trainer: Trainer, report, stop) -> str:
        job = self.current

        def tick(stage: str, done: int, total: int) -> None:
            report(done, total, stage)

        with reporting(Progress(tick, stop)):
            while not trainer.finished:
                trainer.advance(max(1, self.piece))
                self._pieces.piece.emit(job, frozen(trainer.run))
                if self._pause.is_set():
                    return PAUSED
        return DONE

    def _on_piece(self, job: int, run: Run) -> None:
        if job == self.current:
            self.pieceDone.emit(run)


__all__ = ["DONE", "PAUSED", "TrainWorker", "frozen"]

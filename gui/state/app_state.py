"""The window's state, without Qt: the session on screen, its undo history and the outcomes.

Widgets read it and render; an edit goes through it (checked as a session file would be, the
session it replaces kept for Edit > Undo). The outcomes are the newest forward trace computed
(maybe of earlier inputs, while the next one computes) and the newest backward pass.
"""

from __future__ import annotations

import dataclasses

from gui.state import cut_off, session_file
from gui.state import session as sm
from gui.state.edit_history import History
from gui.state.session import Session
from scratch import backends as scratch_backends

# a state of the undo history: the session and what shrinking it had cut off
Kept = tuple[Session, "cut_off.CutOff | None"]


def backend_dtypes() -> dict[str, tuple[str, ...]]:
    """{backend name: dtype names} for every entry of scratch.backends.available()."""
    return {n: tuple(scratch_backends.get(n).dtypes) for n in scratch_backends.available()}


def same_inputs(a: Session | None, b: Session) -> bool:
    """Whether two sessions have the same inputs and options (the step on screen aside)."""
    return a is not None and dataclasses.replace(a, step="") == dataclasses.replace(b, step="")


def same_forward(a: Session, b: Session) -> bool:
    """Whether two sessions differ at most in the dO choice (the forward trace is the same)."""
    dO = dict(grad_output=b.grad_output, grad_seed=b.grad_seed, grad_given=b.grad_given)
    return same_inputs(dataclasses.replace(a, **dO), b)


class AppState:
    """The session, what shrinking it cut off (for growing back), the undo history, and the
    newest forward and backward outcomes."""

    def __init__(self, session: Session, backends: dict[str, tuple[str, ...]] | None = None):
        if not isinstance(session, Session):
            raise TypeError(f"session: expected a gui.state.session.Session, found {type(session)}")
        self.session = session
        self.backends = backend_dtypes() if backends is None else backends
        self.cut: cut_off.CutOff | None = None
        # undo gives back exactly these objects: nothing is copied or rebuilt
        self.history: History[Kept] = History(lambda state: sm.cell_count(state[0]))
        self.outcome = None  # the newest controller.Outcome (maybe of earlier inputs)
        self.backward_outcome = None  # the newest controller.BackwardOutcome

    # ---------------------------------------------------------------- the session

    def edit(self, s: Session, tables: bool = True) -> bool:
        """Make the edited `s` the session once it would load from a file (SessionError, a
        ValueError, names the field; the session stays); whether it changed. Cell edits
        (tables=False) keep every shape and refuse non-finite numbers themselves, so they skip
        the whole-session check (about 0.1 s at the largest sizes)."""
        if tables:
            session_file.checked(s, self.backends)
        return self._replace(s)

    def load(self, s: Session) -> bool:
        """Another example (a file's, a model head's) becomes the session, nothing of it cut
        off; whether it changed (Edit > Undo goes back)."""
        changed = self._replace(s)
        self.cut = None
        return changed

    def _replace(self, s: Session) -> bool:
        """`s` becomes the session; the one it replaces can be gone back to."""
        if s is self.session or s == self.session:
            return False
        self.history.record((self.session, self.cut))
        self.session = s
        return True

    def undo(self) -> Session | None:
        """The inputs before the newest edit, now the session (None: nothing to undo)."""
        return self._restore(self.history.undo((self.session, self.cut)))

    def redo(self) -> Session | None:
        """The newest undone edit made again (None: nothing to redo)."""
        return self._restore(self.history.redo((self.session, self.cut)))

    def _restore(self, state: Kept | None) -> Session | None:
        if state is None:
            return None
        self.session, self.cut = state
        return self.session

    # ---------------------------------------------------------------- the outcomes

    def keeps_trace(self, s: Session, busy: bool) -> bool:
        """Whether the trace shown is already `s`'s (a new dO alone, nothing computing): then
        the outcome notes `s` and nothing is computed again."""
        shown = self.outcome
        if shown is None or busy or not same_forward(shown.session, s):
            return False
        self.outcome = dataclasses.replace(shown, session=s)
        return True

    def gradients_for(self, s: Session) -> object:
        """The BackwardOutcome of session `s` (the step shown aside), or None."""
        done = self.backward_outcome
        return done if done is not None and same_inputs(done.session, s) else None

    def backward_finished(self, outcome: object) -> bool:
        """Keep the newest backward pass; whether it is the shown trace's inputs'."""
        self.backward_outcome = outcome
        return self.outcome is not None and same_inputs(self.outcome.session, outcome.session)

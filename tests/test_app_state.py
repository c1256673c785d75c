"""The window's state without Qt: session, undo history, outcomes; edits go through it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gui.state import session as sm
from gui.state.app_state import AppState

ROOT = Path(__file__).resolve().parents[1]


def test_the_state_imports_no_qt():
    """gui.state.app_state and everything it imports load without PyQt6 or pyqtgraph."""
    code = (
        "import sys, gui.state.app_state\n"
        "qt = sorted(m for m in sys.modules if m.split('.')[0] in ('PyQt6', 'pyqtgraph'))\n"
        "print(qt)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"gui.state.app_state imports {done.stdout.strip()}"


@dataclasses.dataclass(frozen=True)
class Done:
    """An outcome as the controller makes one: the session it was computed for."""

    session: sm.Session


@pytest.mark.parametrize("seed", range(4))
def test_edits_undo_and_redo_give_back_the_exact_sessions(seed):
    first = sm.random_session(seed, 4, 4, 2, 2, 1)
    state = AppState(first)
    second = sm.reseeded(first, seed + 10)
    assert state.edit(second) and state.session is second
    assert not state.edit(second)  # the same session again: nothing recorded
    assert not state.edit(dataclasses.replace(second)) and state.session is second  # an equal one
    assert state.undo() is first and state.session is first
    assert state.undo() is None and state.session is first
    assert state.redo() is second and state.session is second
    assert state.redo() is None


def test_a_refused_edit_names_the_field_and_keeps_the_session():
    first = sm.random_session(0, 4, 4, 2, 2, 1)
    state = AppState(first)
    bad = dataclasses.replace(first, dtype="float8")
    with pytest.raises(ValueError, match="dtype"):
        state.edit(bad)
    assert state.session is first and not state.history.can_undo()
    with pytest.raises(TypeError, match="session: expected a gui.state.session.Session"):
        AppState("journey")


def test_a_new_do_keeps_the_trace_and_other_inputs_do_not():
    s = sm.random_session(1, 4, 4, 2, 2, 1)
    state = AppState(s)
    assert not state.keeps_trace(s, busy=False)  # nothing computed yet
    state.outcome = Done(s)
    new_do = sm.with_grad_output(s, "random", 3)
    assert state.keeps_trace(new_do, busy=False) and state.outcome.session is new_do
    assert not state.keeps_trace(sm.with_grad_output(s, "ones", 0), busy=True)
    assert not state.keeps_trace(sm.reseeded(s, 9), busy=False)


def test_the_backward_outcome_is_the_session_s_with_the_step_aside():
    s = sm.random_session(2, 4, 4, 2, 2, 1)
    state = AppState(s)
    state.outcome = Done(s)
    assert state.gradients_for(s) is None
    step = "scores" if s.step != "scores" else "weights"
    assert state.backward_finished(Done(dataclasses.replace(s, step=step)))
    assert state.gradients_for(s) is state.backward_outcome
    other = sm.reseeded(s, 5)
    assert not state.backward_finished(Done(other)) and state.gradients_for(s) is None

"""The window heads each step as the terminal does ('step 2: scores (5/9)'): the registry's
number and the step's place among the trace's steps, read back and compared with the trace."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("PyQt6")

from gui.state import session as sm  # noqa: E402
from scratch.__main__ import format_trace  # noqa: E402
from scratch.trace.steps import call_of, spec_for  # noqa: E402


@pytest.mark.parametrize("seed", [1, 4])
def test_the_window_and_the_terminal_number_the_steps_alike(open_window, seed):
    w = open_window(sm.random_session(seed, num_tokens=3))
    trace = w.outcome.trace
    names = trace.names()
    printed = [line.split("  (")[0] for line in format_trace(trace).splitlines()
               if line.startswith("step ")]  # fmt: skip
    shown = []
    for name in names:
        w.pipeline.set_step(name)
        shown.append(w.pipeline.step_label.text())
    assert shown == printed
    for k, (name, text) in enumerate(zip(names, shown), 1):
        n, said, place, total = re.fullmatch(r"step (\d+): (\w+) \((\d+)/(\d+)\)", text).groups()
        assert (said, int(place), int(total)) == (name, k, len(names))
        assert int(n) == spec_for(call_of(trace), name).number


@pytest.mark.parametrize("seed", [0, 3])
def test_the_backward_view_heads_its_weight_and_input_gradients(qtbot, open_window, seed):
    """Its steps leave out w_q, ...: the heading's call is read from the whole trace (a call
    read from the steps shown had no grad_w_q or grad_x, and heading them raised KeyError)."""
    w = open_window(sm.random_session(seed, 3, 4, 2, 2, 1))  # projected: w_q, w_k, w_v given
    w.tabs.setCurrentWidget(w.backward)
    qtbot.waitUntil(lambda: w.backward_outcome is not None, timeout=60_000)
    view = w.backward.pipeline
    names = view.names()
    assert {"grad_w_q", "grad_x"} <= set(names)
    for k, name in enumerate(names, 1):
        view.set_step(name)
        n, said, place, total = re.fullmatch(
            r"step (\d+): (\w+) \((\d+)/(\d+)\)", view.step_label.text()
        ).groups()
        assert (said, int(place), int(total)) == (name, k, len(names))
        assert int(n) == spec_for(call_of(view.trace), name).number

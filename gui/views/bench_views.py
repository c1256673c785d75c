"""The pipeline view at 4096 tokens, a bench goal: how long a step change and a hover take.

`python -m scratch.bench --plugin gui.app.bench_window --only views` measures these alone (the
goals are (goal, verdict, numbers) tuples, as scratch.bench.plugins.Goal). One
NumPy float32 trace of a random 4096-token session is shown in a PipelineView (offscreen,
VIEW_SIZE pixels). A step change is timed from `set_step` until the view has painted
(`repaint`, synchronous): the matrix pooled to a screen-sized image (gui.present.pooled), the source
panels beside it, the sentence. Every change opens a step not seen with this trace (the view's
panel cache is emptied first), so each is a first visit, the slow case. A hover is timed from
the mouse over a cell (`hover_cell`, seeded cells) until the view has painted: the cell's
explanation from its rows (scratch.explain), the sentence for its row, the source highlights.
"""

from __future__ import annotations

import dataclasses
import os
import random
import statistics
import time

WHAT = "the pipeline view at 4096 tokens: step change and hover"
TOKENS = 4096
GOAL_S = 0.3  # a step change and a hover answer within this (the median; the slowest shown)
VIEW_SIZE = (1400, 900)
STEPS = ("scores", "scaled", "masked", "weights", "output")  # the large ones, and one thin
ROUNDS = 3  # each step opened this many times, first visits all
HOVERS = 20
_app = None  # the QApplication measure() made or found


def measure(tokens: int = TOKENS, rounds: int = ROUNDS, hovers: int = HOVERS) -> dict:
    """Seconds of every step change and every hover, and the trace's own time."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PyQt6.QtWidgets import QApplication

    from gui.state import controller, truth_process
    from gui.state.session import random_session
    from gui.views.pipeline_view import PipelineView

    global _app
    _app = QApplication.instance() or QApplication([])
    session = random_session(0, num_tokens=tokens, num_heads=1)
    session = dataclasses.replace(session, backend="numpy", dtype="float32")
    try:
        outcome = controller.run(session)
    finally:
        truth_process.shutdown()
    view = PipelineView()
    view.resize(*VIEW_SIZE)
    view.show()
    view.set_trace(outcome.trace, outcome.reference)
    _painted(view)
    changes: list[float] = []
    for _ in range(rounds):
        for name in STEPS:
            view._panels.clear()  # a first visit every time
            start = time.perf_counter()
            view.set_step(name)
            _painted(view)
            changes.append(time.perf_counter() - start)
    rng = random.Random(0)
    hover_s: list[float] = []
    for n in range(hovers):
        if n % 5 == 0:
            view.set_step(STEPS[(n // 5) % len(STEPS)])
            _painted(view)
        rows, cols = view.heatmaps[0].panel.shape
        cell = rng.randrange(rows), rng.randrange(cols)
        start = time.perf_counter()
        view.hover_cell(*cell)
        _painted(view)
        hover_s.append(time.perf_counter() - start)
    view.close()
    view.deleteLater()
    return {"tokens": tokens, "changes": changes, "hovers": hover_s, "size": VIEW_SIZE}


def _painted(view) -> None:
    """Handle pending events, then paint the view now."""
    _app.processEvents()
    view.repaint()


def goal_lines(result: dict) -> list[tuple[str, str, str]]:
    """(goal, PASS/FAIL, numbers) for the step change and the hover, judged on the median."""
    lines = []
    for key, what in (("changes", "a step change"), ("hovers", "a hover")):
        times = result[key]
        median = statistics.median(times)
        lines.append(
            (
                f"{what} at {result['tokens']} tokens (numpy float32, pipeline view "
                f"{result['size'][0]}x{result['size'][1]}) answers within {GOAL_S:g} s",
                "PASS" if median <= GOAL_S else "FAIL",
                f"median {median:.3f} s over {len(times)}, slowest {max(times):.3f} s, fastest "
                f"{min(times):.3f} s; "
                + (
                    "each a first visit of one of " + ", ".join(STEPS) + " (the matrix pooled to "
                    "a screen-sized image), until painted"
                    if key == "changes"
                    else "seeded cells, the exact cell explained from its rows, until painted"
                ),
            )
        )
    return lines


def view_goals() -> list[tuple[str, str, str]]:
    """The view's two goals, measured, or why they were not (no PyQt6 here)."""
    try:
        import PyQt6.QtWidgets  # noqa: F401 - the window's toolkit, checked before measuring
    except ImportError as exc:
        return [(WHAT, "not measured", f"the window cannot start: {exc}")]
    return goal_lines(measure())

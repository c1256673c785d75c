"""Goals measured outside scratch (the app's window), loaded by name: `--plugin MODULE`.

A plugin is a module that defines BENCH_GOALS, a tuple of GoalSet; scratch never imports the app
(why a name on the command line and not an entry point: docs/notes/bench.md).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

Goal = tuple[str, str, str]  # (goal, PASS/FAIL/not measured/info, the measured numbers)


@dataclass(frozen=True)
class GoalSet:
    """A plugin's goals: `--only name` measures them alone; `what` names them in the output."""

    name: str
    what: str
    measure: Callable[[], list[Goal]]


def load(module: str) -> tuple[GoalSet, ...]:
    """The GoalSets of plugin `module` (its BENCH_GOALS); ValueError naming --plugin if none."""
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"--plugin {module}: cannot be imported ({exc})") from exc
    sets = getattr(found, "BENCH_GOALS", None)
    if not isinstance(sets, tuple) or not sets or not all(isinstance(s, GoalSet) for s in sets):
        raise ValueError(
            f"--plugin {module}: expected BENCH_GOALS, a non-empty tuple of "
            f"scratch.bench.plugins.GoalSet, found {type(sets).__name__}"
        )
    return sets


def goal_lines(sets: tuple[GoalSet, ...], full: bool, progress: bool = False) -> list[Goal]:
    """Each set's goals when `full`, else why they were not measured; a hint when none is loaded."""
    if not sets:
        return [
            (
                "goals from plugins, such as the window's recompute at 4096 tokens",
                "not measured",
                "none loaded: --plugin MODULE adds them, and `make bench` passes "
                "--plugin gui.app.bench_window",
            )
        ]
    out: list[Goal] = []
    for goal_set in sets:
        if not full:
            why = f"in a full run or with --only {goal_set.name}, not with --quick or --sizes"
            out.append((goal_set.what, "not measured", why))
            continue
        if progress:
            print(f"[bench] {goal_set.what}", file=sys.stderr, flush=True)
        out.extend(goal_set.measure())
    return out

"""gui.views.bench_views, the pipeline view's step change and hover in the bench: verdicts, a
run."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")

from gui.app import bench_window  # noqa: E402
from gui.views import bench_views  # noqa: E402


def _result(changes, hovers):
    return {"tokens": 4096, "changes": changes, "hovers": hovers, "size": (1400, 900)}


def test_the_goals_are_judged_on_the_median_and_show_the_slowest():
    good = bench_views.goal_lines(_result([0.1, 0.2, 0.9], [0.01, 0.3, 2.0]))
    bad = bench_views.goal_lines(_result([0.31, 0.31, 0.1], [0.4, 0.02, 0.5]))
    assert [g[1] for g in good] == ["PASS", "PASS"] and [g[1] for g in bad] == ["FAIL", "FAIL"]
    assert good[0][0].startswith("a step change at 4096 tokens (numpy float32, pipeline view")
    assert "median 0.200 s over 3, slowest 0.900 s" in good[0][2]
    assert "median 0.300 s over 3, slowest 2.000 s" in good[1][2]
    assert "views" in [s.name for s in bench_window.BENCH_GOALS]


def test_a_small_measurement_opens_every_step_and_hovers(qapp):
    result = bench_views.measure(tokens=40, rounds=1, hovers=6)
    assert len(result["changes"]) == len(bench_views.STEPS) and len(result["hovers"]) == 6
    assert all(t > 0 for t in result["changes"] + result["hovers"])

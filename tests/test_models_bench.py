"""The SmolLM2 bench plugin: its goal lines judged from given times (no timing here)."""

import pytest

from scratch.bench import plugins
from scratch.bench import smollm2_goal as goal
from scratch.bench.row import Row, pair_ratio


def rows(*times: list[float]) -> list[Row]:
    """Rows timed in the same rounds (as measure_alternating gives them)."""
    return [Row(128, "r", 0.0, len(t), None, "n/a", times=list(t), load=0.0) for t in times]


def line(name: str, goal_s: float, ours: list, theirs: list, extra: str):
    """_line for two rows timed in the same rounds."""
    return goal._line(name, goal_s, ours, theirs, extra, pair_ratio(*rows(ours, theirs)))


def test_the_plugin_is_loaded_by_name():
    (only,) = plugins.load("scratch.bench.smollm2_goal")
    assert only.name == "smollm2" and "transformers float64" in only.what


def test_a_goal_passes_only_within_its_seconds_and_not_slower_than_transformers():
    name, status, detail = line("g", 2.0, [1.0, 1.2, 1.1], [1.5, 1.1, 1.6], "; x")
    assert status == "PASS"
    assert "NumPy 1.100 s median, 1.000 s best of 3" in detail
    assert (
        "median of 3 alternating rounds 1.455x (range 0.92-1.50x; medians apart 1.364x)" in detail
    )
    assert detail.endswith("; x")
    assert line("g", 1.0, [1.1, 1.2, 1.1], [9.0, 9.0, 9.0], "")[1] == "FAIL"  # > 1 s
    assert line("g", 2.0, [1.1, 1.2, 1.1], [1.0, 1.0, 1.0], "")[1] == "FAIL"  # slower
    assert "0.50x median vs median" in goal._line("g", 9.0, [2.0, 2.0], [1.0], "")[2]


def test_rounds_timed_together_are_judged_by_their_per_round_ratios():
    # the host drifts: rounds 2 and 4 slow both sides; transformers had one lucky round
    ours, theirs = [0.50, 0.60, 0.70, 0.80], [0.51, 0.45, 0.71, 0.81]
    name, status, detail = line("g", 2.0, ours, theirs, "")
    assert status == "PASS"  # per round 1.02, 0.75, 1.014, 1.0125x: median 1.013x
    assert "median of 4 alternating rounds 1.013x" in detail
    assert "medians apart 0.938x" in detail  # 0.61 / 0.65 would have failed it
    # transformers faster in most rounds fails though its median alone is slower
    assert line("g", 2.0, [0.5, 0.5, 0.5, 0.9], [0.49, 0.49, 0.9, 0.89], "")[1] == "FAIL"


def test_the_noise_floor_line_compares_our_run_with_itself():
    name, status, detail = goal._noise(pair_ratio(*rows([0.5, 0.6, 0.4], [0.55, 0.6, 0.38])))
    assert name == goal.NOISE_NAME and status == "info"
    assert detail.startswith("median of 3 rounds 1.000x the time (range 0.95-1.10x)")


def test_the_run_text_is_128_tokens():
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from scratch import models

    try:
        smol = models.load("smollm2")
    except models.ModelError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")
    assert len(smol.tokenize(goal._text(smol))[1]) == goal.RUN_TOKENS == 128

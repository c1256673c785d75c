"""The SmolLM2 bench plugin: its goal lines judged from given times (no timing here)."""

import pytest

from scratch.bench import plugins
from scratch.bench import smollm2_goal as goal


def test_the_plugin_is_loaded_by_name():
    (only,) = plugins.load("scratch.bench.smollm2_goal")
    assert only.name == "smollm2" and "transformers float64" in only.what


def test_a_goal_passes_only_within_its_seconds_and_not_slower_than_transformers():
    name, status, detail = goal._line("g", 2.0, [1.0, 1.2, 1.1], [1.5, 1.1, 1.6], "; x")
    assert status == "PASS"
    assert "NumPy 1.100 s median, 1.000 s best of 3" in detail
    assert "median of 3 alternating rounds 1.45x (range 0.92-1.50x)" in detail
    assert detail.endswith("; x")
    assert goal._line("g", 1.0, [1.1, 1.2, 1.1], [9.0, 9.0, 9.0], "")[1] == "FAIL"  # > 1 s
    assert goal._line("g", 2.0, [1.1, 1.2, 1.1], [1.0, 1.0, 1.0], "")[1] == "FAIL"  # slower
    assert "0.50x median vs median" in goal._line("g", 9.0, [2.0, 2.0], [1.0], "")[2]


def test_the_run_text_is_128_tokens():
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from scratch import models

    try:
        smol = models.load("smollm2")
    except models.ModelError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")
    assert len(smol.tokenize(goal._text(smol))[1]) == goal.RUN_TOKENS == 128

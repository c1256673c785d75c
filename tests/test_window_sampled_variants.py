"""The window on a variant above the sampled check's threshold: the status bar and the Check
tab say pass or fail for a score change, learned sinks and RoPE (never "not checked")."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")

from gui.state import sampled_check  # noqa: E402
from tests.test_sampled_variants import FROM, ROWS, _names, _session, _softcap_twice  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.fixture(autouse=True)
def _low_threshold(monkeypatch):
    """Sampling from FROM tokens on (the rule is the same at 256)."""
    monkeypatch.setattr(sampled_check, "SAMPLE_FROM_TOKENS", FROM)


@pytest.mark.parametrize("planted", [False, True])
def test_the_window_says_pass_or_fail_for_a_score_change(open_window, monkeypatch, planted):
    """Status bar and Check tab: every step passes for softcap + RoPE + sinks with a window
    above the threshold; with the softcap applied twice, CHECK FAILED naming the step."""
    if planted:
        _softcap_twice(monkeypatch)
    w = open_window(_session(0, "numpy", "window-all"))
    label, header = w.backend_label.text(), w.checks.header.text()
    assert [c.name for c in w.outcome.checks] == _names("window-all")
    assert w.checks.table.rowCount() == len(_names("window-all"))
    if planted:
        assert "CHECK FAILED" in label and f"scaled ({ROWS} sampled rows)" in header, header
    else:
        assert "all steps pass" in label and "every step within its bound" in header, header
    assert "not checked" not in label and "Sampled check" in header

"""Long inputs with a variant: the slow-input question offers NumPy, which computes the variant,
and the question stays on screen until it is answered (issue 33, item 4)."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")

from gui.state import sampled_check, variant_session  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.state.session import SessionError  # noqa: E402
from gui.views import slow_warning  # noqa: E402
from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui

TOKENS = sampled_check.SAMPLE_FROM_TOKENS + 44  # long enough for the sampled check's path


def _window_variant(w) -> None:
    """Mask 'sliding window' (2, 0) in the Variant picker, as a user picks it."""
    panel = w.inputs.variant
    panel.mask.setCurrentIndex(panel.mask.findData("window"))
    panel.texts["left"].setText("2")
    panel.texts["right"].setText("0")
    panel.edited.emit(panel.fields())


def _asked(w, monkeypatch, settle) -> None:
    """journey on scratch with a sliding window, then TOKENS tokens: the question is asked
    (the threshold lowered, so pure Python never has to be slow for the test)."""
    _window_variant(w)
    settle(w)
    monkeypatch.setattr(slow_warning, "WARN_S", 0.0)  # every scratch computation is "long"
    w.inputs.apply_edit(lambda s: sm.resized(s, num_tokens=TOKENS))
    assert w.slow.isVisible() and "see the question" in w.pipeline.stale.text()


def test_use_numpy_computes_the_window_variant_at_long_inputs(open_window, settle, monkeypatch):
    w = open_window(journey_preset())
    _asked(w, monkeypatch, settle)
    assert w.slow.numpy_button.isVisible() and w.slow.anyway_button.isVisible()
    w.slow.numpy_button.click()
    settle(w)
    s = w.inputs.session
    assert (s.backend, s.num_tokens, s.variant.mask) == ("numpy", TOKENS, "window")
    assert w.outcome.backend == "numpy" and w.slow.isHidden() and w.pipeline.stale.isHidden()
    # the trace is the variant's: query i sees keys i - 2 .. i exactly
    allowed = w.outcome.trace.allowed
    for i in (0, 1, 150, TOKENS - 1):
        assert [j for j in range(TOKENS) if allowed[i][j]] == list(range(max(0, i - 2), i + 1))
    # the sampled check ran on the variant's mask, and passed
    assert w.outcome.checks and all(c.ok for c in w.outcome.checks), w.outcome.checks
    assert "query rows checked" in w.outcome.sampled and "all steps pass" in w.backend_label.text()


def test_the_question_stays_until_answered(open_window, settle, monkeypatch):
    """A refused Use NumPy leaves the question (both buttons) on screen; a session NumPy would
    refuse is never offered NumPy."""
    w = open_window(journey_preset())
    _asked(w, monkeypatch, settle)
    asked = w.inputs.session

    def refused(s, backend, dtypes):
        raise SessionError("backend: refused by the test")

    monkeypatch.setattr(sm, "with_backend", refused)
    w.slow.numpy_button.click()
    assert w.inputs.session is asked and "refused" in w.statusBar().currentMessage()
    assert w.slow.isVisible() and w.slow.numpy_button.isVisible()
    assert w.slow.anyway_button.isVisible() and "see the question" in w.pipeline.stale.text()
    monkeypatch.undo()
    # a session NumPy would refuse: the question offers scratch only, and says why on hover
    monkeypatch.setattr(slow_warning, "WARN_S", 0.0)
    real = variant_session.checked

    def no_numpy(s):
        if s.backend == "numpy":
            raise SessionError("variant: refused on numpy by the test")
        real(s)

    monkeypatch.setattr(variant_session, "checked", no_numpy)
    w.slow.confirmed = None
    w.inputs.apply_edit(sm.reseeded, 3)
    assert w.slow.isVisible() and w.slow.numpy_button.isHidden()
    assert "refused on numpy" in w.slow.numpy_button.toolTip()
    assert w.slow.anyway_button.isVisible()

"""The Model tab while a model loads (a progress bar with the stage, Cancel keeps what was on
screen), Generate keeping the keyboard focus, and the banner that says a model head replaced
the toy example and brings it back exactly. A tiny GGUF Llama written here (loads in ms)."""

import threading

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from PyQt6.QtWidgets import QApplication  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.state.model_session import head_session  # noqa: E402
from gui.work.model_worker import frame  # noqa: E402
from scratch import models  # noqa: E402
from scratch.models import decoding  # noqa: E402
from scratch.ops import progress  # noqa: E402
from tests.journey_sessions import with_mask
from tests.test_models_gguf import metadata, weights, write  # noqa: E402

pytestmark = pytest.mark.gui
HOLD_S = 20  # the held dequantizer waits at most this long (the test releases it at once)


@pytest.fixture
def window(open_window):
    """A small random example with a causal mask: the toy example a model head replaces."""
    toy = with_mask(sm.random_session(3, 4, 4, 2, 2, 1), "causal-top-left")
    return open_window(toy)


@pytest.fixture
def tiny(tmp_path):
    """A tiny Llama's GGUF file and its prompt's frame (as the Model tab's worker builds it)."""
    path = write(tmp_path / "tiny.gguf", metadata(), weights(0))
    return path, frame(decoding.start(models.load(path), "ab ab"))


def test_a_load_shows_its_stage_and_cancel_keeps_the_last_run(
    qtbot, window, tiny, tmp_path, monkeypatch
):
    from scratch.models import dequantize

    panel = window.model
    window.tabs.setCurrentWidget(panel)
    _, shown = tiny
    panel.show_frame(shown)
    other = write(tmp_path / "other.gguf", metadata(), weights(1))  # not read yet
    entered, release, widen = threading.Event(), threading.Event(), dequantize.to_float64

    def held(*args):  # the first tensor waits until the test has pressed Cancel
        entered.set()
        release.wait(HOLD_S)
        widen(*args)

    monkeypatch.setattr(dequantize, "to_float64", held)
    delivered = []
    panel.worker.finished.connect(delivered.append)
    panel.worker.failed.connect(delivered.append)
    try:
        held_load(qtbot, panel, other, entered, release)
    finally:
        release.set()  # never leave the worker waiting, whatever failed
    assert panel.worker.wait(HOLD_S * 1000)  # joined: the load stopped at its next tensor
    QApplication.processEvents()  # any signal it sent is delivered now
    assert delivered == []  # neither a result nor an error after Cancel
    assert not panel.busy.isVisible() and panel.run_button.isEnabled()
    assert panel.generate_bar.button.isEnabled()
    assert "cancelled" in panel.status.text() and "last run stays" in panel.status.text()
    assert panel.frame is shown  # the decoder on screen is the one before
    seen = []  # nothing half-read was cached: the next load reads the file again
    models.load(other, progress=progress.Progress(lambda stage, *_: seen.append(stage)))
    assert "dequantize" in seen


def held_load(qtbot, panel, other, entered, release) -> None:
    """Run `other` while its first tensor is held: the bar shows the stage; Cancel it."""
    panel.model_path.setText(str(other))
    panel.run_button.click()
    assert panel.busy.isVisible() and not panel.run_button.isEnabled()
    qtbot.waitUntil(lambda: panel.progress.format().startswith("dequantize"), timeout=HOLD_S * 1000)
    assert entered.wait(HOLD_S)
    assert panel.progress.maximum() == 1000 and 0 <= panel.progress.value() < 1000
    assert "dequantize" in panel.status.text()
    with qtbot.waitSignal(panel.worker.cancelled, timeout=60_000):
        panel.cancel_button.click()


def test_generate_keeps_the_focus_on_its_button(qtbot, window, tiny):
    panel = window.model
    window.tabs.setCurrentWidget(panel)
    panel.show_frame(tiny[1])
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    button = panel.generate_bar.button
    button.setFocus()
    qtbot.waitUntil(button.hasFocus)
    with qtbot.waitSignal(panel.worker.finished, timeout=60_000):
        button.click()
        assert not panel.generate_bar.temperature.hasFocus()  # while the token is computed
    assert len(panel.frame.decoding.ids) == 1
    assert button.isEnabled() and button.hasFocus()
    assert panel.generate_bar.temperature.lineEdit().selectedText() == ""


def test_a_model_head_replaces_the_toy_example_and_the_banner_brings_it_back(
    qtbot, window, tiny, settle
):
    toy = window.inputs.session
    banner = window.toy_banner
    assert not banner.isVisible()
    run = tiny[1].decoding.prompt.model.run("ab ab")
    first, second = head_session(run, 0, 1), head_session(run, 1, 3)
    window.model.sessionChosen.emit(first)
    settle(window)
    assert window.inputs.session == first and banner.isVisible()
    said = banner.label.text()
    assert "toy example" in said and "replaced by tiny, layer 0, head 1" in said
    assert "causal-top-left" in said  # the toy's mask, named
    window.model.sessionChosen.emit(second)  # a second head: the way back is still the toy's
    settle(window)
    assert window.inputs.session == second and banner.toy == toy
    banner.button.click()
    settle(window)
    assert window.inputs.session == toy  # inputs, mask, step: every field as it was
    assert window.outcome.session == toy and not banner.isVisible()


def test_choosing_another_example_ends_the_way_back(qtbot, window, tiny, settle):
    run = tiny[1].decoding.prompt.model.run("ab")
    window.model.sessionChosen.emit(head_session(run, 0, 0))
    settle(window)
    assert window.toy_banner.isVisible()
    window.inputs.apply_edit(sm.with_preset, "random")
    assert not window.toy_banner.isVisible() and window.toy_banner.toy is None

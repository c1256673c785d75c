"""The inputs panel: new sizes draw a random example again, presets show titles and notes."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from gui.state import session as sm  # noqa: E402
from scratch.learn import presets  # noqa: E402
from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui


def test_changing_sizes_of_a_random_example_draws_it_again(qtbot, errors, settle, open_window):
    w = open_window(sm.random_session(0, 6, 8, 4, 4, 1))
    w.inputs.num_tokens.setValue(64)
    settle(w)
    s = w.inputs.session
    assert s.preset == "random" and w.inputs.preset.currentData() == "random"
    assert all(any(row) for row in s.query) and len(s.query) == 64
    assert w.outcome.trace["x"].shape == (64, 8)
    w.inputs.heads.setValue(16)
    w.inputs.d_k.setValue(sm.MAX_DIM // 8)
    message = f"heads x d_k = {2 * sm.MAX_DIM} exceeds {sm.MAX_DIM}"
    assert message in w.statusBar().currentMessage()
    assert w.inputs.d_k.value() == 4 and w.inputs.session.d_k == 4  # the work is kept


def test_presets_show_titles_and_the_notebook_notes(qtbot, errors, settle, open_window):
    w = open_window(journey_preset())
    box = w.inputs.preset
    for name in presets.names():
        i = box.findData(name)
        assert box.itemText(i) == str(presets.get(name).title) != name
    i = box.findData("seed001-example2b")
    box.setCurrentIndex(i)
    box.activated.emit(i)
    settle(w)
    notes = w.inputs.preset_notes
    assert notes.isVisible()
    preset = presets.get("seed001-example2b")
    said = [str(n) for n in preset.notes] + preset.slip_notes()  # the notes, then the slips'
    for note in said:
        assert re.sub(r"\s+", " ", note)[:40] in notes.text().replace("&#x27;", "'")
    assert any(n.startswith("Slip") for n in said)
    w.load_session(sm.random_session(0))
    assert not notes.isVisible()

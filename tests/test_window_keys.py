"""Keyboard: the arrow, Home and End keys step through the pipeline, except inside an editor."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import Qt  # noqa: E402

from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui


def test_arrow_keys_step_anywhere_but_in_an_editor(qtbot, errors, open_window):
    w = open_window(journey_preset(step="weights"))
    p = w.pipeline
    start = p.slider.value()
    w.tabs.setFocus()
    qtbot.keyClick(w.tabs, Qt.Key.Key_Left)
    assert p.slider.value() == start - 1
    qtbot.keyClick(w.tabs, Qt.Key.Key_End)
    assert p.slider.value() == p.slider.maximum()
    qtbot.keyClick(w.tabs, Qt.Key.Key_Home)
    assert p.slider.value() == 0
    editor = w.inputs.tokens
    editor.setFocus()
    editor.setCursorPosition(3)
    qtbot.keyClick(editor, Qt.Key.Key_Right)
    qtbot.keyClick(editor, Qt.Key.Key_End)
    assert p.slider.value() == 0 and editor.cursorPosition() == len(editor.text())
    spin = w.inputs.num_tokens
    spin.setFocus()
    qtbot.keyClick(spin, Qt.Key.Key_Home)
    qtbot.keyClick(spin, Qt.Key.Key_Right)
    assert p.slider.value() == 0 and spin.value() == 6
    table = w.inputs.tables["query"]
    table.setFocus()
    table.setCurrentIndex(table.model().index(0, 0))
    qtbot.keyClick(table, Qt.Key.Key_Right)
    assert p.slider.value() == 0 and table.currentIndex().column() == 1

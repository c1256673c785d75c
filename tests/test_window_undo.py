"""Edit > Undo (Ctrl+Z) and Redo (Ctrl+Shift+Z) of every input edit, values exact; shrinking L
and growing it back gives the dropped token and its row back (issue 33)."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import Qt  # noqa: E402
from PyQt6.QtTest import QTest  # noqa: E402

from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui
CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


def shown(i) -> tuple:
    """What the inputs panel shows: every box this test edits, and the x table's values."""
    return (
        i.tokens.text(),
        i.num_tokens.value(),
        i.d_model.value(),
        i.scale_mode.currentData(),
        i.scale_value.value(),
        i.masked_rows.currentData(),
        i.variant.fields(),
        [list(row) for row in i.tables["query"].matrix_model.values],
        i.mask_grid.grid,
    )


def _choose(box, key: str) -> None:
    box.setCurrentIndex(box.findData(key))
    box.activated.emit(box.currentIndex())


def _tokens(i):
    i.tokens.setText("A, journey, starts, with, one, step")
    i.tokens.editingFinished.emit()
    return i.tokens  # the box the user typed in keeps the focus


def _cell(i):
    model = i.tables["query"].matrix_model
    model.setData(model.index(2, 1), "0.125")
    return i.tables["query"]


def _value(box, value):
    box.setValue(value)
    return box


def _variant(i):
    _choose(i.variant.mask, "causal")
    return i.variant.mask


def _softcap(i):
    i.variant.softcap_on.click()
    return i.variant.softcap_on


EDITS = {  # each: make the edit as the user does, return the widget that has the focus
    "token text": _tokens,
    "matrix cell": _cell,
    "L": lambda i: _value(i.num_tokens, 4),
    "d": lambda i: _value(i.d_model, 5),
    "scale": lambda i: (_choose(i.scale_mode, "custom"), i.scale_mode)[1],
    "scale value": lambda i: _value(i.scale_value, 0.375),
    "alignment": lambda i: (_choose(i.variant.align, "top-left"), i.variant.align)[1],
    "drawn mask": lambda i: (_choose(i.variant.mask, "drawn"), i.variant.mask)[1],
    "masked rows": lambda i: (_choose(i.masked_rows, "nan"), i.masked_rows)[1],
    "variant mask": _variant,
    "softcap": _softcap,
    "mask cell": lambda i: (i.mask_grid.toggled.emit(0, 1), i.mask_grid)[1],
}


def test_ctrl_z_undoes_every_kind_of_input_edit_exactly_and_ctrl_shift_z_redoes_it(
    settle, open_window
):
    w = open_window(journey_preset())
    i = w.inputs
    assert not w.undo_action.isEnabled()
    for kind, edit in EDITS.items():
        before, before_shown = i.session, shown(i)
        focus = edit(i)
        settle(w)
        after, after_shown = i.session, shown(i)
        assert after != before and after_shown != before_shown, kind
        w.activateWindow()
        focus.setFocus()
        QTest.keyClick(focus, Qt.Key.Key_Z, CTRL)
        settle(w)
        assert i.session is before and shown(i) == before_shown, kind
        assert w.outcome.session.query == before.query, kind  # computed again
        QTest.keyClick(focus, Qt.Key.Key_Z, CTRL | SHIFT)
        settle(w)
        assert i.session is after and shown(i) == after_shown, kind
    # and back through all of them to the start
    while w.undo_action.isEnabled():
        w.undo_action.trigger()
    settle(w)
    assert i.session == journey_preset()


def test_shrinking_l_and_growing_it_back_gives_the_token_and_its_row_back(settle, open_window):
    w = open_window(journey_preset())
    i, start = w.inputs, w.inputs.session
    assert start.tokens[-1] == "step"
    i.num_tokens.setValue(5)
    settle(w)
    assert i.session.tokens[-1] == "one"
    i.num_tokens.setValue(6)
    settle(w)
    s = i.session
    assert (s.tokens, s.key_tokens, s.query) == (start.tokens, start.key_tokens, start.query)
    assert i.tokens.text().endswith("one, step")
    assert i.tables["query"].matrix_model.values[5] == list(start.query[5])
    assert w.outcome.trace["x"].tolist()[5] == list(start.query[5])  # computed with the row

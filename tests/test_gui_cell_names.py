"""A refused cell is named as its table's tab is titled ('X (q = k = v)[0][1]'), whichever check
refuses it: the table's own (not a number, inf) or the session's (out of range)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("PyQt6")

from gui.state import session as sm  # noqa: E402
from gui.state.input_modes import with_mode  # noqa: E402
from gui.views.inputs_panel import TABLE_TITLES  # noqa: E402


@pytest.mark.parametrize("mode", ["self", "qkv", "project"])
def test_a_refused_cell_is_named_by_its_tabs_title(open_window, mode):
    s = with_mode(sm.random_session(2), mode)
    w = open_window(s)
    rng = random.Random(mode)
    tabs = {w.inputs.tabs.tabText(t) for t in range(w.inputs.tabs.count())}
    for name in s.matrices_in_use():
        title = TABLE_TITLES[mode][name]
        assert title in tabs, (title, tabs)
        model = w.inputs.tables[name].matrix_model
        i, j = rng.randrange(len(model.values)), rng.randrange(len(model.values[0]))
        for bad in ("inf", "abc", "1e60"):  # the table refuses the first two, the session 1e60
            accepted = model.setData(model.index(i, j), bad)
            assert accepted == (bad == "1e60")  # the table takes 1e60; the session refuses it
            said = w.statusBar().currentMessage()
            assert f"{title}[{i}][{j}]" in said and f" {name}[" not in said, said

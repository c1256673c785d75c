"""A 13-token head at 1024x700: every cell of scores, weights and grad_weights carries a number,
in the compact form ('-.51') where the full one ('-0.51') is wider than the cell."""

import dataclasses

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from gui.present import numbers  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.widgets.heatmap import Heatmap  # noqa: E402
from tests.test_window_sizes import word_session  # noqa: E402

MINILM = "model:all-MiniLM-L6-v2:layer 0:head 3"

pytestmark = pytest.mark.gui
TOKENS = 13


def largest_map(view) -> Heatmap:
    """The step's own heatmap: the largest one shown (the inputs' panels are smaller)."""
    shown = [h for h in view.findChildren(Heatmap) if h.isVisible() and h.panel is not None]
    return max(shown, key=lambda h: h.width() * h.height())


def assert_every_cell_numbered(hm: Heatmap, name: str) -> None:
    """All 13 x 13 numbers drawn, at 6 points or more, none wider than its cell."""
    rows, cols = hm.panel.raw.shape
    assert (rows, cols) == (TOKENS, TOKENS), name
    drawn = hm._texts
    assert hm.numbers.point_size >= 6 and len(drawn) == rows * cols, (name, len(drawn))
    cell = hm.image_item.sceneBoundingRect().width() / cols
    for item in drawn:
        width = item.sceneBoundingRect().width()
        assert item.isVisible() and width <= cell, (name, item.text(), width, cell)


def test_a_13_token_head_at_1024x700_has_numbers_in_every_cell(open_window, qtbot):
    # a MiniLM head's shape: its words, d_model 384 + 1 (the bias column), d_k = d_v = 32
    head = sm.random_session(3, TOKENS, 385, 32, 32, 1)
    words = word_session(TOKENS).tokens
    head = dataclasses.replace(head, tokens=words, key_tokens=words, preset=MINILM)
    window = open_window(head, size=(1024, 700))
    for name in ("scores", "weights"):
        window.pipeline.set_step(name)
        hm = largest_map(window.pipeline)
        qtbot.waitUntil(lambda hm=hm, name=name: assert_every_cell_numbered(hm, name))
    window.tabs.setCurrentWidget(window.backward)
    qtbot.waitUntil(lambda: window.backward_outcome is not None, timeout=60_000)
    window.backward.pipeline.set_step("grad_weights")
    hm = largest_map(window.backward.pipeline)
    qtbot.waitUntil(lambda: assert_every_cell_numbered(hm, "grad_weights"))
    # "-0.51" is about 21 px at 6 pt; grad_weights' cells are about 17 px when the window is
    # fresh, so only the compact form fits (after other tests the tab's layout may leave the
    # cells wider: then the full form is right, and the check above is what matters)
    cell = hm.image_item.sceneBoundingRect().width() / TOKENS
    assert hm.numbers.format is numbers.compact or cell >= 21, cell

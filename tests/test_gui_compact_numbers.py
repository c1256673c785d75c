"""A 13-token head at 1024x700: every cell of scores, weights and grad_weights carries a number;
the compact form ('-.51') is drawn where the full one ('-0.51') is wider than the cell, and only
there. Widths are measured in screen pixels with the font each number is drawn in, and the
cells at a width chosen from that font's own metrics, so the checks hold whatever fonts the host
has."""

import dataclasses

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtGui import QFontMetrics  # noqa: E402

from gui.present import numbers  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.widgets import cell_numbers, controls  # noqa: E402
from gui.widgets.heatmap import Heatmap  # noqa: E402
from tests.test_window_sizes import word_session  # noqa: E402

MINILM = "model:all-MiniLM-L6-v2:layer 0:head 3"

pytestmark = pytest.mark.gui
TOKENS = 13
SMALL = 6  # the zoom test's tokens


def largest_map(view) -> Heatmap:
    """The step's own heatmap: the largest one shown (the inputs' panels are smaller)."""
    shown = [h for h in view.findChildren(Heatmap) if h.isVisible() and h.panel is not None]
    return max(shown, key=lambda h: h.width() * h.height())


def cell_pixels(hm: Heatmap) -> float:
    """A column's width on screen, from the scene as the next paint draws it (the view's
    transform brought up to date first: a busy host may check between a layout pass and it)."""
    hm.plot.getViewBox().updateMatrix()
    cols = hm.panel.raw.shape[1]
    return hm.image_item.sceneBoundingRect().width() / cols


def assert_every_cell_numbered(hm: Heatmap, name: str) -> None:
    """All 13 x 13 numbers drawn, at 6 points or more, none wider than its cell."""
    rows, cols = hm.panel.raw.shape
    assert (rows, cols) == (TOKENS, TOKENS), name
    drawn = hm._texts
    assert hm.numbers.point_size >= 6 and len(drawn) == rows * cols, (name, len(drawn))
    cell = cell_pixels(hm)
    for item in drawn:
        width = item.sceneBoundingRect().width()
        assert item.isVisible() and width <= cell, (name, item.text(), width, cell)


def open_head(open_window):
    """The MiniLM head's shape at 1024x700: its words, d_model 384 + 1 (the bias column),
    d_k = d_v = 32."""
    head = sm.random_session(3, TOKENS, 385, 32, 32, 1)
    words = word_session(TOKENS).tokens
    head = dataclasses.replace(head, tokens=words, key_tokens=words, preset=MINILM)
    return open_window(head, size=(1024, 700))


def test_a_13_token_head_at_1024x700_has_numbers_in_every_cell(open_window, qtbot):
    window = open_head(open_window)
    for name in ("scores", "weights"):
        window.pipeline.set_step(name)
        hm = largest_map(window.pipeline)
        qtbot.waitUntil(lambda hm=hm, name=name: assert_every_cell_numbered(hm, name))
    window.tabs.setCurrentWidget(window.backward)
    qtbot.waitUntil(lambda: window.backward_outcome is not None, timeout=60_000)
    window.backward.pipeline.set_step("grad_weights")
    hm = largest_map(window.backward.pipeline)
    qtbot.waitUntil(lambda: assert_every_cell_numbered(hm, "grad_weights"), timeout=60_000)


def widest(hm: Heatmap, form, points: int) -> float:
    """The widest of the matrix's numbers written in `form` at `points`, in pixels."""
    metrics = QFontMetrics(controls.font(points))
    e = hm.numbers.exponent
    return max(
        metrics.horizontalAdvance(form(float(v) / 10.0**e if e else float(v)))
        for v in hm.panel.raw.ravel()
    )


def zoom_to(hm: Heatmap, pixels: float) -> None:
    """Square cells `pixels` on a side on screen, from the first column and row."""
    box = hm.plot.getViewBox()
    wide, high = box.width() / pixels, box.height() / pixels  # columns and rows in view
    box.setRange(xRange=(-0.5, wide - 0.5), yRange=(-0.5, high - 0.5), padding=0)


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("fits", ["full", "compact only"])
def test_the_compact_form_is_drawn_where_the_full_one_is_wider_than_the_cell(
    open_window, qtbot, fits, seed
):
    # 6 tokens: at the cell widths below every cell stays in view in any layout (a box of
    # 232 x 318 px was seen in the full suite: 13 tokens of 20 px did not fit it)
    window = open_window(sm.random_session(seed, SMALL, 8, 4, 4, 1), size=(1024, 700))
    window.pipeline.set_step("scores")
    hm = largest_map(window.pipeline)
    qtbot.waitUntil(lambda: len(hm._texts) == SMALL * SMALL, timeout=60_000)
    smallest = cell_numbers.POINT_SIZES[-1]
    full = widest(hm, numbers.cell, smallest) + cell_numbers.PADDING
    compact = widest(hm, numbers.compact, smallest) + cell_numbers.PADDING
    assert compact < full, (compact, full)  # a leading 0 or a digit dropped: narrower
    target = full + 2 if fits == "full" else (compact + full) / 2  # pixels
    zoom_to(hm, target)

    def drawn_as_chosen() -> None:
        box = hm.plot.getViewBox()
        # every cell in view: the product fits the numbers of the cells in view, here all
        assert min(box.width(), box.height()) >= SMALL * target, (box.width(), box.height())
        if abs(cell_pixels(hm) - target) >= 0.5:  # a busy host laid out after the zoom
            zoom_to(hm, target)
        cell = cell_pixels(hm)
        assert abs(cell - target) < 0.5, (cell, target)
        expected = numbers.cell if fits == "full" else numbers.compact
        assert hm.numbers.format is expected, (hm.numbers.format, cell)
        assert len(hm._texts) == SMALL * SMALL
        for item in hm._texts:
            assert item.isVisible() and item.sceneBoundingRect().width() <= cell, item.text()

    qtbot.waitUntil(drawn_as_chosen, timeout=60_000)

"""The head view drawn (offscreen): every token labelled at any length, the legend, hover on
either side, and the head chosen kept in step with the model grid."""

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QPointF, Qt  # noqa: E402

from gui.widgets.head_legend import head_colours  # noqa: E402
from gui.widgets.head_view import HeadView  # noqa: E402

pytestmark = pytest.mark.gui


def pixels(widget) -> np.ndarray:
    """(H, W, 3) uint8 of what the widget draws."""
    image = widget.grab().toImage().convertToFormat(widget.grab().toImage().Format.Format_RGB888)
    h, w = image.height(), image.width()
    data = np.frombuffer(image.constBits().asstring(image.bytesPerLine() * h), np.uint8)
    return data.reshape(h, image.bytesPerLine())[:, : 3 * w].reshape(h, w, 3)


def runs(ink: np.ndarray, bridge: int = 3) -> int:
    """How many separate runs of True a 1-D array holds (one per label in a column); gaps of
    at most `bridge` rows inside one label are bridged (Noto Sans draws the bar of a '5' a
    light row apart from its body, which split one label in two at the ink threshold)."""
    ink = ink.copy()
    on = np.nonzero(ink)[0]
    for a, b in zip(on, on[1:]):
        if 1 < b - a <= bridge + 1:
            ink[a:b] = True
    padded = np.concatenate([[False], ink, [False]])
    return int(np.count_nonzero(padded[1:] & ~padded[:-1]))


def shifts(tokens: int, heads: int = 2) -> np.ndarray:
    """(heads, T, T): head h sends all of token i's weight to token (i + h) % T."""
    w = np.zeros((heads, tokens, tokens))
    for h in range(heads):
        w[h, np.arange(tokens), (np.arange(tokens) + h) % tokens] = 1.0
    return w


def click(qtbot, legend, head: int, double: bool = False) -> None:
    """Click (or double-click) a legend entry; head -1: the 'all' entry."""
    press = qtbot.mouseDClick if double else qtbot.mouseClick
    press(legend, Qt.MouseButton.LeftButton, pos=legend.entry_rect(head).center().toPoint())


@pytest.fixture
def view(qtbot):
    v = HeadView()
    qtbot.addWidget(v)  # pytest-qt closes it after the test
    v.resize(320, 400)
    v.show()
    qtbot.waitExposed(v)
    return v


@pytest.mark.parametrize("tokens", [6, 13, 64, 126, 512])
def test_every_token_is_labelled_on_both_sides_and_the_view_scrolls(qtbot, view, tokens):
    labels = [f"w{i}" for i in range(tokens)]
    view.set_layer(labels, shifts(tokens), [0, 1])
    canvas = view.canvas
    step = canvas.step()
    assert canvas.height() >= tokens * step - 1  # as tall as its rows: the scroll area scrolls
    if tokens >= 64:
        assert canvas.height() > view.scroll.viewport().height()
        assert view.scroll.verticalScrollBar().maximum() > 0
    image = pixels(canvas)
    assert image.shape[0] == canvas.height()
    left, right = canvas.columns()
    ink = image.min(axis=2) < 128  # dark pixels: the labels' text
    # one separate run of dark rows per token in each label column: none missing, none merged
    assert runs(ink[:, : int(left) - 6].any(axis=1)) == tokens
    assert runs(ink[:, int(right) + 6 :].any(axis=1)) == tokens
    # and each run sits in its own token's row
    rows = np.nonzero(ink[:, : int(left) - 6].any(axis=1))[0]
    owners = {int((y - 8) // step) for y in rows}
    assert owners == set(range(tokens))


def colour_count(image: np.ndarray, colour) -> int:
    """Pixels within 40 of a colour in every channel (antialiased edges are left out)."""
    target = np.array([colour.red(), colour.green(), colour.blue()])
    return int(np.count_nonzero(np.abs(image.astype(int) - target).max(axis=2) < 40))


def test_the_legend_turns_heads_off_and_on_and_says_so(qtbot, view):
    view.set_layer([f"t{i}" for i in range(8)], shifts(8, heads=3), [0, 1, 2])
    colours = head_colours(3)
    before = pixels(view.canvas)
    assert all(colour_count(before, c) > 50 for c in colours)
    legend = view.legend
    with qtbot.waitSignal(view.headsChanged) as sent:
        click(qtbot, legend, 1)
    assert sent.args == [[0, 2]] and view.heads == [0, 2]
    after = pixels(view.canvas)
    assert colour_count(after, colours[1]) == 0  # head 1's lines are gone from the drawing
    assert colour_count(after, colours[0]) > 50 and colour_count(after, colours[2]) > 50
    click(qtbot, legend, 2, double=True)
    assert view.heads == [2]
    solo = pixels(view.canvas)
    assert colour_count(solo, colours[0]) == 0 and colour_count(solo, colours[2]) > 50
    click(qtbot, legend, -1)
    assert view.heads == [0, 1, 2]


def line_rows(image: np.ndarray, x: int) -> np.ndarray:
    """Rows where column x is not white (a line passes)."""
    return np.nonzero(image[:, x].min(axis=1) < 235)[0]


@pytest.mark.parametrize("side", ["query", "key"])
def test_hovering_a_token_on_either_side_keeps_only_its_lines(qtbot, view, side):
    tokens = 10
    view.set_layer([f"t{i}" for i in range(tokens)], shifts(tokens), [1])  # i -> i + 1
    canvas = view.canvas
    left, right = canvas.columns()
    x = 4 if side == "query" else canvas.width() - 4
    y = canvas.token_y(4)
    qtbot.mouseMove(canvas, QPointF(x, y).toPoint())
    qtbot.waitUntil(lambda: view.state.focus() == (side, 4))
    image = pixels(canvas)
    ends_left = line_rows(image, int(left) + 2)
    ends_right = line_rows(image, int(right) - 2)
    step = canvas.step()
    # hovering query 4: its one line ends at key 5; hovering key 4: it comes from query 3
    want_left, want_right = (4, 5) if side == "query" else (3, 4)
    assert len(ends_left) and np.all(np.abs(ends_left - canvas.token_y(want_left)) < step / 2)
    assert len(ends_right) and np.all(np.abs(ends_right - canvas.token_y(want_right)) < step / 2)
    qtbot.mouseMove(canvas, QPointF(canvas.width() / 2, y).toPoint())  # between the columns
    qtbot.waitUntil(lambda: view.state.focus() is None)
    assert len(line_rows(pixels(canvas), int(left) + 2)) > 5 * (tokens - 1)  # every line back


def test_the_head_chosen_in_the_grid_and_in_the_legend_stay_in_step(qtbot, open_window):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from gui.state import session as sm
    from scratch import models

    try:
        run = models.load().run("Your journey starts with one step")
    except models.ModelError as exc:
        pytest.skip(f"default model not installed: {exc}")
    window = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    panel = window.model
    panel.show_run(run)
    window.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(panel.grid)
    # grid -> head view: a click on layer 3 head 7 shows that layer with head 7 alone
    rect = panel.grid.cell_rect(3, 7)
    qtbot.mouseClick(panel.grid, Qt.MouseButton.LeftButton, pos=rect.center().toPoint())
    assert panel.lines.heads == [7] and np.array_equal(panel.lines.weights, run.attentions[3])
    qtbot.waitUntil(lambda: not window.worker.busy and "head 7" in window.outcome.session.preset)
    window.tabs.setCurrentWidget(panel)
    # head view -> grid: the legend's double click on H2 outlines layer 3 head 2 and picks it
    legend = panel.lines.legend
    qtbot.waitExposed(legend)
    click(qtbot, legend, 2, double=True)
    assert panel.lines.heads == [2]
    assert panel.grid.selected == (3, 2) and panel.head.currentData() == 2
    # a few heads on: the picker is blank (the legend says which), the lines stay as they are
    click(qtbot, legend, 5)
    assert panel.lines.heads == [2, 5] and panel.head.currentIndex() == -1
    click(qtbot, legend, -1)  # every head: 'all heads'
    assert panel.lines.heads == list(range(12)) and panel.head.currentData() == -1
    # the picker -> the grid's outline too
    panel.layer.setValue(1)
    panel.head.setCurrentIndex(panel.head.findData(9))
    assert panel.lines.heads == [9] and panel.grid.selected == (1, 9)


def test_a_pinned_token_is_scrolled_into_view(qtbot, view):
    tokens = 64
    view.set_layer([f"w{i}" for i in range(tokens)], shifts(tokens), [0, 1], focus=tokens - 1)
    bar, canvas = view.scroll.verticalScrollBar(), view.canvas

    def shown() -> bool:
        y = canvas.token_y(tokens - 1)
        return bar.value() <= y <= bar.value() + view.scroll.viewport().height()

    qtbot.waitUntil(shown)
    assert bar.value() > 0 and view.focus == tokens - 1

"""The window readable at every size: 6 to 512 tokens in 1024 x 700 and 1400 x 900 windows.

Measures what is drawn, not only that it renders: the key and query labels (how many, inside
their axis, none overlapping), the numbers in the cells (whenever they fit), the heatmap's size
while the hover text grows, and every widget inside its parent."""

import dataclasses

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QRect, QRectF, Qt  # noqa: E402
from PyQt6.QtGui import QFontMetrics  # noqa: E402
from PyQt6.QtWidgets import QWidget  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.widgets.token_axis import GAP, keep_apart  # noqa: E402
from tests.journey_sessions import with_mask

pytestmark = pytest.mark.gui

SIZES = ((1024, 700), (1400, 900))
TOKENS = (6, 13, 64, 126, 512)
# words of the lengths a real tokenizer gives (a MiniLM head's labels), made unique by index
WORDS = ("[CLS]", "your", "journey", "starts", "with", "one", "step", "attention", "##ing", ".")


def word_session(tokens: int) -> sm.Session:
    """A seeded random example whose labels are words, not t0, t1, ..."""
    s = sm.random_session(3, tokens, 8, 4, 4, 1)
    words = tuple(f"{WORDS[i % len(WORDS)]}{i // len(WORDS) or ''}" for i in range(tokens))
    return dataclasses.replace(s, tokens=words, key_tokens=words, step="weights")


def inside(child: QWidget, parent: QWidget) -> bool:
    """Whether child's rectangle lies within parent's (both as on screen)."""
    top_left = child.mapTo(parent, child.rect().topLeft())
    return parent.rect().contains(QRect(top_left, child.size()))


def assert_labels_readable(hm, tokens: int) -> None:
    """Each axis: labels inside the axis, none overlapping, thinned no more than needed."""
    hm.grab()  # paint now: the labels are laid out as they are drawn
    box = hm.plot.getViewBox()
    (x0, x1), (y0, y1) = box.viewRange()
    for side, pixels, span in (("bottom", box.width(), x1 - x0), ("left", box.height(), y1 - y0)):
        axis = hm.plot.getAxis(side)
        rects = [r for r, _ in axis.drawn]
        assert rects, side
        bounds = axis.boundingRect()
        for r in rects:  # inside the axis, so inside the widget (checked below)
            assert bounds.contains(r.adjusted(0.5, 0.5, -0.5, -0.5)), (side, r, bounds)
        spans = [
            (r.left(), r.right()) if side == "bottom" else (r.top(), r.bottom()) for r in rects
        ]
        gap = 0 if side == "left" or axis.rotated else GAP  # lines of text need no gap
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1 + gap - 0.01, (side, (a0, a1), (b0, b1))  # no two labels overlap
        line = QFontMetrics(axis.style["tickFont"]).height()
        per_cell = pixels / abs(span)  # pixels one cell takes on screen
        if side == "bottom":
            widest = max(
                QFontMetrics(axis.style["tickFont"]).horizontalAdvance(t) for t in axis._texts
            )
            # rotated exactly when horizontal labels would collide
            assert axis.rotated == (per_cell < widest + GAP), (per_cell, widest)
        if per_cell >= line:  # every label fits (rotated if need be): all drawn
            assert len(rects) == tokens, (side, len(rects), tokens, per_cell)
        else:  # thinned to steps of 1, 2, 5, 10, ...: at most 2.5 times the room a label needs
            in_view = pixels * min(tokens, abs(span)) / abs(span)
            assert len(rects) >= in_view / (2.5 * line) - 2, (side, len(rects), in_view)
        axis_rect = axis.mapRectToScene(bounds)
        view = QRectF(hm.view.rect())
        assert view.contains(axis_rect.adjusted(1, 1, -1, -1)), (side, axis_rect, view)


def settled(qtbot, check) -> None:
    """Run check until it passes, up to 5 s: a loaded machine lays the window out late (a fixed
    30 ms wait once saw a label outside its axis before the axis had grown)."""
    qtbot.waitUntil(check, timeout=60_000)


def assert_numbers_fit(hm) -> None:
    """Every number drawn lies within its cell."""
    rows, cols = hm.panel.image.shape
    cell = hm.image_item.sceneBoundingRect().width() / cols
    for item in hm._texts:
        assert item.isVisible() and item.sceneBoundingRect().width() <= cell, item.text()


@pytest.mark.parametrize("size", SIZES, ids=["1024x700", "1400x900"])
@pytest.mark.parametrize("tokens", TOKENS)
def test_the_pipeline_is_readable_at_every_size(open_window, qtbot, tokens, size):
    w = open_window(word_session(tokens), size=size)
    p = w.pipeline
    p.set_step("weights")
    hm = p.heatmaps[0]
    assert hm.panel.image.shape == (tokens, tokens)

    def readable() -> None:
        assert_labels_readable(hm, tokens)
        assert_numbers_fit(hm)

    settled(qtbot, readable)
    if tokens <= 13:  # small matrices: the numbers fit their cells at both sizes
        assert hm.numbers.point_size >= 6 and len(hm._texts) == tokens * tokens
    else:  # zoomed in on 6 x 6 cells, the numbers appear whatever the matrix's size
        hm.plot.getViewBox().setRange(xRange=(9.5, 15.5), yRange=(9.5, 15.5), padding=0)

        def zoomed() -> None:
            assert hm.numbers.point_size >= 6 and 36 <= len(hm._texts) <= 100
            assert_numbers_fit(hm)

        settled(qtbot, zoomed)
        hm.reset_zoom()

    def nothing_cut_off() -> None:
        for widget in (hm, p.main_area, p.explanation, p.sentence):
            assert inside(widget, p), widget
        assert hm.bar.sceneBoundingRect().right() <= hm.view.width() + 1
        least = hm.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
        assert least.width() <= hm.view.width() and least.height() <= hm.view.height()

    settled(qtbot, nothing_cut_off)
    # a long hover text never shrinks the heatmap: the hover area keeps its height
    before = (hm.height(), p.explanation.height(), p.sentence.height())
    hm.hover(tokens // 2, tokens // 2)
    long = "ground truth (float64): " + " + ".join(["0.1234 * 0.5678"] * 40)
    p.explanation.setText(long)
    p.sentence.setText(long)
    qtbot.wait(20)
    assert (hm.height(), p.explanation.height(), p.sentence.height()) == before
    assert p.explanation.text() == long and p.explanation.toolTip() == long
    assert p.explanation.shown().endswith("…") and len(p.explanation.shown()) < len(long)


def test_labels_turn_before_they_thin(qtbot, errors):
    """Six long key labels in a narrow heatmap: all six drawn upright, none dropped."""
    from gui.present import view_model
    from gui.widgets.heatmap import Heatmap

    hm = Heatmap()
    qtbot.addWidget(hm)
    hm.resize(360, 420)
    hm.show()
    trace = __import__("scratch").Trace(
        (__import__("scratch").Step("weights", "w", [[0.5] * 6] * 6, "n", ("query", "key")),),
        ("transformer", "attention", "softmax", "journey", "starts", "[SEP]"),
        ("transformer", "attention", "softmax", "journey", "starts", "[SEP]"),
        1.0,
    )
    hm.show_panel(view_model.panels(trace, "weights")[0])

    def upright() -> None:
        axis = hm.plot.getAxis("bottom")
        assert axis.rotated and [t for _, t in axis.drawn] == list(trace.tokens)
        assert_labels_readable(hm, 6)

    settled(qtbot, upright)


def test_keep_apart_slides_edge_labels_in_and_drops_touching_ones():
    kept = keep_apart([(-4.0, 6.0), (8.0, 18.0), (12.0, 22.0), (95.0, 105.0)], 0.0, 100.0)
    assert kept == [(0, 0.0, 10.0), (2, 12.0, 22.0), (3, 90.0, 100.0)]
    assert keep_apart([(0.0, 200.0)], 0.0, 100.0) == []  # wider than the axis: not drawn


def test_the_check_tab_shows_the_verdict_first_at_512_tokens(open_window, qtbot):
    w = open_window(sm.random_session(0, 512, 8, 4, 4, 1), size=(1400, 900))
    w.tabs.setCurrentWidget(w.checks)
    table = w.checks.table
    verdict = table.columnCount() - 1
    header = table.horizontalHeader()
    assert header.visualIndex(verdict) == 0
    assert {table.item(r, verdict).text() for r in range(table.rowCount())} == {"pass"}

    def verdict_shown() -> None:
        x = header.sectionViewportPosition(verdict)
        assert 0 <= x and x + header.sectionSize(verdict) <= table.viewport().width()
        assert inside(w.checks.diff_map, w.checks)

    settled(qtbot, verdict_shown)


@pytest.mark.parametrize("size", SIZES, ids=["1024x700", "1400x900"])
@pytest.mark.parametrize("tokens", (13, 126))
def test_every_overview_tile_fits_its_column(open_window, qtbot, tokens, size):
    w = open_window(word_session(tokens), size=size)
    w.tabs.setCurrentWidget(w.overview)
    settled(qtbot, lambda: _overview_fits(w, tokens))  # returns None: an assertion check


def _overview_fits(w, tokens: int) -> None:
    """Every overview tile within its column, its labels readable."""
    assert len(w.overview.heatmaps) >= 12
    for name, hm in w.overview.heatmaps.items():
        least = hm.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
        assert least.width() <= hm.view.width(), (name, least.width(), hm.view.width())
        assert least.height() <= hm.view.height(), (name, least.height(), hm.view.height())
        assert inside(hm, w.overview), name
        if hm.panel.image.shape == (tokens, tokens):  # scores, scaled, masked, weights
            assert_labels_readable(hm, tokens)


@pytest.mark.parametrize("size", SIZES, ids=["1024x700", "1400x900"])
@pytest.mark.parametrize("tokens", (6, 64, 512))
def test_the_mistakes_gallery_keeps_its_colour_bars_inside(open_window, qtbot, tokens, size):
    """Word labels widen the query axis: the mistake's heatmaps (with the colour bars) were
    squeezed under their least width at 1024 x 700 and the bar's labels were cut ('0.1')."""
    s = with_mask(word_session(tokens), "causal-top-left")
    w = open_window(s, size=size)
    w.tabs.setCurrentWidget(w.learn)
    gallery = w.learn.mistakes
    w.learn.pages.setCurrentWidget(gallery)
    qtbot.waitUntil(lambda: bool(gallery.planted) and bool(gallery.diagnoses), timeout=120000)
    gallery.names.setCurrentRow(3)  # causal off by one

    def bars_inside() -> None:
        for name, hm in gallery.maps.items():
            least = hm.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
            assert least.width() <= hm.view.width(), (name, least.width(), hm.view.width())
            assert inside(hm, gallery), name
            if hm.bar is not None:
                assert hm.bar.sceneBoundingRect().right() <= hm.view.width() + 1, name

    settled(qtbot, bars_inside)
    w.close()  # joins the gallery's workers


@pytest.mark.parametrize("tokens", (6, 64, 512))
def test_a_model_grid_cell_shows_a_sharp_head_at_any_length(qtbot, tokens):
    """A next-token head (token i gives all its weight to i + 1) drawn in a 26-48 pixel cell:
    sampled every 11th cell at 512 tokens it missed every weight and showed one flat colour."""
    import numpy as np

    from gui.widgets.model_grid import ModelGrid, colour_table

    w = np.zeros((1, 1, tokens, tokens))  # (layers, heads, T, T)
    w[0, 0, np.arange(tokens), (np.arange(tokens) + 1) % tokens] = 1.0
    grid = ModelGrid()
    qtbot.addWidget(grid)
    grid.resize(400, 300)
    grid.set_attentions(w)
    grid.show()
    qtbot.waitExposed(grid)
    image = grid.grab().toImage()
    rect = grid.cell_rect(0, 0).toAlignedRect()
    bright = tuple(int(c) for c in colour_table()[255][:3])  # the head's own maximum
    lit = sum(
        image.pixelColor(x, y).getRgb()[:3] == bright
        for y in range(rect.top() + 1, rect.bottom())
        for x in range(rect.left() + 1, rect.right())
    )
    inner = (rect.width() - 2) * (rect.height() - 2)
    # at least one bright pixel per row of the cell's pixels, a line across it
    assert lit >= rect.height() - 2, (lit, inner, rect)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the kernel's exp(-inf - -inf)
def test_a_checked_kernels_error_map_has_the_height_of_its_labels(open_window, qtbot, tmp_path):
    """At 1024 x 700 the table above took 3/5 of the room: the error map of a 5 x 4 case got
    ~60 pixels and drew q0, q2, q4 (3 of 5 query labels)."""
    kernel = tmp_path / "my_kernel.py"
    kernel.write_text(
        "import numpy as np\n\n\ndef attention(q, k, v, attn_mask=None, is_causal=False, "
        "scale=None):\n    s = q @ np.swapaxes(k, -1, -2) / q.shape[-1]\n"
        "    e = np.exp(s - s.max(axis=-1, keepdims=True))\n"
        "    return e / e.sum(axis=-1, keepdims=True) @ v\n"
    )
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    panel = w.kernel_check
    w.tabs.setCurrentWidget(panel)
    panel.source.setText(str(kernel))
    panel.function.setText("attention")
    with qtbot.waitSignal(panel.worker.finished, timeout=120000):
        assert panel.start()
    hm = panel.diff_map
    rows = hm.panel.image.shape[0]
    assert rows == 5 and panel.split.orientation() == Qt.Orientation.Vertical

    def every_row_labelled() -> None:
        hm.grab()
        drawn = [t for _, t in hm.plot.getAxis("left").drawn if t]
        assert len(drawn) == rows, drawn
        assert inside(hm, panel) and inside(panel.table, panel)

    settled(qtbot, every_row_labelled)
    w.close()


def test_a_long_list_of_token_labels_shows_its_start(open_window):
    """64 labels do not fit the field: it showed '#ing5, .5, [CLS]6, ...', the list's end."""
    w = open_window(word_session(64), size=(1024, 700))
    for field in (w.inputs.tokens, w.inputs.key_tokens):
        assert field.text().startswith("[CLS], your, journey")
        assert field.fontMetrics().horizontalAdvance(field.text()) > field.width()  # it scrolls
        assert field.cursorPosition() == 0 and field.cursorRect().left() < 10


def test_a_sampled_check_leaves_its_error_map_the_room(open_window, qtbot):
    """512 tokens with NumPy at 1024 x 700: two sampled rows in a table given half the height,
    and the 16 x 4 error map under it drew 8 of its 16 query labels."""
    s = dataclasses.replace(sm.random_session(0, 512, 8, 4, 4, 1), backend="numpy")
    w = open_window(s, size=(1024, 700))
    w.tabs.setCurrentWidget(w.checks)
    table, hm = w.checks.table, w.checks.diff_map
    assert table.rowCount() == 2 and hm.panel.image.shape == (16, 4)
    assert w.checks.split.orientation() == Qt.Orientation.Vertical

    def readable() -> None:
        hm.grab()
        drawn = [t for _, t in hm.plot.getAxis("left").drawn if t]
        assert len(drawn) == 16, drawn
        assert table.verticalScrollBar().maximum() == 0  # every row of the table in view
        assert inside(hm, w.checks) and inside(table, w.checks)
        # the header's five lines (the sampled check's words) in view, not behind a scroll bar
        box = w.checks.header.parentWidget().parentWidget()
        assert box.verticalScrollBar().maximum() == 0, (box.height(), w.checks.header.height())

    settled(qtbot, readable)


@pytest.mark.parametrize("keys", (6, 64, 512))
def test_the_why_bars_keep_their_colours_at_any_length(qtbot, keys):
    """Three series of bars over 512 keys in a 600-pixel plot: each bar's black outline was
    wider than its fill, and the grey, blue and red series drew one black mass."""
    import numpy as np

    import gui.widgets.heatmap  # noqa: F401  (sets the app's white background and black foreground)
    from gui.views.why_view import COLOURS, Bars

    bars = Bars()
    qtbot.addWidget(bars)
    bars.resize(600, 220)
    bars.show()
    qtbot.waitExposed(bars)
    rng = np.random.default_rng(0)
    series = [(name, list(rng.random(keys))) for name in ("before", "after", "zero")]
    bars.show_series(series, [f"k{j}" for j in range(keys)])
    image = bars.grab().toImage()
    seen = {c: 0 for c in COLOURS}
    for y in range(0, image.height(), 2):
        for x in range(0, image.width(), 2):
            rgb = image.pixelColor(x, y).getRgb()[:3]
            if rgb in seen:
                seen[rgb] += 1
    # each series fills about a third of the bars' area (random heights): at least 1/20 of it
    area = image.width() * image.height() / 4
    assert all(n >= area / 60 for n in seen.values()), (seen, area)


@pytest.mark.parametrize("size", SIZES, ids=["1024x700", "1400x900"])
@pytest.mark.parametrize("tokens", (6, 64))
def test_no_overview_tile_is_mostly_empty_axes(open_window, qtbot, tokens, size):
    """x and scores stood alone in columns as tall as w_q, w_k and w_v together: their cells
    filled 13-30% of their axes (the rest, long empty axis lines)."""
    from PyQt6.QtCore import QPointF

    w = open_window(word_session(tokens), size=size)
    w.tabs.setCurrentWidget(w.overview)
    qtbot.waitUntil(lambda: w.overview.heatmaps and not w.overview._dirty)
    qtbot.wait(300)  # the tiles laid out in their columns (before, each had the whole view)

    def filled() -> None:
        for name, hm in w.overview.heatmaps.items():
            rows, cols = hm.panel.shape
            box = hm.plot.getViewBox()
            corners = (QPointF(-0.5, -0.5), QPointF(cols - 0.5, rows - 0.5))
            cells = QRectF(*(box.mapViewToScene(p) for p in corners)).normalized()
            axes = box.sceneBoundingRect()
            share = cells.width() * cells.height() / (axes.width() * axes.height())
            # a matrix 2 x as tall as wide fills half of a square box: w_q (8 x 4) fills 0.4
            least = 0.9 * min(rows, cols) / max(rows, cols)
            assert share >= min(least, 0.35), (name, round(share, 2), cells, axes)

    settled(qtbot, filled)


@pytest.mark.parametrize("size", SIZES, ids=["1024x700", "1400x900"])
@pytest.mark.parametrize("tokens", (6, 64))
def test_a_short_reason_leaves_its_bars_the_room(open_window, qtbot, tokens, size):
    """The Scale page's words and table take ~150 pixels; the text box kept 3/5 of the page
    (310 at 1024 x 700) and the bars under it the rest, with a blank band between. Fitted to
    the words, no page may hide a line behind a scroll bar either."""
    w = open_window(with_mask(word_session(tokens), "causal-top-left"), size)
    w.tabs.setCurrentWidget(w.learn)
    why = w.learn.why
    w.learn.pages.setCurrentWidget(why)
    qtbot.waitUntil(lambda: why.result is not None and not why.worker.busy, timeout=60000)
    for page in (why.scale_page, why.max_page, why.mask_page):
        why.pages.setCurrentWidget(page)

        def fitted(page=page) -> None:
            box = page.scroll
            words = page.text.heightForWidth(box.viewport().width())
            if box.maximumHeight() < page.height() * 3 // 5:  # fitted, not capped at its 3/5
                assert box.verticalScrollBar().maximum() == 0, (box.height(), words)
            if page is why.scale_page:  # the short one: a box no taller than its words
                assert box.height() <= words + 2 * box.frameWidth() + 40, (box.height(), words)
                assert page.bars.height() >= page.height() - box.height() - 12

        settled(qtbot, fitted)
    w.close()


REASON = (
    "<b>Why multiply by 1/sqrt(d_k)?</b> "
    + "A score q.k is a sum of d_k products, so its variance grows with d_k. " * 3
    + "<table border=1><tr><td>entropy</td><td>0.4332</td><td>1.042</td></tr>"
    + "<tr><td>largest weight</td><td>0.8973</td><td>0.6372</td></tr>"
    + "<tr><td>on key</td><td>[CLS]</td><td>[CLS]</td></tr></table>"
)


@pytest.mark.parametrize("first", (300, 900))
def test_a_fitted_reason_never_hides_a_line_behind_a_scroll_bar(qtbot, first):
    """Words set while hidden at one width and shown at another: measured without room for
    the scroll bar, a box one line short showed the bar, the narrower words took another line
    and the bar stayed (the Scale page's 'on key' row hidden at 1400 x 900)."""
    from gui.views.why_view import WhyPage

    hidden = []
    for width in range(400, 1001, 40):
        page = WhyPage()
        qtbot.addWidget(page)
        page.resize(first, 500)
        page.show_text(REASON)  # filled while hidden, as a page under another
        page.resize(width, 500)
        page.show()
        qtbot.waitExposed(page)
        qtbot.wait(20)
        if page.scroll.verticalScrollBar().maximum() > 0:
            hidden.append(width)
        page.close()
    assert not hidden, hidden

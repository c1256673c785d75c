"""The window fits 1024 x 700 and its labels are whole, with whichever fonts the run has (the
host's, or one set chosen with SCRATCH_TEST_FONTS; see tests/font_sets.py): measured from the
widgets' own geometry and font metrics, never from one font's pixel counts."""

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QPoint, QRect  # noqa: E402
from PyQt6.QtWidgets import QAbstractButton, QLabel, QWidget  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.widgets.fixed_lines import FixedLines  # noqa: E402
from tests import font_sets  # noqa: E402

pytestmark = pytest.mark.gui

SIZE = (1024, 700)


def visible_rect(widget: QWidget, window: QWidget) -> QRect:
    """The part of `widget` its ancestors up to `window` let be seen, in window coordinates."""
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        rect &= QRect(parent.mapTo(window, QPoint(0, 0)), parent.size())
        parent = parent.parentWidget()
    return rect & window.rect()


def cut_texts(window: QWidget) -> list[str]:
    """Every visible label or button whose text needs more room than it has, or that its
    ancestors clip: the label's own advance and line height from its font's metrics."""
    cut = []
    for w in window.findChildren((QLabel, QAbstractButton)):
        text = w.text()
        if not w.isVisibleTo(window) or not text.strip() or w.width() <= 1:
            continue
        name = f"{type(w).__name__} {text[:40]!r}"
        seen = visible_rect(w, window)
        own = QRect(w.mapTo(window, QPoint(0, 0)), w.size())
        if isinstance(w, QLabel) and w.parentWidget() is not None:
            if seen != own and not is_scrolled(w):
                cut.append(f"{name}: {own.getRect()} shown as {seen.getRect()}")
        metrics = w.fontMetrics()
        if isinstance(w, FixedLines):
            continue  # cut with '…' by design, the whole text in its tooltip
        if isinstance(w, QLabel) and w.textFormat().name != "PlainText" and "<" in text:
            continue  # rich text: its document lays itself out
        if isinstance(w, QLabel) and w.wordWrap():
            needed = w.heightForWidth(w.contentsRect().width())
            if w.contentsRect().height() < needed:
                cut.append(f"{name}: {w.contentsRect().height()} px high, needs {needed}")
            continue
        widest = max(metrics.horizontalAdvance(line) for line in text.replace("&", "").split("\n"))
        room = w.contentsRect().width()
        if room < widest:
            cut.append(f"{name}: {room} px wide, needs {widest}")
    return cut


def is_scrolled(widget: QWidget) -> bool:
    """Whether a scroll area holds `widget` (its clipped part is a scroll away)."""
    from PyQt6.QtWidgets import QAbstractScrollArea

    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return True
        parent = parent.parentWidget()
    return False


def test_the_font_sets_are_what_the_run_offers(qapp):
    """SCRATCH_TEST_FONTS=name: Qt's default and fixed fonts are that set's families."""
    from PyQt6.QtGui import QFontDatabase, QFontInfo

    name = __import__("os").environ.get(font_sets.ENV)
    if not name:
        pytest.skip(f"{font_sets.ENV} not set: the host's own fonts are in use")
    sans, mono = font_sets.FONT_SETS[name][0]
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    assert (QFontInfo(qapp.font()).family(), QFontInfo(fixed).family()) == (sans, mono)


def test_an_unknown_font_set_is_refused_by_name():
    with pytest.raises(ValueError, match="SCRATCH_TEST_FONTS.*'comic'"):
        font_sets.activate("comic")


@pytest.mark.parametrize("seed", [0, 3])
def test_the_window_fits_1024x700_at_every_step(open_window, seed):
    """Every step of the pipeline (up to three input panels beside it) and every tab: the
    window's minimum size fits 1024 x 700, so a window asked for that size gets it."""
    w = open_window(sm.random_session(seed, 6, 8, 4, 4, 2), size=SIZE)
    for name in w.pipeline.names():
        w.pipeline.set_step(name)
        hint = w.minimumSizeHint()
        assert hint.width() <= SIZE[0] and hint.height() <= SIZE[1], (name, hint)
    for i in range(w.tabs.count()):
        w.tabs.setCurrentIndex(i)
        hint = w.minimumSizeHint()
        assert hint.width() <= SIZE[0] and hint.height() <= SIZE[1], (w.tabs.tabText(i), hint)
    assert (w.width(), w.height()) == SIZE


def test_the_labels_are_whole_at_1024x700(open_window, qtbot):
    """The pipeline's and the dock's labels and buttons at every step: none cut or clipped."""
    w = open_window(sm.random_session(0, 6, 8, 4, 4, 1), size=SIZE)
    for name in w.pipeline.names():
        w.pipeline.set_step(name)
        qtbot.waitUntil(lambda: not cut_texts(w), timeout=60_000)
    assert (w.width(), w.height()) == SIZE

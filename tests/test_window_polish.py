"""Window polish at 1024 x 700: the Check tab's header shows every line, the backward view's
input panels show their titles whole, and every spin box's tooltip says its range."""

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QRectF  # noqa: E402
from PyQt6.QtWidgets import QAbstractSpinBox  # noqa: E402

from gui.state import session as sm  # noqa: E402

pytestmark = pytest.mark.gui


def open_backward(open_window, qtbot, session: sm.Session):
    """The window at 1024 x 700 with its Backward tab computed and on screen."""
    w = open_window(session, size=(1024, 700))
    w.tabs.setCurrentWidget(w.backward)
    qtbot.waitUntil(
        lambda: not w.backward_worker.busy and w.backward_outcome is not None, timeout=60_000
    )
    return w


def test_the_check_header_shows_the_gradients_verdict_whole(open_window, qtbot):
    """After the Backward tab the header has 7 lines at 1024 x 700: capped at 6, its last
    line ('dV).') hid behind a scroll bar."""
    w = open_backward(open_window, qtbot, sm.random_session(0, 6, 8, 4, 4, 1))
    w.tabs.setCurrentWidget(w.checks)
    checks = w.checks
    qtbot.waitUntil(lambda: "dQ, dK, dV within their bounds" in checks.header.text())

    def whole() -> None:
        box = checks.header_box
        needed = checks.header.heightForWidth(box.viewport().width())
        assert box.verticalScrollBar().maximum() == 0, (box.height(), needed)
        assert box.viewport().height() >= needed, (box.viewport().height(), needed)
        # the table and the map keep the rest of the tab, and the window its size
        assert checks.split.height() >= checks.height() // 3
        assert (w.width(), w.height()) == (1024, 700)

    qtbot.waitUntil(whole, timeout=60_000)


def test_the_backward_input_panels_show_their_titles_whole(open_window, qtbot):
    """Two heads, step row_dot: 'grad_head_outputs head 0' was wider than its 172-pixel input
    panel at 1024 x 700; its end was cut and the plot pushed past the panel's right edge."""
    w = open_backward(open_window, qtbot, sm.random_session(0, 6, 8, 4, 4, 2))
    p = w.backward.pipeline
    p.set_step("row_dot")
    shown = [hm for hm in p.sources if hm.isVisible() and hm.panel is not None]
    assert [hm.panel.title for hm in shown] == ["grad_head_outputs head 0", "head_outputs head 0"]

    def whole() -> None:
        for hm in shown:
            title = hm.plot.titleLabel
            box = title.item.mapRectToScene(title.item.boundingRect())
            view = QRectF(hm.view.rect())
            assert view.contains(box.adjusted(1, 1, -1, -1)), (hm.panel.title, box, view)
            assert hm.plot.width() <= hm.view.width(), (hm.plot.width(), hm.view.width())

    qtbot.waitUntil(whole, timeout=60_000)


def test_a_narrow_tile_wraps_its_title_between_words(qtbot):
    import numpy as np

    from gui.present import view_model
    from gui.widgets.heatmap import Heatmap

    hm = Heatmap(compact=True)
    qtbot.addWidget(hm)
    hm.resize(110, 140)
    hm.show()
    qtbot.waitExposed(hm)
    image = np.random.default_rng(0).random((6, 4)).astype(np.float32)
    panel = view_model.Panel(
        title="grad_head_outputs head 0",
        image=image,
        raw=image.astype(np.float64),
        row_labels=[f"t{i}" for i in range(6)],
        col_labels=list("0123"),
        row_axis="query",
        col_axis="feature",
        kind="signed",
        levels=(-1.0, 1.0),
        step="grad_head_outputs",
        head=0,
    )
    hm.show_panel(panel)
    assert hm.plot.titleLabel.text == "grad_head_outputs<br>head 0"
    hm.resize(400, 140)  # room again: one line
    qtbot.waitUntil(lambda: hm.plot.titleLabel.text == "grad_head_outputs head 0")


def _range(box: QAbstractSpinBox) -> str:
    return f"{box.minimum():.12g} to {box.maximum():.12g}"


def test_every_spin_box_says_its_range(open_window):
    """A number typed past a box's maximum is cut short (99999 in a box up to 999 is 999):
    the tooltip says the range, so the user knows why."""
    w = open_window(sm.random_session(0, 6, 8, 4, 4, 2), size=(1024, 700))
    boxes = w.findChildren(QAbstractSpinBox)
    assert len(boxes) >= 15
    for box in boxes:
        assert box.toolTip().endswith(f"takes {_range(box)})") or box.toolTip() == (
            f"takes {_range(box)}"
        ), (box.objectName(), box.toolTip(), _range(box))
    inputs = w.inputs
    assert inputs.seed.toolTip() == "seed of the random example (takes 0 to 2147483647)"
    assert inputs.seed.maximum() == sm.MAX_SEED  # the ranges stay the callers'
    assert "takes 1 to 4096" in inputs.num_tokens.toolTip()
    assert "takes 1 to 2)" in inputs.kv_heads.toolTip()  # at most the heads, as they change
    inputs.set_session(sm.random_session(0, 6, 8, 4, 4, 4))
    assert "takes 1 to 4)" in inputs.kv_heads.toolTip(), inputs.kv_heads.toolTip()


def test_a_number_past_the_maximum_is_cut_and_the_tooltip_says_why(qtbot):
    from PyQt6.QtCore import Qt

    from gui.widgets.spin_boxes import SpinBox

    box = SpinBox()
    qtbot.addWidget(box)
    box.setRange(0, 999)
    box.setToolTip("a number")
    box.show()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, "99999")
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert box.value() == 999  # Qt's validator refused the 4th and 5th digits
    assert box.toolTip() == "a number (takes 0 to 999)"
    box.setMaximum(50)
    assert box.toolTip() == "a number (takes 0 to 50)" and box.about() == "a number"

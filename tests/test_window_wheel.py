"""The wheel must not edit (issue 33): a combo or spin box takes the wheel only while it has the
focus, otherwise the Inputs panel scrolls; the Variant box is in reach at 1400 x 900; ticking
softcap moves no control and unticking it keeps the typed cap."""

from __future__ import annotations

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QPoint, QPointF, QRect, Qt  # noqa: E402
from PyQt6.QtGui import QWheelEvent  # noqa: E402
from PyQt6.QtWidgets import QApplication, QWidget  # noqa: E402

from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui

NOTCH = 120  # one notch of a mouse wheel, in eighths of a degree


def wheel(widget: QWidget, notches: int) -> None:
    """A wheel event at the widget's centre, as the pointer resting there sends it."""
    pos = QPointF(widget.rect().center())
    event = QWheelEvent(
        pos,
        QPointF(widget.mapToGlobal(pos)),
        QPoint(),
        QPoint(0, NOTCH * notches),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def shown(box: QWidget) -> object:
    """What a combo or spin box shows: its current key or value."""
    return box.currentData() if hasattr(box, "currentData") else box.value()


# the boxes of the tried sequence (scale, L, the Variant box) and one of each other kind;
# attribute paths on the inputs panel
BOXES = ("scale_mode", "num_tokens", "d_model", "variant.align", "masked_rows", "variant.mask")


def _box(inputs, path: str) -> QWidget:
    for name in path.split("."):
        inputs = getattr(inputs, name)
    return inputs


def test_the_wheel_scrolls_the_panel_over_an_unfocused_box(settle, open_window):
    w = open_window(journey_preset(), size=(1400, 900))
    bar = w.inputs_scroll.verticalScrollBar()
    assert bar.maximum() > 0
    for path in BOXES:
        box = _box(w.inputs, path)
        for notches, start in ((-1, 0), (1, bar.maximum())):  # room to scroll that way
            bar.setValue(start)
            before, session = shown(box), w.inputs.session
            assert not box.hasFocus()
            wheel(box, notches)
            assert (shown(box), w.inputs.session) == (before, session), path  # not edited ...
            assert (bar.value() > start) == (notches < 0) and bar.value() != start, path
        # ... the panel scrolled. With the focus (a click or Tab), the wheel is the box's
        # again (a notch down: every box here has a next value)
        w.activateWindow()
        box.setFocus()
        assert box.hasFocus()
        wheel(box, -1)
        settle(w)
        assert shown(box) != before and w.inputs.session is not session, path
        box.clearFocus()


def test_no_box_in_the_window_takes_the_focus_from_the_wheel(open_window):
    from PyQt6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QComboBox, QScrollBar

    w = open_window(journey_preset())

    def boxes() -> list:
        kinds = (QComboBox, QAbstractSpinBox, QAbstractSlider)
        return [b for b in w.findChildren(kinds) if not isinstance(b, QScrollBar)]

    at_start = boxes()
    assert len(at_start) >= 30  # the inputs', the pipeline's, the checks', the model's, ...
    w.tabs.setCurrentWidget(w.learn)  # the Learn pages are made on the tab's first use
    made_later = [b for b in boxes() if b not in at_start]
    assert made_later  # the tiles' block sliders, ...
    wheel_focus = [b for b in boxes() if b.focusPolicy() == Qt.FocusPolicy.WheelFocus]
    assert wheel_focus == []


def _in_view(w, widget: QWidget) -> bool:
    """Whether the widget lies whole in the visible part of the Inputs scroll area."""
    viewport = w.inputs_scroll.viewport()
    return viewport.rect().contains(QRect(widget.mapTo(viewport, QPoint(0, 0)), widget.size()))


def test_the_variant_box_is_in_reach_without_scrolling_at_1400_by_900(open_window):
    w = open_window(journey_preset(), size=(1400, 900))
    assert (w.width(), w.height()) == (1400, 900)
    assert w.inputs_scroll.verticalScrollBar().value() == 0
    panel = w.inputs.variant
    for widget in (panel.mask, panel.align, panel.softcap_on, panel.texts["softcap"]):
        assert widget.isVisible() and _in_view(w, widget), widget


def _places(w) -> dict[str, QPoint]:
    """Where each visible control of the Options and Variant boxes sits in the inputs panel."""
    i = w.inputs
    controls = {
        "scale": i.scale_mode,
        "rows": i.masked_rows,
        "backend": i.backend,
        "mask": i.variant.mask,
        "left": i.variant.texts["left"],
        "softcap": i.variant.softcap_on,
        "cap": i.variant.texts["softcap"],
        "alibi": i.variant.alibi,
        "rope": i.variant.rope,
        "decode": i.variant.decode_on,
    }
    return {name: c.mapTo(i, QPoint(0, 0)) for name, c in controls.items() if c.isVisible()}


def _laid_out(settle, w) -> None:
    settle(w)
    for _ in range(3):  # the nested layouts' posted requests, then their children's
        QApplication.processEvents()


def test_ticking_softcap_moves_no_control_and_unticking_keeps_the_cap(settle, open_window):
    w = open_window(journey_preset(), size=(1400, 900))
    panel = w.inputs.variant
    panel.mask.setCurrentIndex(panel.mask.findData("window"))
    panel.mask.activated.emit(panel.mask.currentIndex())
    _laid_out(settle, w)
    assert w.inputs.session.variant.mask == "window"
    places, rule_height = _places(w), panel.rule.height()
    panel.softcap_on.click()
    _laid_out(settle, w)
    assert w.inputs.session.variant.softcap == 30.0
    assert panel.rule.height() > rule_height  # the longer rule wraps to more lines ...
    assert _places(w) == places  # ... and no control moved
    cap = panel.texts["softcap"]
    cap.setText("7.25")
    cap.editingFinished.emit()
    _laid_out(settle, w)
    assert w.inputs.session.variant.softcap == 7.25
    panel.softcap_on.click()  # untick
    _laid_out(settle, w)
    assert w.inputs.session.variant.softcap is None and cap.text() == "7.25"
    assert _places(w) == places
    panel.softcap_on.click()  # tick again: the same cap
    _laid_out(settle, w)
    assert w.inputs.session.variant.softcap == 7.25 and cap.text() == "7.25"

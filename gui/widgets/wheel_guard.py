"""The wheel never edits by accident: a combo box, spin box or slider takes the mouse wheel only
while it has the focus; otherwise the wheel scrolls the panel it sits in.

Scrolling the Inputs panel with the pointer resting on `scale` turned "none (1)" into
"1/sqrt(d_k)", and one notch over `L` removed a token. The guard keeps such a wheel event from
the widget and hands it to the nearest scroll area around it, which scrolls. (It hands it on
itself rather than leaving an ignored event to Qt: Qt 6 passes only spontaneous wheel events on
to the parents, so the path would differ between a real wheel and a test's.) The widgets also
stop taking the focus from the wheel (Qt's default, WheelFocus): a click or Tab gives it.
"""

from __future__ import annotations

from PyQt6.QtCore import QEvent, QObject, QPointF, Qt
from PyQt6.QtGui import QWheelEvent
from PyQt6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)  # scroll bars aside: they scroll


class WheelGuard(QObject):
    """Event filter: a wheel event over an unfocused guarded widget scrolls its scroll area."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Wheel or watched.hasFocus():
            return False
        area = scroll_area_of(watched)
        if area is None:
            event.ignore()  # nothing to scroll: Qt may offer it to the parents
        else:
            area_wheel(area, watched, event)
        return True  # the widget itself never sees it


def scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    """The nearest scroll area `widget` sits in (inside its viewport), or None."""
    parent = widget.parentWidget()
    while parent is not None:
        area = parent.parentWidget()
        if isinstance(area, QAbstractScrollArea) and area.viewport() is parent:
            return area
        parent = area
    return None


def area_wheel(area: QAbstractScrollArea, widget: QWidget, event: QWheelEvent) -> None:
    """Give `area` the wheel event `widget` got, at the same place on screen."""
    viewport = area.viewport()
    pos = QPointF(widget.mapTo(viewport, event.position().toPoint()))
    moved = QWheelEvent(
        pos,
        event.globalPosition(),
        event.pixelDelta(),
        event.angleDelta(),
        event.buttons(),
        event.modifiers(),
        event.phase(),
        event.inverted(),
    )
    QApplication.sendEvent(viewport, moved)
    event.setAccepted(moved.isAccepted())


def guarded(widget: QWidget) -> bool:
    """Whether the guard applies to `widget`: combo and spin boxes and sliders, not scroll bars."""
    return isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar)


def guard_wheel(root: QWidget) -> int:
    """Guard every combo box, spin box and slider under `root` (once each); how many were new."""
    guard = root.findChild(WheelGuard, options=Qt.FindChildOption.FindDirectChildrenOnly)
    if guard is None:
        guard = WheelGuard(root)  # lives as long as the widgets it guards
    count = 0
    for widget in root.findChildren(QWidget):
        if not guarded(widget) or widget.property("wheel_guarded"):
            continue
        widget.installEventFilter(guard)
        widget.setProperty("wheel_guarded", True)
        if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
            widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # focus by click or Tab only
        count += 1
    return count

"""A button switched off while its work runs keeps the keyboard focus it had (Qt would hand it
on to the next field: after Generate, the temperature box with its text selected)."""

from __future__ import annotations

from PyQt6.QtCore import Qt
from PyQt6.QtWidgets import QAbstractButton

PARKED = "focus_parked"  # the button's property: its focus waits on its parent


def set_enabled_keeping_focus(button: QAbstractButton, enabled: bool) -> None:
    """Enable or disable `button`; disabled with the focus, it parks the focus on its parent
    (which takes no typing), and enabled again it takes the focus back if nothing else did."""
    parent = button.parentWidget()
    if not enabled and button.hasFocus() and parent is not None:
        parent.setFocus(Qt.FocusReason.OtherFocusReason)  # before setEnabled moves it onward
        button.setProperty(PARKED, True)
    button.setEnabled(enabled)
    if enabled and button.property(PARKED):
        button.setProperty(PARKED, False)
        if parent is not None and parent.hasFocus():  # the user has not clicked elsewhere
            button.setFocus(Qt.FocusReason.OtherFocusReason)

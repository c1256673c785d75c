"""The window's small controls, built in one place: a combo box of keys, a row of labelled
widgets, a word-wrapped label, a font, a plot that neither zooms nor pans."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyqtgraph as pg
from PyQt6.QtCore import QSignalBlocker, Qt
from PyQt6.QtGui import QFont
from PyQt6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLayout, QWidget


def combo(labels: Mapping[str, str] | Iterable[str], tip: str = "") -> QComboBox:
    """A combo box of {key: text} (or of texts that are their own keys), key as item data."""
    box = QComboBox()
    pairs = labels.items() if isinstance(labels, Mapping) else ((t, t) for t in labels)
    for key, text in pairs:
        box.addItem(text, key)
    if tip:
        box.setToolTip(tip)
    return box


def select(box: QComboBox, key: object) -> None:
    """Show the item whose data is `key` (nothing changes when there is none)."""
    i = box.findData(key)
    if i >= 0:
        box.setCurrentIndex(i)


def row(*items: QWidget | QLayout | str | int | tuple, margins: tuple = ()) -> QHBoxLayout:
    """A row of widgets and layouts, left to right: a str is a label, an int a stretch of that
    factor, (widget, factor) a widget that stretches; margins: (left, top, right, bottom)."""
    line = QHBoxLayout()
    if margins:
        line.setContentsMargins(*margins)
    for item in items:
        item, stretch = item if isinstance(item, tuple) else (item, 0)
        if isinstance(item, int):
            line.addStretch(item)
        elif isinstance(item, QLayout):
            line.addLayout(item, stretch)
        else:
            line.addWidget(QLabel(item) if isinstance(item, str) else item, stretch)
    return line


def label(
    text: str = "",
    rich: bool = False,
    selectable: bool = False,
    top_left: bool = False,
    style: str = "",
) -> QLabel:
    """A word-wrapped label (rich: HTML; selectable: by the mouse; top_left: aligned there)."""
    shown = QLabel(text)
    shown.setWordWrap(True)
    if rich:
        shown.setTextFormat(Qt.TextFormat.RichText)
    if selectable:
        shown.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if top_left:
        shown.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
    if style:
        shown.setStyleSheet(style)
    return shown


def font(points: int, mono: bool = False, bold: bool = False, stretch: int | None = None) -> QFont:
    """The default type (or a monospace one) at `points`, maybe bold or stretched (percent)."""
    chosen = QFont("monospace") if mono else QFont()
    chosen.setPointSize(points)
    if mono:
        chosen.setStyleHint(QFont.StyleHint.Monospace)
    chosen.setBold(bold)
    if stretch is not None:
        chosen.setStretch(stretch)
    return chosen


def still_plot(plot: pg.PlotWidget | pg.PlotItem) -> None:
    """A plot the mouse cannot zoom or pan, with no menu and no auto-range button."""
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()


def set_quietly(box: QWidget, lo: int, hi: int, value: int | None = None) -> None:
    """A spin box's or slider's range (and value) set without a signal: nothing recomputes."""
    with QSignalBlocker(box):
        box.setRange(lo, hi)
        if value is not None:
            box.setValue(value)

"""Token axis: names heatmap cells by their labels, rotating key labels before thinning them."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PyQt6.QtCore import QPointF, QRectF, Qt
from PyQt6.QtGui import QFontMetrics

NICE_STEPS = (1, 2, 5)  # tick spacing 1, 2, 5, 10, 20, 50, ... tokens
TURN_BACK = 1.15  # cells this much wider than a label before turned labels turn back
GAP = 2  # pixels between two labels side by side (lines of text need none: their height has
# room above and below the letters, as in a paragraph)
LONGEST_LABEL = 110  # pixels: a longer label is elided ('extraordin…'), whole in the hover
LONGEST_COMPACT = 24  # the same in a small tile (the overview's 100-pixel columns)


def nice_every(every: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least `every`."""
    scale = 1
    while True:
        for step in NICE_STEPS:
            if step * scale >= every:
                return step * scale
        scale *= 10


def visible_ticks(
    labels: list[str], lo: float, hi: float, pixels: float, room: float
) -> list[tuple[int, str]]:
    """Labels of the cells in view [lo, hi], every n-th so each gets `room` pixels on screen."""
    lo, hi = min(lo, hi), max(lo, hi)  # an inverted axis (rows down) gives them swapped
    first, last = max(0, math.ceil(lo)), min(len(labels) - 1, math.floor(hi))
    if last < first or pixels <= 0 or hi <= lo:
        return []
    per_cell = pixels / (hi - lo)  # pixels one cell takes at this zoom
    every = nice_every(room / per_cell)
    start = math.ceil(first / every) * every
    return [(i, labels[i]) for i in range(start, last + 1, every)]


def keep_apart(
    spans: list[tuple[float, float]], lo: float, hi: float, gap: float = GAP
) -> list[tuple[int, float, float]]:
    """(index, start, end) of the spans kept: each moved inside [lo, hi], none closer than `gap`
    pixels to the last one kept."""
    kept: list[tuple[int, float, float]] = []
    for n, (start, end) in enumerate(spans):
        size = end - start
        if size > hi - lo:
            continue
        start = min(max(start, lo), hi - size)  # an edge label slides inside the axis
        if kept and start < kept[-1][2] + gap:
            continue
        kept.append((n, start, start + size))
    return kept


_ELIDED: dict[tuple, tuple[list[str], int]] = {}  # the last few label sets, elided and measured
_ELIDED_KEPT = 16


def _elided(metrics: QFontMetrics, labels: tuple[str, ...], longest: int) -> tuple[list[str], int]:
    """(each label elided to `longest` pixels, the widest one's pixels), remembered: every
    heatmap of a 4096-token trace shows the same 4096 labels."""
    key = (metrics.height(), metrics.averageCharWidth(), longest, labels)
    if key not in _ELIDED:
        texts = [metrics.elidedText(t, Qt.TextElideMode.ElideRight, longest) for t in labels]
        _ELIDED[key] = texts, max((metrics.horizontalAdvance(t) for t in texts), default=0)
        while len(_ELIDED) > _ELIDED_KEPT:
            del _ELIDED[next(iter(_ELIDED))]
    return _ELIDED[key]


class TokenAxis(pg.AxisItem):
    """An axis whose ticks are the cells' labels: all of them when they fit; key labels turn
    vertical when horizontal ones would collide, and are thinned only when vertical ones would."""

    def __init__(self, orientation: str, longest: int = LONGEST_LABEL) -> None:
        super().__init__(orientation)
        self.longest = longest  # pixels a label may take before it is elided
        self.setStyle(tickLength=4)  # ticks outside the matrix: inside, they cut the numbers
        self.labels: list[str] = []
        self.rotated = False  # bottom axis: labels drawn vertically
        self._texts: list[str] = []  # the labels as drawn (long ones elided)
        self._shown: list[tuple[int, str]] = []  # the ticks of the last layout
        self.drawn: list[tuple[QRectF, str]] = []  # each label's rectangle on the axis, as drawn

    def set_labels(self, labels: list[str]) -> None:
        """The label of each cell along this axis."""
        if list(labels) != self.labels or not self._texts:  # 4096 labels: measured once
            self.labels = list(labels)
            metrics = self._metrics()
            # a position's own name ('t4095', what a grown input is labelled) is never cut:
            # at 4096 tokens a small tile read 't10...', 't12...' (24 pixels in DejaVu Sans)
            room = max(self.longest, metrics.horizontalAdvance(f"t{len(labels) - 1}") + 1)
            self._texts, self._widest_px = _elided(metrics, tuple(labels), room)
        self.setTicks(None)  # automatic ticks (tickValues below), redrawn with the new labels
        self.picture = None
        self.update()

    def _metrics(self) -> QFontMetrics:
        return QFontMetrics(self.style.get("tickFont") or self.font())

    _widest_px: int | None = None  # the widest label's pixels, measured once per label set

    def _widest(self) -> int:
        if self._widest_px is None:
            metrics = self._metrics()
            self._widest_px = max((metrics.horizontalAdvance(t) for t in self._texts), default=0)
        return self._widest_px

    def _across(self, rotated: bool) -> float:
        """Pixels one label needs along the axis: a line's height, or its width and a gap."""
        if self.orientation in ("left", "right") or rotated:
            return self._metrics().height()
        return self._widest() + GAP

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list:
        per_cell = size / max(abs(maxVal - minVal), 1e-9)
        vertical = self.orientation in ("left", "right")
        # turned while the cells are narrower than a label; turned back only once they are
        # clearly wider: a label's turn changes the axis's depth, which can resize the view by
        # a pixel or two, and without this margin the two would turn each other forever
        wide = self._across(False) * (TURN_BACK if self.rotated else 1.0)
        rotated = not vertical and per_cell < wide
        if not vertical and rotated != self.rotated:
            self.rotated = rotated
            self._set_depth()
        ticks = visible_ticks(self._texts, minVal, maxVal, size, self._across(rotated))
        self._shown = ticks
        return [(1, [float(i) for i, _ in ticks])] if ticks else []

    def fit_to_view(self) -> None:
        """Turn the labels (or back) for the linked view's zoom and size now, before a paint:
        a turn decided while painting would draw once in the old depth, cut off."""
        view = self.linkedView()
        if view is not None and self.orientation in ("top", "bottom"):
            (lo, hi), _ = view.viewRange()
            self.tickValues(lo, hi, view.width())

    def _set_depth(self) -> None:
        """Room across the axis for the labels, now that they turned."""
        self.textHeight = self._depth()
        self._updateHeight()

    def _depth(self) -> int:
        """Pixels across the axis the labels need: the widest one, unless written along it."""
        if self.orientation in ("left", "right") or self.rotated:
            return self._widest() + 1 + abs(self.style["tickLength"])
        return self._metrics().height() + abs(self.style["tickLength"])

    def _updateMaxTextSize(self, x: int) -> None:
        super()._updateMaxTextSize(self._depth())  # pyqtgraph measures only the labels it drew

    def tickStrings(self, values: list, scale: float, spacing: float) -> list[str]:
        n = len(self._texts)
        return [self._texts[int(round(v))] if 0 <= round(v) < n else "" for v in values]

    def generateDrawSpecs(self, p):
        specs = super().generateDrawSpecs(p)
        if specs is None:
            return None
        axis_spec, tick_specs, _ = specs
        self.drawn = self._layout()
        flags = Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextDontClip
        return axis_spec, tick_specs, [(r, flags, t) for r, t in self.drawn]

    def _layout(self) -> list[tuple[QRectF, str]]:
        """Where each shown label goes: centred on its cell, inside the axis, none overlapping."""
        view = self.linkedView()
        if view is None or not self._shown:
            return []
        bounds = self.boundingRect()
        metrics = self._metrics()
        vertical = self.orientation in ("left", "right")
        offset = abs(self.style["tickLength"]) + self.style["tickTextOffset"][0 if vertical else 1]
        line = metrics.height()
        spans, sizes = [], []
        for i, text in self._shown:
            at = self.mapFromScene(view.mapViewToScene(QPointF(i, i)))
            width = metrics.horizontalAdvance(text) + 1
            if vertical:
                centre, along, across = at.y(), line, width
            else:
                centre = at.x()
                along, across = (line, width) if self.rotated else (width, line)
            spans.append((centre - along / 2, centre + along / 2))
            sizes.append(across)
        lo, hi = (bounds.top(), bounds.bottom()) if vertical else (bounds.left(), bounds.right())
        drawn = []
        lines = vertical or self.rotated
        for n, start, end in keep_apart(spans, lo, hi, 0 if lines else GAP):
            across, text = sizes[n], self._shown[n][1]
            if self.orientation == "left":
                rect = QRectF(bounds.right() - offset - across, start, across, end - start)
            elif self.orientation == "right":
                rect = QRectF(bounds.left() + offset, start, across, end - start)
            else:  # bottom (a rotated label's rectangle stands upright)
                rect = QRectF(start, bounds.top() + offset, end - start, across)
            drawn.append((rect, text))
        return drawn

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs) -> None:
        if not self.rotated or self.orientation in ("left", "right"):
            super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
            return
        super().drawPicture(p, axisSpec, tickSpecs, [])
        p.setPen(self.textPen())
        for rect, _flags, text in textSpecs:  # upright rectangles: text read from the bottom up
            p.save()
            p.translate(rect.center().x(), rect.top())
            p.rotate(-90)
            box = QRectF(-rect.height(), -rect.width() / 2, rect.height(), rect.width())
            p.drawText(box, int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), text)
            p.restore()

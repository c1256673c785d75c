"""Heatmap widget: one matrix as a row-major ImageItem with token ticks, colour bar and numbers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyqtgraph as pg
from PyQt6.QtCore import QEvent, QPointF, QRectF, Qt, pyqtSignal
from PyQt6.QtGui import QBrush, QColor, QFontMetrics, QPen
from PyQt6.QtWidgets import QGraphicsRectItem, QVBoxLayout, QWidget

from gui.present import pooled
from gui.present.view_model import Panel
from gui.widgets import controls
from gui.widgets.cell_numbers import CellNumbers, CellText
from gui.widgets.hover_tip import HoverTip
from gui.widgets.token_axis import LONGEST_COMPACT, LONGEST_LABEL, TokenAxis

pg.setConfigOptions(background="w", foreground="k", antialias=True)

COLORMAPS = {"signed": "CET-D1A", "weights": "viridis"}
MASKED_BACKGROUND = (215, 215, 215)  # masked (-inf) cells are NaN in the image: grey shows through
ASPECT_LIMIT = 4  # square cells up to 4:1 matrices; a 512 x 3 matrix gets wide cells instead
CRISP_PIXELS = 1024  # vector export: each side of a heatmap image upsampled to about this


TITLE_PADDING = 12  # pixels of a compact tile's width its title cannot use (margins)


def title_over_axis(plot: pg.PlotItem) -> None:
    """The title spans the row labels' column too: in a compact tile the axis column stood
    empty above the labels while the title was cut ('sink_weights' at 1024 pixels)."""
    plot.layout.removeItem(plot.titleLabel)
    plot.layout.addItem(plot.titleLabel, 0, 0, 1, 3)  # row 0, columns 0-2: axis, cells, right


def wrap_words(text: str, metrics: QFontMetrics, room: int) -> list[str]:
    """`text` in lines of whole words, each at most `room` pixels wide where a word allows."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and metrics.horizontalAdvance(f"{lines[-1]} {word}") <= room:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return lines


def _cosmetic(colour: QColor, pixels: int) -> QPen:
    """A pen `pixels` wide on screen whatever the zoom."""
    pen = QPen(colour, pixels)
    pen.setCosmetic(True)
    return pen


class Heatmap(QWidget):
    """A matrix heatmap; emits the hovered cell and, when compact, clicks."""

    cellHovered = pyqtSignal(object)  # (row, col) or None when the mouse leaves the matrix
    clicked = pyqtSignal()

    def __init__(self, compact: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.compact = compact
        self.panel: Panel | None = None
        self._hover: tuple[int, int] | None = None
        self._marks: list[QGraphicsRectItem] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.view = pg.GraphicsLayoutWidget()
        self.view.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        layout.addWidget(self.view)
        longest = LONGEST_COMPACT if compact else LONGEST_LABEL
        axes = {"left": TokenAxis("left", longest), "bottom": TokenAxis("bottom", longest)}
        self.view.ci.setContentsMargins(2, 2, 2, 2)  # pyqtgraph's margins were the cells' room
        self.view.ci.setSpacing(4)
        self.plot = self.view.addPlot(row=0, col=0, axisItems=axes)
        self._title = ""  # the panel's title as asked, before fit_title wraps it
        self._factor = ""  # the common factor the cells' numbers are written in ('1e-03')
        if compact:
            title_over_axis(self.plot)
        self.plot.invertY(True)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        # the large views zoom with the mouse wheel and pan by dragging; tiles only click
        self.plot.getViewBox().setMouseEnabled(x=not compact, y=not compact)
        self._backdrop = QGraphicsRectItem()  # grey behind the matrix only: NaN cells show it
        self._backdrop.setBrush(QBrush(QColor(*MASKED_BACKGROUND)))
        self._backdrop.setPen(QPen(Qt.PenStyle.NoPen))
        self._backdrop.setZValue(-10)
        self.plot.addItem(self._backdrop)
        self.image_item = pg.ImageItem(axisOrder="row-major")
        self.numbers = CellNumbers(self.plot)
        self.plot.addItem(self.image_item)
        self.bar = None
        if not compact:
            self.bar = pg.ColorBarItem(
                values=(0, 1),
                colorMap=COLORMAPS["weights"],
                interactive=False,
                width=18,
                colorMapMenu=False,
            )
            self.bar.setImageItem(self.image_item)
            self.bar.getAxis("right").enableAutoSIPrefix(False)  # the bar's value axis
            self.view.addItem(self.bar, row=0, col=1)
        self._hover_box = QGraphicsRectItem()
        self._hover_box.setPen(_cosmetic(QColor(255, 140, 0), 3))
        self._hover_box.setZValue(20)
        self._hover_box.hide()
        self.plot.addItem(self._hover_box)
        self.plot.getViewBox().sigResized.connect(self._fit_texts)
        self.plot.getViewBox().sigRangeChanged.connect(self._fit_texts)
        self.view.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.view.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        small = controls.font(7 if compact else 9)
        for side in ("left", "bottom"):
            self.plot.getAxis(side).setStyle(tickFont=small)
            self.plot.getAxis(side).enableAutoSIPrefix(False)  # token axes have no units
        self.plot.setAspectLocked(True)  # square cells

    # ---------------------------------------------------------------- content

    def show_panel(self, panel: Panel) -> None:
        """Render one panel: fixed levels, float32 row-major image, labels, numbers."""
        self.panel = panel
        rows, cols = panel.shape  # cells: a pooled image is stretched over them
        cmap = pg.colormap.get(COLORMAPS[panel.kind])
        # the fast path: fixed levels, float32 C-contiguous row-major data
        self.image_item.setColorMap(cmap)
        self.image_item.setImage(panel.image, autoLevels=False, levels=panel.levels)
        self.image_item.setRect(QRectF(-0.5, -0.5, cols, rows))
        self._backdrop.setRect(QRectF(-0.5, -0.5, cols, rows))
        if self.bar is not None:
            self.bar.setColorMap(cmap)
            self.bar.setLevels(values=panel.levels)
            self.bar.getAxis("right").setWidth(self._bar_axis_width(panel.levels))
        self.plot.getAxis("bottom").set_labels(panel.col_labels)
        self.plot.getAxis("left").set_labels(panel.row_labels)
        if not self.compact:
            rows_per, cols_per = panel.blocks  # a 4096-token matrix is drawn pooled: said here
            self.plot.setLabel("left", panel.row_axis + pooled.axis_note(rows_per))
            self.plot.setLabel("bottom", panel.col_axis + pooled.axis_note(cols_per, why=True))
        # square cells unless the matrix is long and thin: then a hairline would be unreadable
        self.plot.setAspectLocked(max(rows, cols) <= ASPECT_LIMIT * min(rows, cols))
        # no pan/zoom limits: with the aspect locked they would cut the whole-matrix view
        self.reset_zoom()
        self.clear_highlight()
        self._hover = None
        self._hover_box.hide()
        self._factor = self.numbers.set_panel(None if self.compact else panel, cmap)
        self._title = ""
        self._fit_texts()
        self._set_title()

    def _set_title(self) -> None:
        """The panel's title, with small lines under it: the colour range (said here, not along
        the bar: the width it took was the cells') and, while cells show numbers, their factor."""
        notes = [self.panel.colour_note if self.bar is not None else ""]
        if self._factor:  # said only while cells show numbers; its line kept, so the plot's
            # height (which decides whether numbers fit) does not change with it
            shown = self.numbers.point_size > 0
            notes.append(f"numbers in cells x {self._factor}" if shown else "&nbsp;")
        note = "".join(f"<br><span style='font-size:7pt'>{n}</span>" for n in notes if n)
        if self.panel.title + note == self._title:
            return
        self._title = self.panel.title + note
        self.plot.setTitle(self._title, size="8pt" if self.compact else "11pt")
        if not self.compact:  # pyqtgraph's 30-pixel title row cut a title with two small lines
            height = max(30, math.ceil(self.plot.titleLabel.itemRect().height()))
            self.plot.titleLabel.setMaximumHeight(height)
            self.plot.layout.setRowFixedHeight(0, height)
        self.fit_title()

    def fit_title(self) -> None:
        """The title on as many lines as its width needs (one, mostly): at 1024 x 700 the
        backward view's 'grad_head_outputs head 0' was wider than its 172-pixel input panel, and
        with Noto at 1400 x 900 the kernel check's '|output - truth|, plain: largest 0.75,
        bound ...' was wider than its map; either cut the title's end and pushed the plot's
        right side (its last column, the colour bar) past the widget's edge."""
        if not self._title:
            return
        first, sep, rest = self._title.partition("<br>")  # a small second line stays as it is
        size = 8 if self.compact else 11
        metrics = QFontMetrics(controls.font(size))
        room = self.view.width() - TITLE_PADDING
        if not self.compact:  # the title spans the cells only: not the row labels, not the bar
            room -= int(self.plot.getAxis("left").width())
            room -= int(self.bar.boundingRect().width()) if self.bar is not None else 0
        lines = wrap_words(first, metrics, room) if "<" not in first else [first]
        text = "<br>".join(lines) + sep + rest
        if text != self.plot.titleLabel.text:
            self.plot.setTitle(text, size=f"{size}pt")  # (its title row back to 30 pixels)
        if len(lines) > 1:  # 30 pixels hold a title and a small second line, not more
            notes = rest.count("<br>") + 1 if sep else 0
            small = QFontMetrics(controls.font(7)).lineSpacing()
            height = len(lines) * metrics.lineSpacing() + notes * small
            height = max(30, height + 8)
            self.plot.titleLabel.setMaximumHeight(height)
            self.plot.layout.setRowFixedHeight(0, height)
        # pyqtgraph sizes its layout to the view only when the view resizes: a layout held wider
        # by the title before it wrapped kept the cells and the colour bar past the view's edge
        self.view.ci.layout.invalidate()  # (its minimum size is cached: the title's old one)
        self.view.ci.setGeometry(self.view.range)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit_title()

    def _bar_axis_width(self, levels: tuple[float, float]) -> int:
        """Pixels the colour bar's tick labels need (pyqtgraph fixes 45: '0.0005' was cut)."""
        axis = self.bar.getAxis("right")
        metrics = QFontMetrics(axis.style.get("tickFont") or axis.font())
        texts = [
            text
            for spacing, values in axis.tickValues(levels[0], levels[1], 400)
            for text in axis.tickStrings(values, 1.0, spacing)
        ]
        widest = max((metrics.horizontalAdvance(t) for t in texts), default=0)
        return max(45, widest + 16)

    def reset_zoom(self) -> None:
        """Show the whole matrix (double-click does the same)."""
        if self.panel is None:
            return
        rows, cols = self.panel.shape
        # one call for both axes: with the aspect locked, setting x then y lets the second call
        # shrink the first range to keep cells square, cutting columns off the view
        box = self.plot.getViewBox()
        box.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)

    @property
    def _texts(self) -> list[CellText]:
        """The cell numbers drawn now (those in view, while they fit)."""
        return list(self.numbers.items.values())

    def _fit_texts(self, *_: object) -> None:
        """Key labels turn for the new zoom or size; numbers show in the cells in view whenever
        they fit (no overlaps)."""
        self.plot.getAxis("bottom").fit_to_view()
        if not self.compact:
            self.numbers.fit()
            if self.panel is not None and self._title:
                self._set_title()  # the numbers' factor comes and goes with the numbers

    @contextmanager
    def crisp(self) -> Iterator[None]:
        """While painting into SVG: the image upsampled nearest-neighbour, so no viewer blurs it."""
        panel = self.panel
        if panel is None or not self.isVisible():
            yield
            return
        rows, cols = panel.shape
        k = max(1, CRISP_PIXELS // max(panel.image.shape))  # whole pixels of k x k
        big = np.repeat(np.repeat(panel.image, k, axis=0), k, axis=1)  # (rows*k, cols*k)
        rect = QRectF(-0.5, -0.5, cols, rows)
        self.image_item.setImage(big, autoLevels=False, levels=panel.levels)
        self.image_item.setRect(rect)
        try:
            yield
        finally:
            self.image_item.setImage(panel.image, autoLevels=False, levels=panel.levels)
            self.image_item.setRect(rect)

    # ---------------------------------------------------------------- highlight and hover

    def clear_highlight(self) -> None:
        """Remove the row/column marks."""
        for mark in self._marks:
            self.plot.removeItem(mark)
        self._marks = []

    def highlight(self, axis: int, index: int) -> None:
        """Outline row `index` (axis 0) or column `index` (axis 1): a source of the hovered cell."""
        if self.panel is None:
            return
        rows, cols = self.panel.shape
        if axis == 0 and 0 <= index < rows:
            rect = QRectF(-0.5, index - 0.5, cols, 1)
        elif axis == 1 and 0 <= index < cols:
            rect = QRectF(index - 0.5, -0.5, 1, rows)
        else:
            return
        mark = QGraphicsRectItem(rect)
        mark.setPen(_cosmetic(QColor(255, 140, 0), 3))
        mark.setBrush(QBrush(QColor(255, 165, 0, 70)))
        mark.setZValue(10)
        self.plot.addItem(mark)
        self._marks.append(mark)

    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        """The (row, col) under a scene position, or None outside the matrix."""
        box = self.plot.getViewBox()
        if self.panel is None or not box.sceneBoundingRect().contains(scene_pos):
            return None
        p = box.mapSceneToView(scene_pos)
        row, col = math.floor(p.y() + 0.5), math.floor(p.x() + 0.5)
        rows, cols = self.panel.shape
        return (row, col) if 0 <= row < rows and 0 <= col < cols else None

    def hover(self, row: int, col: int) -> None:
        """Act as if the mouse were over cell (row, col) (command line, tests)."""
        self._on_mouse_moved(self.scene_position(row, col))

    def scene_position(self, row: int, col: int) -> QPointF:
        """The scene position of the centre of cell (row, col)."""
        return self.plot.getViewBox().mapViewToScene(QPointF(col, row))

    def _on_mouse_moved(self, scene_pos) -> None:
        cell = self.cell_at(scene_pos)
        if cell == self._hover:
            return
        self._hover = cell
        if cell is None:
            self._hover_box.hide()
        else:
            self._hover_box.setRect(QRectF(cell[1] - 0.5, cell[0] - 0.5, 1, 1))
            self._hover_box.show()
        self.cellHovered.emit(cell)

    def event(self, event) -> bool:
        """The tooltip shows in the window (gui.widgets.hover_tip), hidden as the mouse leaves."""
        if event.type() == QEvent.Type.ToolTip and self.toolTip():
            HoverTip.of(self).show_text(self, event.pos(), self.toolTip())
            return True
        if event.type() == QEvent.Type.Leave:
            HoverTip.of(self).hide()
        return super().event(event)

    def _on_mouse_clicked(self, event) -> None:
        if self.compact:
            self.clicked.emit()
        elif event.double():
            self.reset_zoom()

"""The Model tab's block view: one layer of the model as numbered boxes, each a small heatmap of
its array with its shape (embeddings, norm, attention, residual, MLP, output), so a learner sees
where attention sits; the attention box opens the head grid, the norm box (x, what the heads
read) the head in the pipeline. The block is computed in a worker; this widget only draws."""

from __future__ import annotations

import numpy as np
from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtGui import QImage, QPixmap
from PyQt6.QtWidgets import QFrame, QGridLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

import scratch
from gui.present import block_view_model as bvm
from gui.widgets import controls
from gui.widgets.model_grid import colour_table, coloured
from gui.work.model_worker import ModelWorker

IMAGE_W, IMAGE_H = 150, 50  # each box's heatmap, in pixels (matrices are stretched to fit)
BOX_W = 180  # a box's width at scale 1: the columns reflow to the view's width
MAX_SCALE = 2.5  # boxes grow up to this factor where the view has room for all of them
MAPS = {"weights": "viridis", "logits": "viridis", "signed": "CET-D1A"}


def box_image(box: bvm.Box) -> QImage:
    """The box's matrix as an RGBA QImage, coloured at its levels (weights larger than the
    picture max-pooled to its pixels, so no bright cell is dropped)."""
    table = colour_table(MAPS[box.kind])
    lo, hi = box.levels
    image = bvm.max_pool(box.image, IMAGE_H, IMAGE_W) if box.kind == "weights" else box.image
    scaled = (image - lo) / ((hi - lo) or 1.0)  # (rows, cols) in 0..1 at the levels
    index = np.clip(np.nan_to_num(scaled) * 255, 0, 255).round().astype(np.uint8)
    return coloured(index, table)


def fit(n: int, width: int, height: int, text_h: int, spacing: int) -> tuple[int, float]:
    """(columns, scale) for n boxes in a width x height area: the largest scale, 1 to MAX_SCALE,
    at which all of them fit without scrolling (a box is BOX_W * scale wide, its picture
    IMAGE_H * scale tall above text_h pixels of words); else scale 1, as many columns as fit."""
    best = (max(1, (width + spacing) // (BOX_W + spacing)), 1.0)
    for columns in range(1, n + 1):
        scale = min(MAX_SCALE, (width - spacing * (columns - 1)) / columns / BOX_W)
        rows = -(-n // columns)
        tall = rows * (text_h + round(IMAGE_H * scale)) + spacing * (rows - 1)
        if scale > best[1] and tall <= height:
            best = (columns, scale)
    return best


class BoxWidget(QFrame):
    """One step: number and title, its heatmap, its shape, what it computes; maybe clickable."""

    clicked = pyqtSignal(str)  # the box's click target ("heads" or "pipeline")

    def __init__(self, number: int, box: bvm.Box, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.box = box
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setFixedWidth(BOX_W)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        self.title = controls.label(f"<b>{number}. {box.title}</b>")
        self.picture = QLabel()
        self.image = box_image(box)
        pixmap = QPixmap.fromImage(self.image).scaled(
            IMAGE_W, IMAGE_H, Qt.AspectRatioMode.IgnoreAspectRatio,
            Qt.TransformationMode.FastTransformation,  # cells stay sharp
        )  # fmt: skip
        self.picture.setPixmap(pixmap)
        self.picture.setFixedSize(IMAGE_W, IMAGE_H)
        self.scale = 1.0
        self.shape = QLabel(box.shape)
        self.words = controls.label(box.words)
        small = self.words.font()
        small.setPointSizeF(max(small.pointSizeF() - 1.5, 7.0))
        self.words.setFont(small)
        self.shape.setFont(small)
        for w in (self.title, self.picture, self.shape, self.words):
            layout.addWidget(w)
        layout.addStretch(1)
        tip = f"{box.title}: {box.shape}\n{box.words}"
        if box.click:
            self.setCursor(Qt.CursorShape.PointingHandCursor)
            where = "the head grid" if box.click == "heads" else "this head in the pipeline"
            tip += f"\nClick: open {where}"
        self.setToolTip(tip)

    def text_height(self) -> int:
        """Pixels the box takes besides its picture at scale 1 (the narrowest: most lines)."""
        tall = self.heightForWidth(BOX_W) if self.hasHeightForWidth() else -1
        return (tall if tall > 0 else self.sizeHint().height()) - IMAGE_H

    def set_scale(self, scale: float) -> None:
        """Width BOX_W * scale and the picture IMAGE_W x IMAGE_H times scale."""
        if scale == self.scale:
            return
        self.scale = scale
        w, h = round(IMAGE_W * scale), round(IMAGE_H * scale)
        self.setFixedWidth(round(BOX_W * scale))
        self.picture.setPixmap(
            QPixmap.fromImage(self.image).scaled(
                w, h, Qt.AspectRatioMode.IgnoreAspectRatio, Qt.TransformationMode.FastTransformation
            )
        )
        self.picture.setFixedSize(w, h)

    def mousePressEvent(self, event) -> None:
        if self.box.click:
            self.clicked.emit(self.box.click)
        super().mousePressEvent(event)


class ModelBlock(QWidget):
    """Layer n of a run as boxes; set_source computes the block in a worker and shows it."""

    boxClicked = pyqtSignal(str)  # "heads" or "pipeline"
    failed = pyqtSignal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.worker = ModelWorker(self)
        self.block = None  # the scratch.models.block.Block on screen
        self.head = 0
        self.boxes: list[BoxWidget] = []
        self.text_h = 0  # the tallest box's pixels besides its picture, at scale 1
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.title = controls.label("Run a model to see one of its layers here, step by step.")
        layout.addWidget(self.title)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.inner = QWidget()
        self.grid = QGridLayout(self.inner)
        self.grid.setSpacing(6)
        self.scroll.setWidget(self.inner)
        layout.addWidget(self.scroll, 1)
        self.worker.finished.connect(self.show_block)
        self.worker.failed.connect(self.failed)

    def set_source(self, source: object, layer: int, head: int) -> None:
        """Compute layer `layer` of a Run or a Decoding (every token so far) in the worker."""
        self.head = head
        self.title.setText(f"Layer {layer}: computing its steps...")

        def work(report, stop) -> object:
            run = source.run() if hasattr(source, "extend") else source
            return scratch.models.layer_block(run, layer)

        self.worker.start(work)

    def show_block(self, block: object) -> None:
        """Draw a computed block: one box per step, numbered in the order they run."""
        self.block = block
        for w in self.boxes:
            self.grid.removeWidget(w)
            w.deleteLater()
        boxes = bvm.boxes(block, self.head)
        self.boxes = [BoxWidget(i + 1, b) for i, b in enumerate(boxes)]
        for w in self.boxes:
            w.clicked.connect(self.boxClicked)
        self.text_h = max(w.text_height() for w in self.boxes)
        self.title.setText(
            f"Layer {block.layer} of the model, step by step ({len(block.tokens)} tokens; "
            "signed boxes: blue negative, red positive). Attention is step "
            f"{[b.name for b in boxes].index('attention') + 1}: click it for the heads, "
            "click the norm (x, what the heads read) to open this head in the pipeline."
        )
        self._reflow()

    def columns(self) -> int:
        """How many boxes stand side by side at the current size."""
        return self.layout_now()[0]

    def layout_now(self) -> tuple[int, float]:
        """(columns, scale) for the scroll area's size (see fit)."""
        margins = self.grid.contentsMargins()
        bar = self.scroll.verticalScrollBar().sizeHint().width()  # room for it when it comes
        width = self.scroll.width() - margins.left() - margins.right() - bar - 4
        height = self.scroll.height() - margins.top() - margins.bottom() - 4
        return fit(len(self.boxes), width, height, self.text_h, self.grid.spacing())

    def _reflow(self) -> None:
        n, scale = self.layout_now()
        for w in self.boxes:
            self.grid.removeWidget(w)
            w.set_scale(scale)
        for i, w in enumerate(self.boxes):
            self.grid.addWidget(w, i // n, i % n, Qt.AlignmentFlag.AlignTop)
        for c in range(self.grid.columnCount()):  # the spare column and row of an earlier flow
            self.grid.setColumnStretch(c, 0)
        for r in range(self.grid.rowCount()):
            self.grid.setRowStretch(r, 0)
        self.grid.setColumnStretch(n, 1)
        self.grid.setRowStretch(len(self.boxes) // n + 1, 1)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.boxes:
            self._reflow()

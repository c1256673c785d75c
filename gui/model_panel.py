"""Model tab: type a text, see every head of a real model, open one in the pipeline."""

from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gui import numbers
from gui.head_view import HeadView
from gui.model_grid import ModelGrid
from gui.model_worker import ModelWorker

DEFAULT_TEXT = "Your journey starts with one step"
SINK_NOTE = (
    "Attention sink: in {share:.0%} of the heads most of the weight goes to {token}. A head "
    "with nothing useful to look at still has to put its softmax weight somewhere (each row "
    "sums to 1), and a token every row can see, such as [CLS], [SEP] or the first token, is the "
    "cheapest place: those heads are mostly 'off' for this text."
)


class ModelPanel(QWidget):
    """Text, model directory, the model view and the head view; emits headChosen(run, l, h)."""

    headChosen = pyqtSignal(object, int, int)  # Run, layer, head
    message = pyqtSignal(str)
    refused = pyqtSignal(str)  # a model or text that could not be run: the last run stays

    def _legend_chose(self, heads: list) -> None:
        """The head view's heads -> the head picker and the grid's outline (one head: it)."""
        every = len(heads) == self.head.count() - 1
        one = -1 if every else heads[0] if len(heads) == 1 else None
        self.head.blockSignals(True)
        self.head.setCurrentIndex(self.head.findData(one))  # a few heads: blank, the legend says
        self.head.blockSignals(False)
        if one is not None and one >= 0:
            self.grid.select(self.layer.value(), one)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run = None
        self.worker = ModelWorker(self)
        outer = QVBoxLayout(self)
        # step 1: what to run
        top = QHBoxLayout()
        self.model_path = QLineEdit("default")
        self.model_path.setToolTip(
            "'default' (all-MiniLM-L6-v2, SHA-256 checked) or a directory with config.json, "
            "model.safetensors and tokenizer.json (BERT or GPT-2 family)"
        )
        self.model_path.setMaximumWidth(220)
        self.text = QLineEdit(DEFAULT_TEXT)
        self.text.setPlaceholderText("Type a sentence")
        self.run_button = QPushButton("Run model")
        top.addWidget(QLabel("Model"))
        top.addWidget(self.model_path)
        top.addWidget(QLabel("Text"))
        top.addWidget(self.text, 1)
        top.addWidget(self.run_button)
        outer.addLayout(top)
        self.status = QLabel("Type a sentence and press Run model (the model loads once).")
        self.status.setWordWrap(True)
        outer.addWidget(self.status)
        # step 2: the model view (every head) beside the head view (one layer's lines)
        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        title = QLabel(
            "Model view: rows are layers, columns heads (each scaled to its own maximum)"
        )
        title.setWordWrap(True)  # a one-line title would widen the tab past a 1024-pixel window
        left_layout.addWidget(title)
        self.grid = ModelGrid()
        left_layout.addWidget(self.grid, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Head view: layer"))
        self.layer = QSpinBox()
        self.head = QComboBox()
        pick.addWidget(self.layer)
        pick.addWidget(QLabel("head"))
        pick.addWidget(self.head)
        self.open_button = QPushButton("Open in pipeline")
        pick.addStretch(1)
        right_layout.addLayout(pick)
        opening = QHBoxLayout()  # a row of its own: the head view fits beside the grid at 1024
        opening.addWidget(self.open_button)
        opening.addStretch(1)
        right_layout.addLayout(opening)
        self.lines = HeadView()
        right_layout.addWidget(self.lines, 1)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([600, 400])
        self.sinks = QLabel()
        self.sinks.setWordWrap(True)
        # what "export view" captures: both views and the sink note, not the text controls
        self.content = QWidget()
        views = QVBoxLayout(self.content)
        views.setContentsMargins(0, 0, 0, 0)
        views.addWidget(split, 1)
        views.addWidget(self.sinks)
        outer.addWidget(self.content, 1)
        # step 3: wiring
        self.run_button.clicked.connect(self.start)
        self.text.returnPressed.connect(self.start)
        self.worker.finished.connect(self.show_run)
        self.worker.failed.connect(self._failed)
        self.grid.headClicked.connect(self._grid_clicked)
        self.layer.valueChanged.connect(lambda _: self._show_lines())
        self.head.currentIndexChanged.connect(lambda _: self._show_lines())
        self.open_button.clicked.connect(self._open_current)
        self.lines.headsChanged.connect(self._legend_chose)  # the legend -> picker and grid
        self.layer.valueChanged.connect(lambda _: self._legend_chose(self.lines.heads))
        self.head.currentIndexChanged.connect(lambda _: self._legend_chose(self.lines.heads))

    def start(self) -> None:
        """Load the model (in the worker) and run the text; the previous run stays on screen."""
        self.status.setText(f"running {self.model_path.text() or 'default'}...")
        self.run_button.setEnabled(False)
        self.worker.submit(self.model_path.text().strip(), self.text.text())

    def _failed(self, message: str) -> None:
        self.run_button.setEnabled(True)
        kept = " (the last run stays on screen)" if self.run is not None else ""
        self.status.setText(f"refused: {message}{kept}")
        self.refused.emit(f"refused: {message}")

    def show_run(self, run: object) -> None:
        """Show a finished run: the grid, the head view of layer 0, the sink note."""
        self.run_button.setEnabled(True)
        self.run = run
        model = run.model
        self.text.setText(run.text)  # the text on screen is the one these views come from
        self.status.setText(
            f"{model.name}: {model.layers} layers x {model.heads} heads, "
            f"{numbers.count(len(run.tokens), 'token')}{', causal' if model.causal else ''}. "
            "Click a head to open it in the pipeline."
        )
        self.grid.set_attentions(run.attentions)
        self.layer.blockSignals(True)
        self.layer.setRange(0, model.layers - 1)
        self.layer.blockSignals(False)
        self.head.blockSignals(True)
        self.head.clear()
        self.head.addItem("all heads", -1)
        for h in range(model.heads):
            self.head.addItem(f"head {h}", h)
        self.head.blockSignals(False)
        self._show_lines()
        sinks = run.sinks()
        if sinks:
            token, share = max(sinks.items(), key=lambda kv: kv[1])
            self.sinks.setText(SINK_NOTE.format(share=share, token=token))
        else:
            self.sinks.setText("No attention sink in this text: no token takes most of a head.")

    def _show_lines(self) -> None:
        if self.run is None:
            return
        layer, head = self.layer.value(), self.head.currentData()
        heads = list(range(self.run.model.heads)) if head in (None, -1) else [head]
        self.lines.set_layer(self.run.tokens, self.run.attentions[layer], heads)

    def _grid_clicked(self, layer: int, head: int) -> None:
        self.layer.setValue(layer)
        self.head.setCurrentIndex(head + 1)
        self.headChosen.emit(self.run, layer, head)

    def _open_current(self) -> None:
        if self.run is None:
            return
        head = self.head.currentData()
        head = 0 if head in (None, -1) else head
        self.grid.select(self.layer.value(), head)
        self.headChosen.emit(self.run, self.layer.value(), head)

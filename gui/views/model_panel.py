"""Model tab: type a text, see every head of a real model, open one in the pipeline; for a
decoder also the next-token bars and Generate, one token at a time."""

from __future__ import annotations

import html

from PyQt6.QtCore import QSignalBlocker, Qt, pyqtSignal
from PyQt6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gui.present import numbers
from gui.state.token_text import readable
from gui.views.model_block import ModelBlock
from gui.widgets import controls
from gui.widgets.focus import set_enabled_keeping_focus
from gui.widgets.generate_bar import GenerateBar
from gui.widgets.head_view import HeadView
from gui.widgets.model_grid import ModelGrid
from gui.widgets.next_token_bars import NextTokenBars
from gui.widgets.spin_boxes import SpinBox
from gui.work.model_worker import DecoderFrame, ModelWorker

DEFAULT_TEXT = "Your journey starts with one step"
MODELS = (  # (what the model box holds, what the list says)
    ("default", "default: all-MiniLM-L6-v2 (BERT encoder)"),
    ("smollm2", "smollm2: SmolLM2-135M-Instruct (Llama decoder)"),
)
PROMPT_CHARS = 240  # the status shows at most this many of the prompt's last characters
SINK_NOTE = (
    "Attention sink: in {share:.0%} of the heads most of the weight goes to {token}. A head "
    "with nothing useful to look at still has to put its softmax weight somewhere (each row "
    "sums to 1), and a token every row can see, such as [CLS], [SEP] or the first token, is the "
    "cheapest place: those heads are mostly 'off' for this text."
)


class ModelPanel(QWidget):
    """Text, model, the model view, the head view and (decoders) the next-token bars and
    Generate; emits sessionChosen(session) for a head to open in the pipeline."""

    sessionChosen = pyqtSignal(object)  # gui.state.session.Session of one head
    message = pyqtSignal(str)
    refused = pyqtSignal(str)  # a model or text that could not be run: the last run stays

    def _legend_chose(self, heads: list) -> None:
        """The head view's heads -> the head picker and the grid's outline (one head: it)."""
        every = len(heads) == self.head.count() - 1
        one = -1 if every else heads[0] if len(heads) == 1 else None
        with QSignalBlocker(self.head):  # a few heads: blank, the legend says which
            self.head.setCurrentIndex(self.head.findData(one))
        if one is not None and one >= 0:
            self.grid.select(self.layer.value(), one)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run = None  # the encoder's Run on screen
        self.frame: DecoderFrame | None = None  # or the decoder's prompt and new tokens
        self.tokens: list[str] = []  # the tokens on screen, as the views label them
        self.worker = ModelWorker(self)
        self.opener = ModelWorker(self)  # a head's session (a decoder's head is traced)
        outer = QVBoxLayout(self)
        # step 1: what to run
        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        for name, description in MODELS:
            self.model_box.addItem(name)
            self.model_box.setItemData(
                self.model_box.count() - 1, description, Qt.ItemDataRole.ToolTipRole
            )
        self.model_path = self.model_box.lineEdit()
        self.model_box.setToolTip(
            "'default' (all-MiniLM-L6-v2), 'smollm2' (SmolLM2-135M-Instruct, a decoder), a "
            "directory with config.json, model.safetensors and tokenizer.json (BERT or GPT-2) "
            "or a .gguf file of a decoder (Llama, Qwen2); both packaged models are SHA-256 checked"
        )
        self.model_box.setMinimumWidth(150)
        self.browse = QPushButton("Folder...")
        self.browse.setToolTip("Choose a local model directory")
        self.text = QLineEdit(DEFAULT_TEXT)
        self.text.setPlaceholderText("Type a sentence")
        self.run_button = QPushButton("Run model")
        top = ("Model", self.model_box, self.browse, "Text", (self.text, 1), self.run_button)
        outer.addLayout(controls.row(*top))
        self.generate_bar = GenerateBar()
        self.generate_bar.setVisible(False)
        outer.addWidget(self.generate_bar)
        self.status = controls.label(
            "Type a sentence and press Run model (the model loads once).", rich=True
        )
        outer.addWidget(self.status)
        # while a model loads and runs: its stage (hash check, read, dequantize ...) and Cancel
        self.busy = QWidget()
        self.progress = QProgressBar()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop loading: the last run stays on screen")
        self.busy.setLayout(
            controls.row((self.progress, 1), self.cancel_button, margins=(0, 0, 0, 0))
        )
        self.busy.setVisible(False)
        outer.addWidget(self.busy)
        # step 2: the model view (every head, scrolling) beside the next tokens and head view
        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        self.grid_title = controls.label()  # one line would widen the tab past 1024 pixels
        left_layout.addWidget(self.grid_title)
        self.grid = ModelGrid()
        self.grid_scroll = QScrollArea()
        self.grid_scroll.setWidget(self.grid)
        self.grid_scroll.setWidgetResizable(True)  # the grid fills the width, scrolls down
        left_layout.addWidget(self.grid_scroll, 1)
        right = QSplitter(Qt.Orientation.Vertical)
        self.bars = NextTokenBars()
        self.bars.setVisible(False)
        right.addWidget(self.bars)
        lines_box = QWidget()
        right_layout = QVBoxLayout(lines_box)
        right_layout.setContentsMargins(0, 0, 0, 0)
        self.layer = SpinBox(tip="the layer whose heads the head view shows")
        self.head = QComboBox()
        self.open_button = QPushButton("Open in pipeline")
        pick = ("Head view: layer", self.layer, "head", self.head, self.open_button, 1)
        right_layout.addLayout(controls.row(*pick))
        self.head_note = controls.label()  # a decoder's head: its KV head, RoPE in the pipeline
        self.head_note.setVisible(False)
        right_layout.addWidget(self.head_note)
        self.lines = HeadView()
        right_layout.addWidget(self.lines, 1)
        right.addWidget(lines_box)
        right.setSizes([220, 300])
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([520, 480])
        self.sinks = controls.label()
        # what "export view" captures: the views and the sink note, not the text controls
        self.content = QWidget()
        views = QVBoxLayout(self.content)
        views.setContentsMargins(0, 0, 0, 0)
        self.views = QTabWidget()  # the heads, or one layer's whole block (where attention sits)
        self.views.addTab(split, "Heads")
        self.block = ModelBlock()
        self.views.addTab(self.block, "Whole block")
        views.addWidget(self.views, 1)
        views.addWidget(self.sinks)
        outer.addWidget(self.content, 1)
        self._set_grid_title()
        # step 3: wiring
        self.run_button.clicked.connect(self.start)
        self.text.returnPressed.connect(self.start)
        self.browse.clicked.connect(self._browse)
        self.worker.finished.connect(lambda _: self.busy.setVisible(False))
        self.worker.finished.connect(self.show_result)
        self.worker.failed.connect(self._failed)
        self.worker.progress.connect(self._on_progress)
        self.worker.cancelled.connect(self._cancelled)
        self.cancel_button.clicked.connect(self.worker.cancel)
        self.opener.finished.connect(self.sessionChosen)
        self.opener.failed.connect(lambda m: self._failed(f"opening the head: {m}"))
        self.generate_bar.generate.connect(self.generate)
        self.generate_bar.newestToggled.connect(lambda _: self._show_grid())
        self.grid.headClicked.connect(self._grid_clicked)
        self.layer.valueChanged.connect(lambda _: self._show_lines())
        self.head.currentIndexChanged.connect(lambda _: self._show_lines())
        self.open_button.clicked.connect(self._open_current)
        self.lines.headsChanged.connect(self._legend_chose)  # the legend -> picker and grid
        self.layer.valueChanged.connect(lambda _: self._legend_chose(self.lines.heads))
        self.head.currentIndexChanged.connect(lambda _: self._legend_chose(self.lines.heads))
        self.views.currentChanged.connect(lambda _: self._show_block())
        self.block.boxClicked.connect(self._block_clicked)
        self.block.failed.connect(lambda m: self._failed(f"the block view: {m}"))

    # ---------------------------------------------------------------- requests (to the workers)

    def start(self) -> None:
        """Load the model (in the worker) and run the text; the previous run stays on screen.
        The progress bar shows the load's stages; Cancel stops it."""
        self.status.setText(f"running {html.escape(self._model_name())}...")
        self._set_ready(False)
        self.progress.setRange(0, 0)  # busy until the first stage reports
        self.progress.setFormat("starting...")
        self.busy.setVisible(True)
        self.worker.submit(self.model_path.text().strip(), self.text.text())

    def _model_name(self) -> str:
        return self.model_path.text().strip() or "default"

    def _set_ready(self, ready: bool) -> None:
        """Run (and Generate, when a decoder is shown) on or off; a pressed button keeps the
        focus (never handed on to the temperature box)."""
        set_enabled_keeping_focus(self.run_button, ready)
        set_enabled_keeping_focus(self.generate_bar.button, ready and self.frame is not None)

    def _on_progress(self, done: int, total: int, stage: str) -> None:
        """A stage of the load or the run: the bar (thousandths) and its words."""
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.setFormat(f"{stage} %p%")
        self.status.setText(f"running {html.escape(self._model_name())}: {html.escape(stage)}...")

    def _cancelled(self) -> None:
        """Cancel: the load stops at its next piece; what was on screen stays."""
        self.message.emit(self._stopped(f"cancelled: {self._model_name()} was not run"))

    def _stopped(self, said: str) -> str:
        """A run that ended without a result: the controls back, `said` in the status (with
        what stays on screen); returns what the status says."""
        self.busy.setVisible(False)
        self._set_ready(True)
        said += " (the last run stays on screen)" if self.run or self.frame else ""
        self.status.setText(html.escape(said))
        return said

    def generate(self, temperature: float, seed: int | None) -> None:
        """One more token after the decoder's text (in the worker): the cache grows by one."""
        if self.frame is None:
            return
        self._set_ready(False)
        self.worker.extend(self.frame.decoding, temperature, seed)

    def wait(self) -> None:
        """Join the workers (closing the window)."""
        self.worker.wait()
        self.opener.wait()
        self.block.worker.wait()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model directory")
        if folder:
            self.model_path.setText(folder)

    def _failed(self, message: str) -> None:
        self._stopped(f"refused: {message}")
        self.refused.emit(f"refused: {message}")

    # ---------------------------------------------------------------- results (GUI thread)

    def show_result(self, result: object, path: str | None = None) -> None:
        """Show a worker's result: an encoder's Run or a decoder's DecoderFrame (of the model
        `path` names, when given: the command line's --model)."""
        if path is not None:
            self.model_path.setText(path)
        if isinstance(result, DecoderFrame):
            self.show_frame(result)
            model, tokens = result.decoding.prompt.model, len(result.tokens)
        else:
            self.show_run(result)
            model, tokens = result.model, len(result.tokens)
        # said in the status bar: it replaces an earlier refusal, which no longer applies
        self.message.emit(f"{model.name}: {tokens} tokens run")

    def show_run(self, run: object) -> None:
        """Show a finished encoder run: the grid, the head view of layer 0, the sink note."""
        self.run, self.frame = run, None
        self._set_ready(True)
        model = run.model
        self.generate_bar.setVisible(False)
        self.bars.setVisible(False)
        self.text.setText(run.text)  # the text on screen is the one these views come from
        self.status.setText(
            f"{html.escape(model.name)}: {model.layers} layers x {model.heads} heads, "
            f"{numbers.count(len(run.tokens), 'token')}{', causal' if model.causal else ''}. "
            "Click a head to open it in the pipeline."
        )
        self.tokens = list(run.tokens)
        self._reset_pickers(model.layers, model.heads)
        self._show_grid()
        sinks = run.sinks()
        if sinks:
            token, share = max(sinks.items(), key=lambda kv: kv[1])
            self.sinks.setText(SINK_NOTE.format(share=share, token=token))
        else:
            self.sinks.setText("No attention sink in this text: no token takes most of a head.")

    def show_frame(self, frame: DecoderFrame) -> None:
        """Show a decoder after its prompt or a Generate step: the grid with the newest row,
        the next-token bars, the chosen token and the cache's length."""
        first = self.frame is None or self.frame.decoding.prompt is not frame.decoding.prompt
        self.frame, self.run = frame, None
        self._set_ready(True)
        d = frame.decoding
        model = d.prompt.model
        self.text.setText(d.prompt.text)
        self.tokens = [readable(t) for t in frame.tokens]
        self.generate_bar.setVisible(True)
        self.bars.setVisible(True)
        if first:
            with QSignalBlocker(self.generate_bar.newest):
                self.generate_bar.newest.setChecked(False)
            self._reset_pickers(model.layers, model.heads)
        self.generate_bar.cache.setText(
            f"KV cache: {numbers.count(d.length, 'token')} "
            f"({len(d.prompt.ids)} + {len(d.ids)} new) x {model.layers} layers "
            f"x {len(set(frame.kv_heads))} KV heads"
        )
        self.status.setText(self._story(frame))
        self.bars.set_tokens(frame.top, f"Next token after '{readable(frame.tokens[-1])}'")
        self._show_grid()
        self.sinks.setText("")

    def _story(self, frame: DecoderFrame) -> str:
        """The text so far (new tokens highlighted) and the token the last step chose."""
        d = frame.decoding
        model = d.prompt.model
        new = "".join(
            f"<b style='color:#c0501e'>{html.escape(readable(t, 40))}</b>"
            for t in frame.tokens[len(d.prompt.ids) :]
        )
        kv = frame.kv_heads
        shared = kv.count(kv[0])  # query heads per key/value head
        said = f"{model.name}: {model.layers} layers x {model.heads} query heads" + (
            f" in {len(set(kv))} groups of {shared} sharing a key/value head (GQA). "
            if shared > 1
            else ", each with its own key/value head. "
        )
        if d.ids:
            chance = d.chances[-1]
            said += (
                f"Step {len(d.ids)} chose <b>'{html.escape(readable(frame.tokens[-1]))}'</b> "
                f"(p = {chance:.3f}). "
            )
        else:
            said += "Press Generate to add the likeliest token. "
        text = d.prompt.text  # a long prompt: its end (the status would push the views away)
        text = text if len(text) <= PROMPT_CHARS else "…" + text[-PROMPT_CHARS:]
        return f"{said}<br>{html.escape(text)}{new}"

    def _reset_pickers(self, layers: int, heads: int) -> None:
        controls.set_quietly(self.layer, 0, layers - 1)
        with QSignalBlocker(self.head):
            self.head.clear()
            self.head.addItem("all heads", -1)
            for h in range(heads):
                self.head.addItem(f"head {h}", h)

    def _attentions(self) -> object:
        """(layers, heads, S, S) of what is on screen."""
        return self.frame.attentions if self.frame is not None else self.run.attentions

    def _show_grid(self) -> None:
        if self.run is None and self.frame is None:
            return
        newest = self.frame is not None and self.generate_bar.newest.isChecked()
        kv = self.frame.kv_heads if self.frame is not None else None
        self.grid.set_attentions(self._attentions(), kv, newest_only=newest)
        self._set_grid_title()
        self._show_lines()

    def _set_grid_title(self) -> None:
        if self.frame is None:
            self.grid_title.setText(
                "Model view: rows are layers, columns heads (each scaled to its own maximum)"
            )
        elif self.grid.newest_only:
            self.grid_title.setText(
                f"Newest token {readable(self.frame.tokens[-1])}: its weights over the "
                f"{numbers.count(len(self.frame.tokens), 'token')} in the cache, per layer and head"
            )
        else:
            self.grid_title.setText(
                "Model view: layers x heads, each head's causal weights (the bottom row is the "
                "newest token's; Generate adds a row)"
            )

    def _show_lines(self) -> None:
        if self.run is None and self.frame is None:
            return
        layer, head = self.layer.value(), self.head.currentData()
        weights = self._attentions()[layer]
        heads = list(range(weights.shape[0])) if head in (None, -1) else [head]
        focus = len(self.tokens) - 1 if self.frame is not None else None
        self.lines.set_layer(self.tokens, weights, heads, focus)
        self.head_note.setVisible(self.frame is not None)
        if self.frame is not None:
            self.head_note.setText(self._head_note(heads))
        self._show_block()

    def _show_block(self) -> None:
        """The block view of the picked layer (and head), when its tab is showing."""
        shown = self.run is not None or self.frame is not None
        if self.views.currentWidget() is not self.block or not shown:
            return
        head = self.head.currentData()
        source = self.frame.decoding if self.frame is not None else self.run
        self.block.set_source(source, self.layer.value(), 0 if head in (None, -1) else head)

    def _block_clicked(self, target: str) -> None:
        """The attention box: the head grid; the norm box (x): this head in the pipeline."""
        if target == "heads":
            self.views.setCurrentIndex(0)
        else:
            self._open_current()

    def _head_note(self, heads: list[int]) -> str:
        """Which KV head the picked head shares, and what opening it shows of RoPE."""
        kv = self.frame.kv_heads
        model = self.frame.decoding.prompt.model
        bias = " + b_q" if model.family_record.qkv_bias else ""  # Qwen2's q, k, v biases
        rope = (
            f"In the pipeline q = x @ W_q{bias}, then RoPE turns q and k (base "
            f"{model.config.rope_base:g}: each pair of features i, i + d/2 turns by an angle "
            "that grows with the position)."
        )
        if len(heads) > 1:
            return f"Lines: the newest token's, one colour per head. {rope}"
        h = heads[0]
        shared = [g for g in range(len(kv)) if kv[g] == kv[h] and g != h]
        names = ", ".join(str(g) for g in shared) or "no other head"
        return f"Head {h} reads KV head {kv[h]} (with heads {names}). {rope}"

    def _grid_clicked(self, layer: int, head: int) -> None:
        self.layer.setValue(layer)
        self.head.setCurrentIndex(head + 1)
        self._open(layer, head)

    def _open_current(self) -> None:
        if self.run is None and self.frame is None:
            return
        head = self.head.currentData()
        head = 0 if head in (None, -1) else head
        self.grid.select(self.layer.value(), head)
        self._open(self.layer.value(), head)

    def _open(self, layer: int, head: int) -> None:
        """Build the head's session in the worker; sessionChosen carries it."""
        source = self.frame.decoding if self.frame is not None else self.run
        self.message.emit(f"opening layer {layer} head {head}...")
        self.opener.open_head(source, layer, head)

"""Train tab: train a tiny transformer in the window and watch its attention heads form.

Controls (task, steps, seed, layers, heads, MLP, norm; Start, Pause/Resume, Cancel, how many
steps between redraws), the loss curve with the phase change, each head's scores over time, and
every head's attention on the probe at the snapshot the scrubber picks (live while training). A
click on a head opens its layer in the pipeline (sessionChosen), the Backward button in the
Backward tab (backwardChosen).
"""

from __future__ import annotations

import os
import time

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSlider,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gui.present import train_view
from gui.state.train_session import head_session
from gui.widgets import controls
from gui.widgets.heatmap import Heatmap
from gui.widgets.loss_plot import LossPlot
from gui.widgets.model_grid import ModelGrid
from gui.widgets.score_plots import ScorePlots
from gui.widgets.spin_boxes import SpinBox
from gui.work.train_worker import PAUSED, TrainWorker, frozen
from scratch.train import ModelConfig, Run, TrainConfig, Trainer
from scratch.train.tasks import TASKS
from scratch.train.words import head_name, part_name, phase_change, summary

PIECES = (1, 5, 10, 25, 50, 100)  # steps between two redraws (the speed control)
MAX_SEED = 999_999  # six digits: the row of controls fits 1024 pixels
GRID_HEIGHT = 220  # the head grid's most pixels before it scrolls (the heatmap gets the rest)
HINT = "Press Start to train, or File > Open run... to open a saved one."


class TrainTab(QWidget):
    """The Train tab; `run` is the record on screen (a frozen copy while training)."""

    sessionChosen = pyqtSignal(object)  # gui.state.session.Session: a layer to open in the pipeline
    backwardChosen = pyqtSignal(object)  # the same, to open in the Backward tab
    message = pyqtSignal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run: Run | None = None
        self.head = (0, 0)  # (layer, head) the heatmap shows
        self.text_path: str | None = None
        self.started = 0.0
        self.worker = TrainWorker(self)
        t, m = TrainConfig(), ModelConfig()
        outer = QVBoxLayout(self)
        # step 1: what to train
        self.task = controls.combo(TASKS, "what the model learns to predict")
        self.task.setToolTip(
            "induction: random tokens repeated (layer 1's previous-token head, then layer 2's "
            "induction head); copying: by position; sorting: by content; text: your own file"
        )
        self.file_button = QPushButton("Text file...")
        self.file_button.setToolTip("The text task's file (UTF-8, read character by character)")
        self.steps = SpinBox(tip="training steps")
        controls.set_quietly(self.steps, 1, 100_000, t.steps)
        self.seed = SpinBox(tip="seed of the weights and the batches")
        controls.set_quietly(self.seed, 0, MAX_SEED, t.seed)
        self.layers = SpinBox(tip="attention layers")
        controls.set_quietly(self.layers, 1, 6, m.n_layers)
        self.heads = SpinBox(tip="heads per layer (d_model 64 must be a multiple)")
        controls.set_quietly(self.heads, 1, 16, m.n_heads)
        self.mlp = QCheckBox("MLP")
        self.mlp.setChecked(m.mlp)
        self.mlp.setToolTip("a ReLU MLP after each attention layer (off: attention only)")
        self.norm = QCheckBox("Norm")
        self.norm.setChecked(m.norm)
        self.norm.setToolTip("layer norm before each sublayer")
        # two short rows, not one long one: with the Inputs dock shown on the other tabs, the
        # window's 1024 pixels leave this tab about 470 (the widest tab sets the minimum)
        outer.addLayout(controls.row(
            "Task", self.task, self.file_button, "Steps", self.steps, "Seed", self.seed, 1,
        ))  # fmt: skip
        # step 2: start, pause, cancel, speed, progress
        self.start_button = QPushButton("Start")
        self.pause_button = QPushButton("Pause")
        self.cancel_button = QPushButton("Cancel")
        self.piece = controls.combo({n: f"{n}" for n in PIECES}, "steps between two redraws")
        controls.select(self.piece, self.worker.piece)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m steps")
        outer.addLayout(controls.row(
            "Layers", self.layers, "Heads", self.heads, self.mlp, self.norm, "Redraw every",
            self.piece, "steps", 1,
        ))  # fmt: skip
        outer.addLayout(controls.row(
            self.start_button, self.pause_button, self.cancel_button, (self.progress, 1),
        ))  # fmt: skip
        # step 3: the curves (left) and the heads at the scrubbed step (right)
        split = QSplitter(Qt.Orientation.Horizontal)
        left = QSplitter(Qt.Orientation.Vertical)
        self.loss = LossPlot()
        self.scores = ScorePlots(train_view.SCORE_TITLES)
        left.addWidget(self.loss)
        scores_box = QWidget()
        scores_layout = QVBoxLayout(scores_box)
        scores_layout.setContentsMargins(0, 0, 0, 0)
        scores_layout.addWidget(self.scores, 1)
        self.colours = controls.label(style="color: #444; font-size: 8pt;")
        scores_layout.addWidget(self.colours)
        left.addWidget(scores_box)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.setToolTip(
            "the snapshot shown: drag back to any step (live at the right end)"
        )
        self.scrubber.setEnabled(False)
        self.step_label = controls.label()
        self.open_button = QPushButton("Open in pipeline")
        self.backward_button = QPushButton("Open in Backward")
        self.backward_button.setToolTip(train_view.BACKWARD_NOTE)
        right_layout.addWidget(self.scrubber)
        # the step beside the buttons: the heatmap below gets the height
        right_layout.addLayout(
            controls.row((self.step_label, 1), self.open_button, self.backward_button)
        )
        self.grid = ModelGrid()
        self.grid.count_from = 1  # L1 H1 is head 1.1, as the words name it
        self.grid.empty_text = "Press Start: every head's attention on the probe shows here"
        self.grid.setMinimumSize(200, 90)
        self.grid.setToolTip("Every head on the probe: click one to open its layer in the pipeline")
        self.grid_scroll = QScrollArea()
        self.grid_scroll.setWidget(self.grid)
        self.grid_scroll.setWidgetResizable(True)
        heads_split = QSplitter(Qt.Orientation.Vertical)
        heads_split.addWidget(self.grid_scroll)
        self.heatmap = Heatmap()
        heads_split.addWidget(self.heatmap)
        heads_split.setSizes([120, 260])
        right_layout.addWidget(heads_split, 1)
        self.head_label = controls.label()
        right_layout.addWidget(self.head_label)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([520, 480])
        outer.addWidget(split, 1)
        self.words = controls.label(HINT, selectable=True)
        outer.addWidget(self.words)
        self._set_buttons()
        # step 4: wiring
        self.task.currentIndexChanged.connect(lambda _: self._set_buttons())
        self.file_button.clicked.connect(lambda: self.choose_text())
        self.start_button.clicked.connect(lambda: self.start())
        self.pause_button.clicked.connect(self.pause_or_resume)
        self.cancel_button.clicked.connect(self.cancel)
        self.piece.currentIndexChanged.connect(
            lambda _: setattr(self.worker, "piece", self.piece.currentData())
        )
        self.worker.pieceDone.connect(self.show_run)
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.worker.cancelled.connect(self._set_buttons)
        self.scrubber.valueChanged.connect(lambda _: self._show_snapshot())
        self.grid.headClicked.connect(self.open_head)
        self.open_button.clicked.connect(lambda: self.open_head(*self.head))
        self.backward_button.clicked.connect(lambda: self.open_head(*self.head, backward=True))

    # ---------------------------------------------------------------- training

    def config(self) -> TrainConfig:
        """The TrainConfig the controls ask for (ValueError when they do not fit together)."""
        model = ModelConfig(
            n_layers=self.layers.value(), n_heads=self.heads.value(),
            mlp=self.mlp.isChecked(), norm=self.norm.isChecked(),
        )  # fmt: skip
        return TrainConfig(
            task=self.task.currentData(), steps=self.steps.value(), seed=self.seed.value(),
            model=model,
        )  # fmt: skip

    def start(self, config: TrainConfig | None = None) -> bool:
        """Start a new run (of `config`, or of the controls); a bad setting is said, the run on
        screen kept."""
        try:
            config = config or self.config()
            path = self.text_path if config.task == "text" else None
            trainer = Trainer(config, text_path=path)
        except (ValueError, TypeError) as exc:
            self.message.emit(f"Not started: {exc}. The run on screen is kept.")
            self.words.setText(f"Not started: {exc}")
            return False
        self.worker.cancel()
        self.head = (0, 0)
        self.started = time.perf_counter()
        self.progress.setRange(0, config.steps)
        self.progress.setValue(0)
        self.show_run(frozen(trainer.run))  # step 0: the untrained heads (a copy: the worker
        # appends to the trainer's own record while the window reads this one)
        self.worker.begin(trainer)
        self._set_buttons()
        return True

    def pause_or_resume(self) -> None:
        """Pause after the current piece, or resume a paused run."""
        if self.worker.busy:
            self.worker.pause()
            self.pause_button.setEnabled(False)  # until the piece ends
        elif self.worker.resume() is not None:
            self.started = time.perf_counter() - (self.run.seconds[-1] if self.run.seconds else 0)
        self._set_buttons()

    def cancel(self) -> None:
        """Stop training between two steps: the run drawn so far stays (and can be saved)."""
        if self.worker.busy:
            self.worker.cancel()
        self.worker.trainer = None  # nothing to resume
        self._set_buttons()
        if self.run is not None:
            self.message.emit(f"Training cancelled at step {self.run.steps_done:,}")

    def wait(self) -> None:
        """Stop training and join the worker (closing the window, tests)."""
        self.worker.cancel()
        self.worker.wait()

    @property
    def paused(self) -> bool:
        """A run waits for Resume."""
        t = self.worker.trainer
        return t is not None and not t.finished and not self.worker.busy

    def _set_buttons(self) -> None:
        busy = self.worker.busy
        for button in (self.open_button, self.backward_button):
            button.setEnabled(self.run is not None)
        self.file_button.setEnabled(self.task.currentData() == "text")
        self.pause_button.setText("Resume" if self.paused else "Pause")
        self.pause_button.setEnabled(busy or self.paused)
        self.cancel_button.setEnabled(busy or self.paused)

    def _on_progress(self, done: int, total: int, _: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)

    def _on_finished(self, how: str) -> None:
        self._set_buttons()
        if how == PAUSED:
            self.message.emit(f"Paused at step {self.run.steps_done:,}: Resume goes on")
        elif self.run is not None:
            self.message.emit(f"Training done: {self.run.steps_done:,} steps")

    def _on_failed(self, text: str) -> None:
        self._set_buttons()
        self.words.setText(f"Training stopped: {text}")
        self.message.emit(f"Training stopped: {text}")

    def choose_text(self, path: str | None = None) -> None:
        """The text task's file (asked with a dialog when not given)."""
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Text to train on", "", "Text (*.txt *)")
        if path:
            self.text_path = path
            self.file_button.setText(os.path.basename(path)[:18] or "Text file...")
            self.file_button.setToolTip(path)
            controls.select(self.task, "text")

    # ---------------------------------------------------------------- showing a run

    def open_run(self, run: Run) -> None:
        """Show a saved run (training, if any, stops: the new run replaces it)."""
        self.worker.cancel()
        self.worker.trainer = None
        self.run = None  # a new run: the scrubber goes to its end, the head to its best
        self.show_run(run)
        self._set_buttons()

    def show_run(self, run: Run) -> None:
        """Draw `run` (a new piece while training, or an opened file): curves, scores, the
        scrubber (which follows the newest snapshot while it sits at the right end)."""
        first = self.run is None or run.config != self.run.config or run.steps_done == 0
        at_end = self.scrubber.value() >= self.scrubber.maximum()
        self.run = run
        total = run.config.steps
        part = part_name(run.config.task)
        self.loss.set_curves(*train_view.loss_curves(run), part, total)
        change = phase_change(run.scored_losses)
        self.loss.set_phase(None if change is None else change.step)
        steps, lines = train_view.score_lines(run)
        self.scores.set_lines(steps, lines, total)
        self.colours.setText(train_view.colour_words(run.config.model.n_layers))
        if first:
            self.head = train_view.default_head(run) if run.steps_done else (0, 0)
            self._show_settings(run.config)
        last = len(run.snapshots) - 1
        self.scrubber.blockSignals(True)
        self.scrubber.setRange(0, last)
        if first or at_end:
            self.scrubber.setValue(last)
        self.scrubber.blockSignals(False)
        self.scrubber.setEnabled(True)
        self._set_buttons()
        if self.progress.maximum() != total or not self.worker.busy:
            self.progress.setRange(0, total)
            self.progress.setValue(run.steps_done)
        self._show_snapshot()
        said = summary(run)
        seconds = run.seconds[-1] if run.seconds else None
        phase = train_view.phase_words(run)
        self.words.setText(
            f"{said} {phase + ' ' if phase else ''}({train_view.progress_text(run, seconds)})"
        )

    def _show_settings(self, config: TrainConfig) -> None:
        """The controls say the run's settings (an opened file's; Start trains them again)."""
        m = config.model
        controls.select(self.task, config.task)
        for box, value in ((self.steps, config.steps), (self.seed, config.seed),
                           (self.layers, m.n_layers), (self.heads, m.n_heads)):  # fmt: skip
            controls.set_quietly(box, box.minimum(), max(box.maximum(), value), value)
        self.mlp.setChecked(m.mlp)
        self.norm.setChecked(m.norm)

    def _show_snapshot(self) -> None:
        """The scrubbed snapshot: every head in the grid, the chosen head with its tokens."""
        run = self.run
        if run is None:
            return
        index = self.scrubber.value()
        snapshot = run.snapshots[index]
        attentions = train_view.grid_weights(snapshot)
        kv = train_view.kv_heads(run.config.model)
        self.grid.set_attentions(attentions, kv)
        frame = 2 * self.grid_scroll.frameWidth()
        self.grid_scroll.setMinimumHeight(min(self.grid.minimumHeight() + frame, GRID_HEIGHT))
        self.grid.select(*self.head)
        self.heatmap.show_panel(train_view.head_panel(run, snapshot, *self.head))
        self.step_label.setText(train_view.step_text(run, index))
        self.head_label.setText(train_view.head_words(run, snapshot, *self.head))
        self.loss.set_now(snapshot.step)
        self.scores.set_now(snapshot.step)

    @property
    def snapshot(self) -> object:
        """The snapshot the scrubber shows (None before a run)."""
        return None if self.run is None else self.run.snapshots[self.scrubber.value()]

    def open_head(self, layer: int, head: int, backward: bool = False) -> object:
        """Show head (layer, head) here and open its layer at the scrubbed snapshot in the
        pipeline (or the Backward tab); returns the session (None before a run)."""
        if self.run is None:
            return None
        self.head = (layer, head)
        self._show_snapshot()
        s = head_session(self.run, self.snapshot.step, layer, head)
        (self.backwardChosen if backward else self.sessionChosen).emit(s)
        where = "Backward tab" if backward else "pipeline"
        self.message.emit(f"{head_name(layer, head)} at step {self.snapshot.step:,}: the {where}")
        return s

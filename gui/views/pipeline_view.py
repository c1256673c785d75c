"""Pipeline view: one step at a time, large, with navigation, play, hover explanations."""

from __future__ import annotations

import numpy as np
from PyQt6.QtCore import QSignalBlocker, Qt, QTimer, pyqtSignal
from PyQt6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

import scratch
from gui.present import numbers, sentences, view_model
from gui.widgets import controls
from gui.widgets.fixed_lines import FixedLines
from gui.widgets.heatmap import Heatmap
from gui.widgets.spin_boxes import DoubleSpinBox
from scratch.trace import steps

MAX_SOURCES = 3
SOURCE_SIZE = 170  # the side panel's input heatmaps: at least this many pixels each way
SOURCE_SHARE = 0.28  # of the view's width the side panel takes (from SOURCE_SIZE to 420 px)
PANEL_ROOM = 300  # pixels one of several large heatmaps needs (axes, colour bar, title)


def _label(point_size: int, mono: bool = False) -> QLabel:
    label = controls.label(selectable=True)
    label.setFont(controls.font(point_size, mono))
    return label


class PipelineView(QWidget):
    """Shows trace steps one by one; emits stepChanged(name) and headChanged(choice)."""

    stepChanged = pyqtSignal(str)
    headChanged = pyqtSignal(str)

    def __init__(
        self, parent: QWidget | None = None, names_of=None, source_height: int = 96
    ) -> None:
        super().__init__(parent)
        self.names_of = names_of  # trace -> the step names to show (None: every step)
        self.trace = None
        self.reference = None
        self.step_name = "weights"
        self.head = "0"
        self.colour = "auto"  # weights colour range: one of view_model.COLOUR_RANGES
        self.heatmaps: list[Heatmap] = []
        # the shown trace's panels by (step, head, colour): a step seen before opens at once
        self._panels: dict[tuple[str, str, str], list] = {}
        self.sources: list[Heatmap] = []
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        # step 1: navigation (the controls widget: left out of exported pictures)
        self.controls = QWidget()
        rows = QVBoxLayout(self.controls)
        rows.setContentsMargins(0, 0, 0, 0)
        self.first_button = QPushButton("|<")
        self.prev_button = QPushButton("< Prev")
        self.next_button = QPushButton("Next >")
        self.last_button = QPushButton(">|")
        self.play_button = QPushButton("Play")
        self.play_button.setCheckable(True)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setPageStep(1)
        self.speed = DoubleSpinBox(0.25, 10.0, "steps per second while playing")
        self.speed.setValue(1.0)
        self.speed.setSuffix(" steps/s")
        self.step_label = _label(12)
        self.step_label.setWordWrap(False)
        self.head_label = QLabel("head")
        self.head_box = QComboBox()
        self.colour_box = controls.combo(
            {key: f"colour {text.split(':')[0]}" for key, text in view_model.COLOUR_RANGES.items()},
            "how the weights are coloured: " + "; ".join(view_model.COLOUR_RANGES.values()),
        )
        self.colour_box.setCurrentIndex(self.colour_box.findData(self.colour))
        for w in (
            self.first_button,
            self.prev_button,
            self.slider,
            self.next_button,
            self.last_button,
            self.play_button,
            self.speed,
            self.head_box,
            self.colour_box,
        ):
            w.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        buttons = (self.first_button, self.prev_button, self.next_button, self.last_button)
        for w, most in zip((*buttons, self.play_button), (36, 64, 64, 36, 64)):
            w.setMaximumWidth(most)  # narrow buttons: the row fits 1024-pixel windows
        rows.addLayout(controls.row(*buttons, self.play_button, self.speed, 1, self.step_label))
        # the slider gets most of a row: never squeezed to a stub
        rows.addLayout(
            controls.row((self.slider, 1), self.head_label, self.head_box, self.colour_box)
        )
        outer.addWidget(self.controls)
        # step 2: the content: formula, heatmaps, words (what "export view" draws)
        self.content = QWidget()
        body = QVBoxLayout(self.content)
        body.setContentsMargins(0, 0, 0, 0)
        self.formula = _label(14, mono=True)
        body.addWidget(self.formula)
        # step 3: the large heatmaps and, beside them, the inputs that feed the step
        self.split = split = QSplitter(Qt.Orientation.Horizontal)
        self.main_area = QWidget()
        self.main_grid = QGridLayout(self.main_area)
        self.main_grid.setContentsMargins(0, 0, 0, 0)
        split.addWidget(self.main_area)
        self.source_area = QWidget()
        self.source_box = QVBoxLayout(self.source_area)
        self.source_box.setContentsMargins(0, 0, 0, 0)
        self.source_title = controls.label("inputs of this step (hover a cell)")
        self.source_box.addWidget(self.source_title)
        # three sources stacked at source_height each, with their titles and axis labels, must
        # leave a 1024 x 700 window its height under every common font set (120 px each made
        # Noto's window 733 px tall; a scroll area here instead looped its layout forever)
        for _ in range(MAX_SOURCES):
            hm = Heatmap(compact=True)
            hm.setMinimumSize(SOURCE_SIZE, source_height)
            self.sources.append(hm)
            self.source_box.addWidget(hm, 1)
        split.addWidget(self.source_area)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([700, 420])
        self.main_area.setMinimumWidth(320)
        self.source_area.setMaximumWidth(520)
        body.addWidget(split, 1)
        # step 4: words: the note, a generated sentence, the hovered cell's explanation
        self.note = _label(11)
        # the hovered row's sentence and cell's explanation: fixed heights, so a longer text
        # never shrinks the heatmaps (it is cut with '...', the whole in the tooltip)
        self.sentence = FixedLines(2, 12)
        self.sentence.setStyleSheet("color: #114477;")
        self.explanation = FixedLines(3, 11, mono=True)
        for w in (self.note, self.sentence, self.explanation):
            body.addWidget(w)
        outer.addWidget(self.content, 1)
        # over the heatmaps while the trace on screen is not the current inputs' (a new one is
        # being computed, or it failed, or waits for an answer)
        self.stale = controls.label(
            style="background: rgba(255, 243, 205, 235); color: #6b4100; border: 1px solid "
            "#d9a400; padding: 4px; font-weight: bold;"
        )
        self.stale.setParent(self.content)
        self.stale.hide()
        self.timer = QTimer(self)
        self._connect()

    def _connect(self) -> None:
        self.first_button.clicked.connect(lambda: self.go(0))
        self.prev_button.clicked.connect(lambda: self.go(self.slider.value() - 1))
        self.next_button.clicked.connect(lambda: self.go(self.slider.value() + 1))
        self.last_button.clicked.connect(lambda: self.go(self.slider.maximum()))
        self.slider.valueChanged.connect(self.go)
        self.play_button.toggled.connect(self.set_playing)
        self.speed.valueChanged.connect(lambda _: self._update_timer())
        self.timer.timeout.connect(self._tick)
        self.head_box.activated.connect(lambda _: self.set_head(self.head_box.currentData()))
        self.colour_box.activated.connect(lambda _: self.set_colour(self.colour_box.currentData()))

    # ---------------------------------------------------------------- state

    def names(self) -> list[str]:
        """Step names of the shown trace (those `names_of` picks, when given)."""
        if self.trace is None:
            return []
        return self.names_of(self.trace) if self.names_of is not None else self.trace.names()

    def set_trace(self, trace: object, reference: object | None = None) -> None:
        """Show a new trace, staying on the same step name when it still exists."""
        self.trace, self.reference = trace, reference if reference is not None else trace
        self._panels.clear()
        names = self.names()
        controls.set_quietly(self.slider, 0, len(names) - 1)
        name = self.step_name if self.step_name in names else names[-1]
        self.set_step(name, force=True)

    def set_step(self, name: str, force: bool = False) -> None:
        """Open step `name`; KeyError names the known steps."""
        names = self.names()
        if name not in names:
            raise KeyError(f"unknown step {name!r}; steps: {', '.join(names)}")
        if name == self.step_name and not force:
            return
        self.step_name = name
        with QSignalBlocker(self.slider):
            self.slider.setValue(names.index(name))
        self._render()
        self.stepChanged.emit(name)

    def go(self, index: int) -> None:
        """Open the step at `index` (clamped)."""
        names = self.names()
        if names:
            self.set_step(names[max(0, min(index, len(names) - 1))])

    def set_head(self, choice: str) -> None:
        """Choose a head number, 'all' or 'average'."""
        if choice and choice != self.head:
            self.head = choice
            if self.trace is not None:
                self._render()
            self.headChanged.emit(choice)

    def set_colour(self, colour: str) -> None:
        """Colour the weights with one of view_model.COLOUR_RANGES (fixed, row, auto)."""
        if colour not in view_model.COLOUR_RANGES:
            raise ValueError(f"colour: expected one of {', '.join(view_model.COLOUR_RANGES)}")
        self.colour = colour
        self.colour_box.setCurrentIndex(self.colour_box.findData(colour))
        if self.trace is not None:
            self._render()

    def set_playing(self, on: bool) -> None:
        """Start or stop stepping forward at the chosen speed."""
        with QSignalBlocker(self.play_button):
            self.play_button.setChecked(on)
        self.play_button.setText("Pause" if on else "Play")
        if on and self.slider.value() >= self.slider.maximum():
            self.go(0)
        self._update_timer(on)

    def _update_timer(self, on: bool | None = None) -> None:
        on = self.play_button.isChecked() if on is None else on
        self.timer.setInterval(int(1000 / self.speed.value()))
        if on:
            self.timer.start()
        else:
            self.timer.stop()

    def _tick(self) -> None:
        if self.slider.value() >= self.slider.maximum():
            self.set_playing(False)
        else:
            self.go(self.slider.value() + 1)

    def key_action(self, key: int):
        """What a navigation key does (Left, Right, Home, End, Space), or None."""
        actions = {
            Qt.Key.Key_Left: lambda: self.go(self.slider.value() - 1),
            Qt.Key.Key_Right: lambda: self.go(self.slider.value() + 1),
            Qt.Key.Key_Home: lambda: self.go(0),
            Qt.Key.Key_End: lambda: self.go(self.slider.maximum()),
            Qt.Key.Key_Space: lambda: self.set_playing(not self.play_button.isChecked()),
        }
        return actions.get(key) if self.trace is not None else None

    def keyPressEvent(self, event) -> None:
        action = self.key_action(event.key())
        if action is not None:
            action()
        else:
            super().keyPressEvent(event)

    # ---------------------------------------------------------------- rendering

    def panels_of(self, name: str, head: str) -> list:
        """view_model.panels of step `name` of the shown trace, made once per trace."""
        key = (name, head, self.colour)
        if key not in self._panels:
            self._panels[key] = view_model.panels(self.trace, name, head, self.colour)
        return self._panels[key]

    def _render(self) -> None:
        trace, name = self.trace, self.step_name
        step = trace[name]
        names = self.names()
        # 'step 2: scores (5/9)', the call read from all the trace's steps (`names` may omit w_q)
        self.step_label.setText(steps.heading(steps.call_of_names(trace.names()), names, name))
        self.formula.setText(step.formula)
        self.note.setText(step.note)
        choices = view_model.head_choices(trace, name)
        self.head_box.clear()
        for c in choices:
            self.head_box.addItem(c if c in ("all", "average") else f"head {c}", c)
        if choices and self.head not in choices:
            self.head = "0"
        self.head_box.setCurrentIndex(max(0, self.head_box.findData(self.head)))
        self.head_box.setVisible(bool(choices))
        self.head_label.setVisible(bool(choices))
        panels = self.panels_of(name, self.head)
        self._ensure_heatmaps(len(panels))
        for hm, panel in zip(self.heatmaps, panels):
            hm.show_panel(panel)
        self._show_sources()
        self._show_sentence(None)
        self.explanation.setText("hover a cell to see where its number comes from")

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_sources()
        self._place_stale()

    def set_stale(self, text: str) -> None:
        """Mark the trace on screen as not the current inputs' with `text` ('' removes it)."""
        self.stale.setText(text)
        self.stale.setVisible(bool(text))
        self._place_stale()

    def _place_stale(self) -> None:
        """The mark over the stale trace's sentence below the heatmaps, the width of the
        content (over the heatmaps, 560 pixels wide, it hid their titles)."""
        room = self.content.width()
        self.stale.setFixedWidth(max(120, room - 8))
        self.stale.adjustSize()
        top = self.sentence.mapTo(self.content, self.sentence.rect().topLeft()).y()
        self.stale.move(4, max(0, top))
        self.stale.raise_()

    def _fit_sources(self) -> None:
        """Several heads side by side take the side panel's room when the window is narrow."""
        shown = sum(1 for hm in self.heatmaps if not hm.isHidden())
        per_row = 1 if shown == 1 else 2 if shown <= 4 else 4
        room = per_row * PANEL_ROOM + SOURCE_SIZE + 40
        self.source_area.setVisible(shown <= 1 or self.width() >= room)
        # the large heatmap keeps most of a narrow window: at 1024 pixels a 13-token matrix's
        # cells stay wide enough for their numbers
        side = min(
            self.source_area.maximumWidth(), max(SOURCE_SIZE, int(SOURCE_SHARE * self.width()))
        )
        self.split.setSizes([max(1, self.split.width() - side), side])

    def _ensure_heatmaps(self, count: int) -> None:
        while len(self.heatmaps) < count:
            hm = Heatmap()
            hm.cellHovered.connect(lambda cell, h=hm: self._on_hover(h, cell))
            self.heatmaps.append(hm)
        cols = 1 if count == 1 else 2 if count <= 4 else 4
        for i, hm in enumerate(self.heatmaps):
            self.main_grid.removeWidget(hm)
            if i < count:
                self.main_grid.addWidget(hm, i // cols, i % cols)  # reparent first, then show
            hm.setVisible(i < count)
        self._fit_sources()

    def _source_steps(self) -> list[str]:
        """The steps that feed the current one: its `reads` in scratch's registry of steps."""
        call = steps.call_of(self.trace)
        return [n for n in steps.spec_for(call, self.step_name).reads(call) if n in self.trace]

    def _show_sources(self) -> None:
        every = self._source_steps()
        names = every[:MAX_SOURCES]
        more = (
            f" (the first {MAX_SOURCES} of {len(every)} drawn)" if len(every) > MAX_SOURCES else ""
        )
        self.source_title.setText("inputs of this step: " + (", ".join(every) or "none") + more)
        for hm, src in zip(self.sources, names + [None] * MAX_SOURCES):
            hm.setVisible(src is not None)
            if src is not None:
                head = self.head if self.head.isdigit() else "0"
                hm.show_panel(self.panels_of(src, head)[0])

    def _show_sentence(self, row: int | None) -> None:
        panel = self.heatmaps[0].panel if self.heatmaps else None
        if panel is None:
            return
        call = steps.call_of_names(self.trace.names())
        kind = steps.spec_for(
            call, self.step_name
        ).sentence  # one of gui.present.sentences.KINDS, or ''
        self.sentence.setText(self._sentence(kind, panel, row))

    def _sentence(self, kind: str, panel: view_model.Panel, row: int | None) -> str:
        """The sentence about query `row` (None: the row worth one), made from that row alone:
        the row is chosen with NumPy (gui.present.sentences), so 4096 tokens cost milliseconds."""
        trace, matrix = self.trace, panel.raw  # (rows, cols)
        if kind == "mask":
            return sentences.mask_sentence(int(np.count_nonzero(np.isneginf(matrix))), matrix.size)
        if kind == "heads" and trace.num_heads > 1:  # how the heads combine: no row read
            return sentences.describe(
                kind, [[0.0]], [""], [""], heads=trace.num_heads, w_o="w_o" in trace
            )
        weights, head, cols = None, panel.head, panel.col_labels
        if kind in ("mix", "heads") and "weights" in trace:
            head = head if head is not None else 0
            weights = self._matrix("weights", head)  # (L, S)
            cols = view_model.labels_for(trace, "key", weights.shape[1])
        pick = sentences.sharpest_row if kind == "match" else sentences.teaching_row
        chosen = weights if weights is not None else matrix
        i = row if row is not None else pick(chosen) if kind in sentences.KINDS else 0
        if i >= chosen.shape[0] or i >= matrix.shape[0]:
            return ""
        focus = weights[i] if weights is not None else matrix[i]
        reads_weights = weights is not None or (kind == "attention" and panel.step == "weights")
        hidden = self._hidden_row(head, i, focus) if reads_weights else []
        return sentences.describe(
            kind,
            [matrix[i].tolist()],
            [panel.row_labels[i]],
            cols,
            0,
            None if weights is None else [weights[i].tolist()],
            heads=trace.num_heads,
            w_o="w_o" in trace,
            hidden=[hidden],
        )

    def _matrix(self, name: str, head: int | None) -> np.ndarray:
        """Step `name` of the trace as one (rows, cols) array: head `head` when it has heads."""
        values = view_model.step_values(self.trace[name])
        return values[head] if self.trace[name].axes[0] == "head" else values

    def _hidden_row(self, head: int | None, i: int, weights_row: np.ndarray) -> list[bool]:
        """Which keys the mask hides from query i (-inf in step masked), in head `head` or in
        any head (None); a NaN weight is not said to be hidden."""
        if "masked" not in self.trace:
            return []
        masked = view_model.step_values(self.trace["masked"])
        if self.trace["masked"].axes[0] == "head":
            masked = masked[:, i].min(axis=0) if head is None else masked[head, i]  # (S,)
        else:
            masked = masked[i]
        if masked.shape != weights_row.shape:
            return []
        return (np.isneginf(masked) & np.isfinite(weights_row)).tolist()

    def hover_cell(self, row: int, col: int, panel: int = 0) -> None:
        """Act as if the mouse were over cell (row, col) of a panel (command line, tests)."""
        self.heatmaps[panel].hover(row, col)

    def _hover_text(self, explained: str, shown: float) -> str:
        """The ground truth's arithmetic, labelled as such, and the backend's own cell value."""
        # explain() works on the float64 ground truth; a backend in another dtype (float16, say)
        # may show a different number in the cell, so the text says which number is which
        if self.trace is self.reference:  # the cells show the ground truth itself
            return explained
        truth = self.reference.source.dtype
        backend = f"{self.trace.source.backend} {self.trace.source.dtype}"
        # the same 4 significant digits as the explanation, so the two numbers compare
        value = numbers.significant(float(shown), 4)
        return f"ground truth ({truth}): {explained}\n{backend} shows {value}"

    def _on_hover(self, heatmap: Heatmap, cell: tuple[int, int] | None) -> None:
        for hm in self.sources:
            hm.clear_highlight()
        if cell is None or heatmap.panel is None:
            return
        panel = heatmap.panel
        step = self.trace[self.step_name]
        if step.axes[0] == "head" and panel.head is None:
            self.explanation.setText("the average of the heads: choose one head to see its sums")
            return
        index = ((panel.head,) if step.axes[0] == "head" else ()) + tuple(cell)
        if panel.vector:  # a vector step: the cell's row (a column vector) or column (a row)
            index = index[:-2] + ((cell[0],) if panel.vector == "column" else (cell[1],))
        try:
            info = scratch.explain(self.reference, self.step_name, index)
        except Exception as exc:  # noqa: BLE001 - show why there is no explanation
            self.explanation.setText(f"no explanation: {exc}")
            return
        text = self._hover_text(info.text, panel.raw[cell[0], cell[1]])
        self.explanation.setText(text)
        heatmap.setToolTip(text)
        self._show_sentence(cell[0])
        shown = {hm.panel.step: hm for hm in self.sources if hm.isVisible() and hm.panel}
        for src, axis, idx in getattr(info, "sources", ()):
            hm = shown.get(src)
            if hm is None:
                continue
            if hm.panel.head is not None and panel.head is not None and hm.panel.head != panel.head:
                hm.show_panel(self.panels_of(src, str(panel.head))[0])
            if hm.panel.vector:  # a vector has one axis, drawn as a column or a row
                axis = 0 if hm.panel.vector == "column" else 1
            hm.highlight(axis, idx)  # axis 0 = a row, 1 = a column of the (per-head) matrix

"""Inputs panel: preset, tokens, matrices, sizes, scale, mask, policy, backend and dtype."""

from __future__ import annotations

import html

from PyQt6.QtCore import QEvent, Qt, pyqtSignal
from PyQt6.QtGui import QKeySequence
from PyQt6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gui.state import cut_off, variant_session
from gui.state import session as sm
from gui.state.app_state import AppState
from gui.state.head_note import model_head_note
from gui.state.input_modes import with_mode
from gui.state.session import Session
from gui.views.variant_panel import VariantPanel
from gui.widgets import controls
from gui.widgets.mask_grid import MaskGrid
from gui.widgets.matrix_table import MatrixTable
from gui.widgets.spin_boxes import DoubleSpinBox, SpinBox
from scratch.learn import presets

MODE_LABELS = {"project": "x -> W_q, W_k, W_v", "qkv": "Q, K, V directly", "self": "q = k = v = x"}
SCALE_LABELS = {"sqrt": "1/sqrt(d_k)", "none": "none (1)", "custom": "custom"}
ROWS_LABELS = {"zero": "zero (weights 0)", "nan": "NaN", "uniform": "uniform (1/S)"}
TABLE_TITLES = {
    "project": {
        "query": "X",
        "key": "key input",
        "value": "value input",
        "w_q": "Wq",
        "w_k": "Wk",
        "w_v": "Wv",
    },
    "qkv": {"query": "Q", "key": "K", "value": "V"},
    "self": {"query": "X (q = k = v)"},
}
# the size boxes, two 4-digit boxes a row at most (the panel fits 330 pixels): each row's title,
# then per box its session field, the panel's attribute, its label, its largest value and tip
SIZES = (
    ("lengths", (("num_tokens", "num_tokens", "L", sm.MAX_TOKENS, "L: number of query tokens"),
                 ("num_keys", "num_keys", "S", sm.MAX_TOKENS,
                  "S: number of key tokens (cross-attention)"))),
    ("model", (("d_model", "d_model", "d_model", sm.MAX_DIM, "d_model: width of x"),)),
    ("widths", (("d_k", "d_k", "d_k", sm.MAX_DIM, "d_k: query/key width of one head"),
                ("d_v", "d_v", "d_v", sm.MAX_DIM, "d_v: value width of one head"))),
    ("heads", (("num_heads", "heads", "heads", sm.MAX_HEADS, "number of heads"),
               ("num_kv_heads", "kv_heads", "kv", sm.MAX_HEADS,
                "key/value heads (grouped-query attention)"))),
)  # fmt: skip
GRID_LIMIT = 64  # the mask grid is drawn (and clickable) up to 64 x 64
UNDO_KEYS = ("Ctrl+Z",)  # Edit > Undo and Redo of input edits (the window's menu)
REDO_KEYS = ("Ctrl+Shift+Z", "Ctrl+Y")


class WrappedLabel(QLabel):
    """A word-wrapped label as tall as its text at its width: the form in the scrolled panel
    kept the height of the previous text (a longer preset's notes were cut off)."""

    def __init__(self) -> None:
        super().__init__()
        self.setWordWrap(True)

    def _fit(self) -> None:
        self.setMinimumHeight(self.heightForWidth(self.width()) if self.text() else 0)

    def setText(self, text: str) -> None:
        super().setText(text)
        self._fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()


def _with_cell(s: sm.Session, name: str, i: int, j: int, value: float) -> sm.Session:
    """sm.with_cell; a refusal names the table as its tab does ('X (q = k = v)[0][1]')."""
    try:
        return sm.with_cell(s, name, i, j, value)
    except ValueError as exc:
        title = TABLE_TITLES.get(s.mode, {}).get(name, name)
        raise ValueError(str(exc).replace(f"{name}[", f"{title}[", 1)) from None


def preset_html(name: str) -> str:
    """The preset's title and notes as rich text (slips in red); '' for random and custom."""
    if name not in presets.names():
        return ""
    items, preset = [], presets.get(name)
    for note in [str(n) for n in preset.notes] + preset.slip_notes():  # then the slips' output
        text = html.escape(note)
        slip = note.lower().startswith("slip")
        items.append(f"<li style='color:#a0301d'>{text}</li>" if slip else f"<li>{text}</li>")
    title = html.escape(str(preset.title))
    return f"<b>{title}</b><ul style='margin-left:-20px'>{''.join(items)}</ul>"


class InputsPanel(QWidget):
    """Edits a Session; emits sessionChanged with each new one, refused with each refusal."""

    sessionChanged = pyqtSignal(object)
    message = pyqtSignal(str)  # news about an accepted edit
    refused = pyqtSignal(str)  # an edit that was refused: the session stayed as it was
    historyChanged = pyqtSignal(bool, bool)  # whether there is an edit to undo, one to redo

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state  # the session, its undo history: edits go through it
        self.backends = state.backends
        self._updating = False
        outer = QVBoxLayout(self)
        # step 1: example and sizes
        example = QGroupBox("Example")
        form = QFormLayout(example)
        self.preset = QComboBox()
        for name in presets.names():  # the title shows; the id stays the data
            title = str(presets.get(name).title)
            self.preset.addItem(title, name)
            self.preset.setItemData(
                self.preset.count() - 1, f"{title} ({name})", Qt.ItemDataRole.ToolTipRole
            )
        self.preset.addItem("random example", "random")
        self.preset.addItem("custom", "custom")
        # long titles elide in the box (the list shows them whole): the panel stays narrow
        self.preset.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.preset.setMinimumContentsLength(14)
        self.preset.view().setMinimumWidth(520)
        self.seed = SpinBox(0, sm.MAX_SEED, "seed of the random example", tracking=False)
        form.addRow("preset", self.preset)
        form.addRow("seed", self.seed)
        self.preset_notes = WrappedLabel()  # the notebook's title and notes, slips included
        self.preset_notes.setTextFormat(Qt.TextFormat.RichText)
        form.addRow(self.preset_notes)
        self.mode = controls.combo(MODE_LABELS)
        form.addRow("inputs", self.mode)
        self.tokens = QLineEdit()
        self.tokens.setToolTip("query token labels, comma-separated")
        form.addRow("token labels", self.tokens)
        self.key_tokens = QLineEdit()
        self.key_tokens.setToolTip("key token labels (cross-attention), comma-separated")
        form.addRow("key labels", self.key_tokens)
        self.sizes: dict[str, SpinBox] = {}  # session field -> its box (one change per number)
        for title, boxes in SIZES:
            line = []
            for field, name, label, top, tip in boxes:
                self.sizes[field] = box = SpinBox(1, top, tip, tracking=False)
                setattr(self, name, box)
                line += [label, box]
            form.addRow(title, controls.row(*line, 1))
        outer.addWidget(example)
        # step 2: options
        options = QGroupBox("Options")
        oform = QFormLayout(options)
        oform.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow dock: wrap
        self.scale_mode = controls.combo(SCALE_LABELS)
        self.scale_value = DoubleSpinBox(-1e6, 1e6, tracking=False)
        self.scale_value.setDecimals(6)
        oform.addRow("scale", controls.row((self.scale_mode, 1), self.scale_value))
        self.masked_rows = controls.combo(ROWS_LABELS)
        self.masked_rows.setToolTip("what a query gets when every key is masked")
        oform.addRow("fully masked rows", self.masked_rows)
        self.backend = QComboBox()
        for name in self.backends:
            self.backend.addItem(name, name)
        self.dtype = QComboBox()
        self.dtype.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.dtype.setMinimumContentsLength(len("bfloat16"))  # never 'bfloat1('
        oform.addRow("backend / dtype", controls.row((self.backend, 1), self.dtype))
        outer.addWidget(options)
        self.variant = VariantPanel()  # mask rule, score changes, sinks, RoPE, decode
        outer.addWidget(self.variant)
        # the variant's one mask, drawn under it (click a cell: a mask of your own): the
        # Variant box stays in reach at 1400 x 900, and a longer rule in words moves no control
        drawn = QGroupBox("Mask (click a cell to draw your own)")
        dform = QFormLayout(drawn)
        self.mask_grid = MaskGrid()
        dform.addRow(self.mask_grid)
        dform.addRow(self.variant.rule)  # the drawn mask's rule in words
        outer.addWidget(drawn)
        # step 3: the matrices
        self.tabs = QTabWidget()
        # parented, so tables not shown in this mode die with the panel (never left to the
        # garbage collector); hidden until a tab holds them
        self.tables = {name: MatrixTable(name, self) for name in sm.MATRICES}
        for table in self.tables.values():
            table.hide()
        outer.addWidget(self.tabs, 1)
        for box in self.findChildren((QLineEdit, QAbstractSpinBox)):
            box.installEventFilter(self)  # Ctrl+Z: see eventFilter
        self._connect()
        self._show(state.session)

    def _connect(self) -> None:
        self.preset.activated.connect(self._on_preset)
        self.seed.valueChanged.connect(self._on_seed)
        self.mode.activated.connect(lambda _: self._on_mode())
        self.tokens.editingFinished.connect(self._on_tokens)
        self.key_tokens.editingFinished.connect(self._on_tokens)
        for field, box in self.sizes.items():
            box.valueChanged.connect(lambda v, f=field: self._apply_sizes(f, v))
        self.scale_mode.activated.connect(lambda _: self._options())
        self.scale_value.valueChanged.connect(lambda _: self._options())
        self.masked_rows.activated.connect(lambda _: self._options())
        self.backend.activated.connect(lambda _: self._on_backend())
        self.dtype.activated.connect(lambda _: self._options())
        self.mask_grid.toggled.connect(self._on_toggle)
        self.variant.edited.connect(lambda f: self._apply(variant_session.with_variant, f))
        self.variant.decodeChanged.connect(lambda n: self._apply(variant_session.with_decode, n))
        for name, table in self.tables.items():
            model = table.matrix_model
            model.cellEdited.connect(lambda i, j, v, n=name: self._on_cell(n, i, j, v))
            model.rejected.connect(self.refused)

    # ---------------------------------------------------------------- showing a session

    @property
    def session(self) -> Session:
        """The session shown: the state's."""
        return self.state.session

    def set_session(self, s: Session) -> None:
        """Show `s` (a file's, a model head's) without emitting anything; Edit > Undo goes back."""
        if self.state.load(s):
            self.historyChanged.emit(True, False)
        self._show(s)

    def _show(self, s: Session, tables: bool = True) -> None:
        """Show `s` (the state's session) in every widget without emitting anything."""
        self._updating = True
        try:
            self.kv_heads.setMaximum(s.num_heads)  # before the values: no clamping of kv
            controls.select(
                self.preset, s.preset if self.preset.findData(s.preset) >= 0 else "custom"
            )
            self.preset_notes.setText(preset_html(s.preset) or model_head_note(s))
            self.preset_notes.setVisible(bool(self.preset_notes.text()))
            self.seed.setValue(s.seed)
            controls.select(self.mode, s.mode)
            for field, labels in ((self.tokens, s.tokens), (self.key_tokens, s.key_tokens)):
                field.setText(", ".join(labels))
                field.setCursorPosition(0)  # a long list shows its first labels, not its last
            self.key_tokens.setEnabled(s.key is not None)
            for field, box in self.sizes.items():
                box.setValue(getattr(s, field))
            self.num_keys.setEnabled(s.key is not None)
            self.d_model.setEnabled(s.mode != "qkv")
            self.d_k.setEnabled(s.mode != "self")
            self.d_v.setEnabled(s.mode != "self")
            self.kv_heads.setEnabled(s.mode != "self")  # k = x: as many kv heads as heads
            controls.select(self.scale_mode, s.scale_mode)
            self.scale_value.setValue(s.scale_value)
            self.scale_value.setEnabled(s.scale_mode == "custom")
            controls.select(self.masked_rows, s.masked_rows)
            controls.select(self.backend, s.backend)
            self.dtype.clear()
            for name in self.backends.get(s.backend, ()):
                self.dtype.addItem(name, name)
            controls.select(self.dtype, s.dtype)
            self._show_mask(s)
            self.variant.set_session(s)
            if tables:
                self._show_tables(s)
        finally:
            self._updating = False

    def _show_mask(self, s: Session) -> None:
        L, S = s.num_tokens, s.num_keys
        if L > GRID_LIMIT or S > GRID_LIMIT:  # a picture: evenly spaced queries and keys
            self.mask_grid.set_grid(variant_session.sampled_mask(s, GRID_LIMIT), editable=False)
            self.mask_grid.setToolTip(
                f"{L} x {S} mask drawn at {min(L, GRID_LIMIT)} x {min(S, GRID_LIMIT)} evenly "
                f"spaced queries and keys; cells can be clicked up to {GRID_LIMIT} x {GRID_LIMIT}"
            )
            return
        self.mask_grid.setToolTip("")
        self.mask_grid.set_grid([list(row) for row in variant_session.shown_mask(s)], editable=True)

    def _show_tables(self, s: Session) -> None:
        current = self.tabs.tabText(self.tabs.currentIndex())
        self.tabs.clear()
        for name in s.matrices_in_use():
            labels = s.key_tokens if name in ("key", "value") else None
            labels = s.tokens if name == "query" else labels
            self.tables[name].matrix_model.set_matrix(s.matrix(name), labels)
            self.tables[name].matrix_model.title = TABLE_TITLES[s.mode][name]
            self.tabs.addTab(self.tables[name], TABLE_TITLES[s.mode][name])
        for i in range(self.tabs.count()):
            if self.tabs.tabText(i) == current:
                self.tabs.setCurrentIndex(i)

    # ---------------------------------------------------------------- edits

    def _emit(self, s: Session, tables: bool = True) -> None:
        """Show and announce an edited session, once it is one that would load from a file.

        Cell edits (tables=False) keep every shape and with_cell refuses non-finite numbers,
        so they skip the whole-session check (about 0.1 s at the largest sizes)."""
        if self.state.edit(s, tables):  # SessionError (a ValueError) names the field
            self.historyChanged.emit(True, False)
        self._show(s, tables=tables)
        self.sessionChanged.emit(s)

    def _apply(self, fn, *args, tables: bool = True) -> bool:
        """Apply a pure session edit; a refusal goes to the status bar, the session stays.
        Whether the edit was made."""
        if self._updating:
            return False
        try:
            self._emit(fn(self.session, *args), tables=tables)
        except (ValueError, TypeError, KeyError) as exc:
            self.refused.emit(f"refused: {exc}; the previous values are kept")
            self._show(self.session)
            return False
        return True

    # ---------------------------------------------------------------- undo and redo

    def eventFilter(self, watched, event) -> bool:
        """Ctrl+Z in a text or number box undoes its typing while it has some to undo; after
        that (the edit made, the box shown again) it is Edit > Undo of the inputs, not a dead
        key. Likewise Ctrl+Shift+Z and Redo."""
        if event.type() == QEvent.Type.ShortcutOverride:
            keys = QKeySequence(event.keyCombination()).toString()
            edit = watched if isinstance(watched, QLineEdit) else watched.findChild(QLineEdit)
            if edit is not None and (
                (keys in UNDO_KEYS and not edit.isUndoAvailable())
                or (keys in REDO_KEYS and not edit.isRedoAvailable())
            ):
                return True  # the override not accepted: the window's shortcut takes the key
        return super().eventFilter(watched, event)

    def undo(self) -> bool:
        """Go back to the inputs before the newest edit; whether there was one."""
        return self._restore(self.state.undo(), "undone")

    def redo(self) -> bool:
        """Make the newest undone edit again; whether there was one."""
        return self._restore(self.state.redo(), "redone")

    def _restore(self, s: Session | None, what: str) -> bool:
        if s is None:
            self.message.emit(f"nothing to be {what}")
            return False
        self._show(s)
        history = self.state.history
        self.historyChanged.emit(history.can_undo(), history.can_redo())
        self.sessionChanged.emit(s)
        self.message.emit(f"{what}: the inputs are as they were (Edit menu: undo, redo)")
        return True

    def apply_edit(self, fn, *args) -> None:
        """Apply a pure session edit made elsewhere (the backward view's dO choice)."""
        self._apply(fn, *args)

    def _apply_sizes(self, field: str, value: int) -> None:
        # a random example is drawn again at the new sizes; others keep the values that fit,
        # and growing back restores the cells a smaller size cut off (not zeros and 't5')
        kept = cut_off.remembered(self.session, self.state.cut)
        if self._apply(lambda s: cut_off.regrown(s, kept, **{field: value})):
            self.state.cut = kept

    def _on_preset(self) -> None:
        name = self.preset.currentData()
        preset = None if name in ("custom", "random") else presets.get(name)
        if self._apply(sm.with_preset, name, preset):
            self.state.cut = None  # another example: nothing of it was cut off

    def _on_seed(self, value: int) -> None:
        if self._apply(sm.reseeded, value):
            self.state.cut = None

    def _on_mode(self) -> None:
        if self._apply(with_mode, self.mode.currentData()):
            self.state.cut = None  # the tables mean other things now

    def _on_tokens(self) -> None:
        if self._updating:
            return
        texts = (self.tokens.text(), self.key_tokens.text())
        try:
            unchanged = sm.with_labels(self.session, *texts) is self.session
        except ValueError:
            unchanged = False  # _apply shows the refusal and restores the labels
        if not unchanged:
            self._apply(sm.with_labels, *texts)

    def _on_cell(self, name: str, i: int, j: int, value: float) -> None:
        if not self._updating:
            self._apply(lambda s: _with_cell(s, name, i, j, value), tables=False)

    def _on_toggle(self, i: int, j: int) -> None:
        """Flip one cell of the grid on screen (the mask on screen becomes a drawn one)."""
        self._apply(variant_session.toggled_mask_cell, i, j)

    def _on_backend(self) -> None:
        name = self.backend.currentData()
        edited = sm.with_backend(self.session, name, self.backends[name])
        if edited.dtype != self.session.dtype:
            self.message.emit(f"{name} has no {self.session.dtype}; dtype is now {edited.dtype}")
        self._apply(sm.with_backend, name, self.backends[name])

    def _options(self) -> None:
        self._apply(
            sm.with_options,
            self.scale_mode.currentData(),
            self.scale_value.value(),
            self.masked_rows.currentData(),
            self.dtype.currentData(),
        )

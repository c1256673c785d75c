"""Main window: builds the panels, menus and status bar and connects them; nothing else."""

from __future__ import annotations

from PyQt6.QtCore import QEvent, QSettings, Qt
from PyQt6.QtGui import QAction, QKeySequence, QShortcut
from PyQt6.QtWidgets import (
    QAbstractItemView,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from gui.app.actions import FileActions
from gui.present import numbers
from gui.state import controller, session_file
from gui.state import session as sm
from gui.state.app_state import AppState, backend_dtypes, same_inputs
from gui.state.head_note import head_title
from gui.views.backward_view import BackwardView
from gui.views.check_panel import CheckPanel
from gui.views.inputs_panel import REDO_KEYS, UNDO_KEYS, InputsPanel
from gui.views.kernel_check import KernelCheckPanel
from gui.views.learn_tab import LearnTab
from gui.views.model_panel import ModelPanel
from gui.views.overview import Overview
from gui.views.pipeline_view import PipelineView
from gui.views.slow_warning import SlowWarning
from gui.views.train_tab import TrainTab
from gui.widgets.toy_banner import ToyBanner, is_model_head
from gui.widgets.wheel_guard import guard_wheel
from gui.work.worker import TraceWorker
from scratch.learn import presets

DEFAULT_PRESET = "journey"
TAB_TITLES = (
    "Pipeline", "Backward", "Overview", "Check", "Check a kernel", "Model", "Learn", "Train",
)  # fmt: skip
NAVIGATION_KEYS = (Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Home, Qt.Key.Key_End)
# line edits and spin boxes claim these keys themselves; tables and text areas are told to
EDITORS = (QAbstractItemView, QTextEdit)


def default_session() -> sm.Session:
    """The 'journey' preset when it exists, else a seeded random example."""
    if DEFAULT_PRESET in presets.names():
        return sm.from_preset(presets.get(DEFAULT_PRESET))
    return sm.random_session(0)


def remembered_session(settings: QSettings) -> sm.Session | None:
    """The last session stored in settings, or None when absent or no longer valid."""
    text = settings.value("session")
    if not isinstance(text, str):
        return None
    try:
        return session_file.loads(text, backend_dtypes())
    except Exception:  # anything wrong with stored settings: start fresh, never fail to start
        return None


class MainWindow(QMainWindow):
    """Inputs on the left; pipeline, overview and check tabs in the middle."""

    def __init__(
        self, settings: QSettings, session: sm.Session | None = None, dialogs: bool = True
    ) -> None:
        super().__init__()
        self.settings = settings
        self.dialogs = dialogs
        self.warnings: list[str] = []
        self.refusal: str | None = None  # the refused edit the status bar shows, if any
        self.setWindowTitle("Attention, step by step")
        session = session or remembered_session(settings) or default_session()
        # step 1: the state (no Qt) and the panels that render it
        self.state = AppState(session)
        self.inputs = InputsPanel(self.state)
        self.pipeline = PipelineView()
        self.pipeline.step_name = session.step
        self.backward = BackwardView()
        self.backward.set_session(session)
        self.overview = Overview()
        self.checks = CheckPanel()
        self.model = ModelPanel()
        self.kernel_check = KernelCheckPanel()
        self.learn = LearnTab()  # why, mistakes, tiles: computed only while visible
        self.train = TrainTab()  # a tiny transformer trained in a worker, its heads forming
        self.pages = {  # the tabs, by the names main.py's --tab takes
            "pipeline": self.pipeline,
            "backward": self.backward,
            "overview": self.overview,
            "check": self.checks,
            "kernel": self.kernel_check,
            "model": self.model,
            "learn": self.learn,
            "train": self.train,
        }
        self.tabs = QTabWidget()
        for page, title in zip(self.pages.values(), TAB_TITLES):
            self.tabs.addTab(page, title)
        self.setCentralWidget(self.tabs)
        self.inputs_scroll = scroll = QScrollArea()  # the Inputs panel scrolls, the banner stays
        scroll.setWidget(self.inputs)
        scroll.setWidgetResizable(True)
        # wide enough for the inputs plus the scroll bar: nothing clipped at 1024 x 700
        bar = scroll.verticalScrollBar().sizeHint().width()
        scroll.setMinimumWidth(self.inputs.minimumSizeHint().width() + bar + 4)
        self.dock = QDockWidget("Inputs")
        self.dock.setObjectName("inputs")
        self.toy_banner = ToyBanner()  # a model head replaced the toy example: the way back
        docked = QWidget()
        column = QVBoxLayout(docked)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.toy_banner)
        column.addWidget(scroll, 1)
        self.dock.setWidget(docked)
        self.dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.dock)
        # step 2: status bar: backend and dtype always visible, progress and cancel while busy
        self.backend_label = QLabel()
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.cancel_button = QPushButton("Cancel")
        self.slow = SlowWarning()  # before a long scratch computation: NumPy, or compute anyway
        for widget in (self.slow, self.progress, self.cancel_button, self.backend_label):
            self.statusBar().addPermanentWidget(widget)
        self._set_busy(False)
        # step 3: the worker and the file actions
        self.worker = TraceWorker(self)
        # the backward pass: computed only while the Backward tab is open (it costs seconds)
        self.backward_worker = TraceWorker(self, compute=controller.run_backward)
        self.files = FileActions(self)
        self._menus()
        self._shortcuts()
        self._connect()
        guard_wheel(self)  # the wheel scrolls panels; it edits a box only while it has focus
        self.resize(1400, 900)
        geometry, size = settings.value("geometry"), settings.value("size")
        if geometry is not None:
            self.restoreGeometry(geometry)  # position and maximized state
        if size is not None:
            self.resize(size)  # Qt clamps restored geometry to the screen; the size is exact
        self.submit(session)

    def _menus(self) -> None:
        f = self.files
        file_menu = self.menuBar().addMenu("&File")
        entries = [
            ("&Open session...", QKeySequence.StandardKey.Open, lambda: f.open_session()),
            ("&Save session...", QKeySequence.StandardKey.Save, lambda: f.save_session()),
            None,
            ("Open &run...", None, lambda: f.open_run()),
            ("Save r&un...", None, lambda: f.save_run()),
            None,
            ("Export view as &PNG...", None, lambda: f.export_png()),
            ("Export view as S&VG...", None, lambda: f.export_svg()),
            ("Export trace as &JSON...", None, lambda: f.export_trace_json()),
            ("Export matrices as &CSV...", None, lambda: f.export_csv()),
            None,
            ("Copy as code (&NumPy)", None, lambda: f.copy_code("numpy")),
            ("Copy as code (Py&Torch)", None, lambda: f.copy_code("torch")),
            None,
            ("&Quit", QKeySequence.StandardKey.Quit, self.close),
        ]
        for entry in entries:
            if entry is None:
                file_menu.addSeparator()
                continue
            text, keys, slot = entry
            action = QAction(text, self)
            if keys is not None:
                action.setShortcut(keys)
            action.triggered.connect(slot)
            file_menu.addAction(action)
        self._edit_menu()

    def _edit_menu(self) -> None:
        """Edit > Undo (Ctrl+Z) and Redo (Ctrl+Shift+Z): every input edit, values exact."""
        menu = self.menuBar().addMenu("&Edit")
        self.undo_action = QAction("&Undo input edit", self)
        self.undo_action.setShortcuts([QKeySequence(k) for k in UNDO_KEYS])
        self.undo_action.triggered.connect(self.inputs.undo)
        self.redo_action = QAction("&Redo input edit", self)
        self.redo_action.setShortcuts([QKeySequence(k) for k in REDO_KEYS])
        self.redo_action.triggered.connect(self.inputs.redo)
        for action in (self.undo_action, self.redo_action):
            action.setEnabled(False)
            menu.addAction(action)
        self.inputs.historyChanged.connect(self.undo_action.setEnabled)
        self.inputs.historyChanged.connect(lambda _, redo: self.redo_action.setEnabled(redo))

    def _shortcuts(self) -> None:
        """Left/Right/Home/End move through the steps anywhere in the window."""
        for key in NAVIGATION_KEYS:
            shortcut = QShortcut(QKeySequence(key), self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(lambda k=key: self.navigation_key(k))
        for editor in self.findChildren(EDITORS):
            editor.installEventFilter(self)

    def navigation_key(self, key: int) -> None:
        """Step through the pipeline (Left, Right, Home, End)."""
        view = self.backward.pipeline if self.tabs.currentWidget() is self.backward else None
        action = (view or self.pipeline).key_action(key)
        if action is not None:
            action()

    def eventFilter(self, watched, event) -> bool:
        """While an editor has the focus, the navigation keys are its own (cursor, cells)."""
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and event.key() in NAVIGATION_KEYS
            and isinstance(watched, EDITORS)
        ):
            event.accept()  # an accepted override: Qt gives the key to the editor
            return True
        return super().eventFilter(watched, event)

    def _connect(self) -> None:
        self.inputs.sessionChanged.connect(self._on_inputs)
        self.inputs.sessionChanged.connect(self._clear_refusal)
        self.inputs.message.connect(self.say)
        self.inputs.refused.connect(self.refuse)
        self.worker.started.connect(self._on_started)
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.worker.cancelled.connect(lambda: self._on_failed("cancelled by the user"))
        self.cancel_button.clicked.connect(self.worker.cancel)
        self.slow.useNumpy.connect(self._use_numpy)
        self.slow.computeAnyway.connect(self.worker.submit)
        self.pipeline.headChanged.connect(self.overview.set_head)
        self.pipeline.stepChanged.connect(self.learn.show_step)
        self.pipeline.headChanged.connect(self.learn.set_head)
        self.pipeline.headChanged.connect(self.backward.pipeline.set_head)  # the same head there
        self.overview.stepChosen.connect(self.open_step)
        self.model.sessionChosen.connect(self.open_model_session)
        self.train.sessionChosen.connect(self.open_train_head)
        self.train.backwardChosen.connect(self.open_train_backward)
        self.train.message.connect(self.say)
        self.toy_banner.back.connect(self.load_session)
        self.inputs.sessionChanged.connect(self.toy_banner.follow)
        self.tabs.currentChanged.connect(lambda _: self._inputs_for_tab())
        self.model.message.connect(self.say)
        self.model.refused.connect(self.refuse)
        self.inputs.sessionChanged.connect(self.backward.set_session)
        self.inputs.sessionChanged.connect(lambda _: self.refresh_backward())
        self.tabs.currentChanged.connect(lambda _: self.refresh_backward())
        self.backward.gradOutputChosen.connect(
            lambda kind, seed: self.inputs.apply_edit(sm.with_grad_output, kind, seed)
        )
        self.backward.cancelRequested.connect(self.backward_worker.cancel)
        self.backward_worker.progress.connect(
            lambda done, total, what: self.backward.set_busy(f"computing: {what} ({done}/{total})")
        )
        self.backward_worker.finished.connect(self._on_backward_finished)
        self.backward_worker.failed.connect(self._on_backward_failed)
        self.backward_worker.cancelled.connect(lambda: self._on_backward_failed("cancelled"))

    # ---------------------------------------------------------------- slots

    def _on_inputs(self, s: sm.Session) -> None:
        """Compute the forward trace of new inputs; a new dO alone keeps the trace on screen."""
        if self.state.keeps_trace(s, self.worker.busy):  # the same trace, the new dO noted
            self.slow.drop()  # the trace on screen is these inputs': nothing left to ask
            self.pipeline.set_stale("")  # the trace on screen is these inputs' after all
            return
        self.submit(s)

    def submit(self, s: sm.Session) -> None:
        """Compute the trace of `s`, unless the scratch backend would take long: then ask first."""
        if self.slow.holds(s):
            self.worker.cancel()
            self.pipeline.set_stale("not computed yet: see the question at the bottom right")
            self.backend_label.setText("not computed: NumPy or scratch?")
            return
        self.worker.submit(s)

    def _use_numpy(self) -> None:
        self.inputs.apply_edit(sm.with_backend, "numpy", self.inputs.backends["numpy"])

    def _set_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)

    def _clear_refusal(self, _: object) -> None:
        """An accepted edit: the refusal of an earlier one, still shown, no longer applies."""
        if self.refusal is not None and self.statusBar().currentMessage() == self.refusal:
            self.statusBar().clearMessage()
        self.refusal = None

    def _on_started(self, s: sm.Session) -> None:
        self._set_busy(True)
        self.progress.setRange(0, 3)
        self.progress.setValue(0)
        self.backend_label.setText(f"computing with {s.backend} ({s.dtype})...")
        if self.outcome is not None:  # the matrices on screen are the previous inputs'
            self.pipeline.set_stale(
                f"stale: the previous inputs' trace, while {s.backend} computes the new one"
            )

    def _on_progress(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.setFormat(what)

    def _on_finished(self, outcome: object) -> None:
        self._set_busy(False)
        self.pipeline.set_stale("")
        self.state.outcome = outcome
        self.pipeline.set_trace(outcome.trace, outcome.reference)
        self.overview.set_trace(outcome.trace, self.pipeline.head)
        self.learn.set_trace(outcome.reference)
        self.checks.set_outcome(outcome, self.state.gradients_for(outcome.session))
        verdict = " | all steps pass" if all(c.ok for c in outcome.checks) else " | CHECK FAILED"
        verdict = verdict if outcome.checks else " | not checked"
        self.backend_label.setText(
            f"backend {outcome.backend} | dtype {outcome.dtype} | kernel {outcome.kernel}{verdict}"
        )

    def _on_failed(self, message: str) -> None:
        self._set_busy(False)
        shown = self.outcome
        where = f"showing the last good trace ({shown.backend}, {shown.dtype})" if shown else ""
        self.backend_label.setText(f"not computed | {where}")
        if shown is not None:
            self.pipeline.set_stale("not the current inputs: the last good trace is shown")
        self.say(message.splitlines()[0] if message else "failed")

    # ---------------------------------------------------------------- the backward pass

    def refresh_backward(self) -> None:
        """Compute the backward pass of the inputs on screen, if the Backward tab is open and
        it is not already shown or on its way."""
        if self.tabs.currentWidget() is not self.backward:
            return
        s = self.state.session
        if self.state.gradients_for(s) is not None and not self.backward_worker.busy:
            return
        if self.backward_worker.busy and same_inputs(self._backward_asked, s):
            return
        self._backward_asked = s
        self.backward.set_busy(
            f"computing the backward pass ({numbers.count(s.num_tokens, 'token')})..."
        )
        self.backward_worker.submit(s)

    _backward_asked: sm.Session | None = None

    @property
    def outcome(self) -> object:
        """The newest forward Outcome (the state's), or None."""
        return self.state.outcome

    @property
    def backward_outcome(self) -> object:
        """The newest BackwardOutcome (the state's, maybe of earlier inputs), or None."""
        return self.state.backward_outcome

    def _on_backward_finished(self, outcome: object) -> None:
        shown = self.state.backward_finished(outcome)
        self.backward.set_outcome(outcome)
        if shown:
            self.checks.set_outcome(self.outcome, outcome)

    def _on_backward_failed(self, message: str) -> None:
        first = message.splitlines()[0] if message else "failed"
        self.backward.set_busy("")
        self.backward.show_message(f"The backward pass was not computed: {first}")
        self.say(f"backward: {first}")

    def open_step(self, name: str) -> None:
        """Open step `name` in the pipeline tab."""
        self.pipeline.set_step(name)
        self.tabs.setCurrentWidget(self.pipeline)

    def open_model_session(self, s: sm.Session) -> None:
        """Open one head of a model run in the pipeline (its session built by the Model tab's
        worker: the real x, W and biases; a decoder's with causal + RoPE as its variant). The
        banner above the inputs says the toy example was replaced and offers it back."""
        self.toy_banner.replaced(self.state.session, s)
        self.load_session(s)
        self.tabs.setCurrentWidget(self.pipeline)
        self.say(f"{head_title(s.preset)}: the model's own numbers")

    def open_train_head(self, s: sm.Session) -> None:
        """A trained layer from the Train tab, opened as a model head is, its head shown."""
        self.open_model_session(s)
        self.pipeline.set_head(str(self.train.head[1]))

    def open_train_backward(self, s: sm.Session) -> None:
        """The same layer opened in the Backward tab, its dO the training loss's own gradient
        there (the session's 'training' choice: gui/state/train_session.py)."""
        self.open_train_head(s)
        self.tabs.setCurrentWidget(self.backward)

    def _inputs_for_tab(self) -> None:
        """The Model and Train tabs have their own inputs: the Inputs dock steps aside to give
        them the width."""
        toy = self.tabs.currentWidget() not in (self.model, self.train)
        self.dock.setVisible(toy)
        self.backend_label.setVisible(toy)  # "all steps pass" is the example's, not the model's

    def load_session(self, s: sm.Session) -> None:
        """Show and compute a session (from a file or settings)."""
        if not is_model_head(s):  # another example (the toy one back, a file): no way back
            self.toy_banner.forget()
        self.inputs.set_session(s)
        self.backward.set_session(s)
        self.pipeline.step_name = s.step
        self.submit(s)
        self.refresh_backward()

    def view(self) -> QWidget:
        """What 'export view' captures: the current tab without its controls."""
        current = self.tabs.currentWidget()
        contents = {
            self.pipeline: self.pipeline.content,
            self.backward: self.backward.pipeline.content,
            self.model: self.model.content,
        }
        return contents.get(current, current)

    def say(self, text: str) -> None:
        """A status-bar message."""
        self.statusBar().showMessage(text, 10000)

    def refuse(self, text: str) -> None:
        """A refused edit, said in the status bar until an accepted edit replaces it."""
        self.say(text)
        self.refusal = text

    def warn(self, text: str) -> None:
        """A problem the user must see: status bar plus a non-blocking message box."""
        self.warnings.append(text)
        self.say(text)
        if self.dialogs:
            box = QMessageBox(QMessageBox.Icon.Warning, "Attention app", text, parent=self)
            box.setModal(False)
            box.show()

    def closeEvent(self, event) -> None:
        self.worker.cancel()  # the running job stops at its next checkpoint ...
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("size", self.size())
        self.settings.setValue("session", session_file.dumps(self.files.current_session()))
        self.settings.sync()
        self.backward_worker.cancel()
        self.worker.wait()  # ... and is joined: no computation thread outlives the window
        self.backward_worker.wait()
        self.model.wait()
        self.kernel_check.worker.wait()
        self.learn.wait()
        self.train.wait()  # training stops between two steps and its worker is joined
        super().closeEvent(event)

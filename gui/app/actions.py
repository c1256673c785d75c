"""File menu actions: open/save a session, export the view and the trace, copy as code."""

from __future__ import annotations

import dataclasses
import os

from PyQt6.QtCore import QStandardPaths
from PyQt6.QtWidgets import QApplication, QFileDialog

from gui.present import codegen
from gui.state import app_state, session_file, variant_session
from gui.state import session as sm
from gui.widgets import export


class FileActions:
    """Each action takes an explicit path (tests, command line) or asks with a file dialog."""

    def __init__(self, window: object) -> None:
        self.window = window

    def start_folder(self) -> str:
        """Where file dialogs open: the folder last used, else the user's documents folder."""
        last = self.window.settings.value("last_folder")
        if isinstance(last, str) and os.path.isdir(last):
            return last
        docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        return docs if docs and os.path.isdir(docs) else os.path.expanduser("~")

    def remember_folder(self, path: str) -> None:
        """The folder of a chosen file (or a chosen folder) opens the next dialog."""
        folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        self.window.settings.setValue("last_folder", folder)

    def _ask(self, save: bool, title: str, pattern: str) -> str | None:
        dialog = QFileDialog.getSaveFileName if save else QFileDialog.getOpenFileName
        path, _ = dialog(self.window, title, self.start_folder(), pattern)
        return path or None

    def current_session(self) -> sm.Session:
        """The inputs plus the step on screen."""
        w = self.window
        return dataclasses.replace(w.inputs.session, step=w.pipeline.step_name)

    def open_session(self, path: str | None = None) -> bool:
        """Load a session file; a bad file leaves the current session untouched."""
        path = path or self._ask(False, "Open session", "Session (*.json)")
        if not path:
            return False
        try:
            s = session_file.load(path, app_state.backend_dtypes())
        except sm.SessionError as exc:
            self.window.warn(
                f"Could not open {os.path.basename(path)}: {exc}. The current session is kept."
            )
            return False
        self.window.load_session(s)
        self.remember_folder(path)
        self.window.say(f"opened {path}")
        return True

    def save_session(self, path: str | None = None) -> bool:
        """Write the session as JSON (atomically)."""
        path = path or self._ask(True, "Save session", "Session (*.json)")
        if not path:
            return False
        return self._write(path, lambda: session_file.save(path, self.current_session()))

    def open_run(self, path: str | None = None) -> bool:
        """Open a training run (.npz) in the Train tab; a corrupt or foreign file is refused
        with a message and the run on screen kept."""
        from scratch.train import run_file

        path = path or self._ask(False, "Open run", "Training run (*.npz)")
        if not path:
            return False
        try:
            run = run_file.load(path)
        except ValueError as exc:
            self.window.warn(f"Could not open {os.path.basename(path)}: {exc}. The run is kept.")
            return False
        self.window.train.open_run(run)
        self.window.tabs.setCurrentWidget(self.window.train)
        self.remember_folder(path)
        self.window.say(f"opened {path}")
        return True

    def save_run(self, path: str | None = None) -> bool:
        """Write the Train tab's run (.npz, atomically: a failed write leaves the old file)."""
        from scratch.train import run_file

        run = self.window.train.run
        if run is None:
            self.window.warn("No training run to save yet: press Start in the Train tab.")
            return False
        path = path or self._ask(True, "Save run", "Training run (*.npz)")
        return bool(path) and self._write(path, lambda: run_file.save(run, path))

    def export_png(self, path: str | None = None) -> bool:
        """The current tab as a PNG image."""
        path = path or self._ask(True, "Export PNG", "PNG image (*.png)")
        return bool(path) and self._write(path, lambda: export.save_png(path, self.window.view()))

    def export_svg(self, path: str | None = None) -> bool:
        """The current tab as an SVG drawing."""
        path = path or self._ask(True, "Export SVG", "SVG drawing (*.svg)")
        return bool(path) and self._write(path, lambda: export.save_svg(path, self.window.view()))

    def export_trace_json(self, path: str | None = None) -> bool:
        """The whole trace on screen as JSON."""
        trace = self._trace()
        path = trace and (path or self._ask(True, "Export trace", "JSON (*.json)"))
        return bool(path) and self._write(path, lambda: export.save_trace_json(path, trace))

    def export_csv(self, folder: str | None = None) -> bool:
        """Every matrix of the trace as CSV files in a folder."""
        trace = self._trace()
        if trace is None:
            return False
        folder = folder or QFileDialog.getExistingDirectory(
            self.window, "Export CSV to folder", self.start_folder()
        )
        return bool(folder) and self._write(folder, lambda: export.save_csvs(folder, trace))

    def copy_code(self, library: str) -> str:
        """Put a NumPy or PyTorch snippet reproducing the example on the clipboard."""
        if not variant_session.is_plain(self.window.inputs.session):
            self.window.warn(
                "Copy as code writes plain attention only: this session's variant or decode "
                "step would be left out, so nothing was copied."
            )
            return ""
        text = codegen.snippet(self.window.inputs.session, library)
        QApplication.clipboard().setText(text)
        self.window.say(f"copied a {library} snippet ({len(text.splitlines())} lines)")
        return text

    def _trace(self) -> object:
        """The trace on screen, only when it was computed from the inputs on screen."""
        outcome = self.window.outcome
        if outcome is None:
            self.window.warn("Nothing to export yet: no trace has been computed.")
            return None
        inputs = dataclasses.replace(self.window.inputs.session, step=outcome.session.step)
        if inputs != outcome.session:
            busy = self.window.worker.busy
            self.window.warn(
                "The trace on screen is from earlier inputs: the current ones are "
                + (
                    "still being computed; export when they are done."
                    if busy
                    else "not computed (see the status bar). Nothing was exported."
                )
            )
            return None
        return outcome.trace

    def _write(self, path: str, write) -> bool:
        try:
            write()
        except (OSError, ValueError) as exc:
            self.window.warn(f"Could not write {path}: {exc}")
            return False
        self.remember_folder(path)
        self.window.say(f"wrote {path}")
        return True

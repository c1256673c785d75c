"""Said before a long pure-Python computation starts: how long the scratch backend would take, with
a button for NumPy and one to compute anyway (no modal dialog: the window stays usable).

The question stays until it is answered (a click whose edit is refused leaves it on screen) or
the inputs change, and offers NumPy only when the session on NumPy would be accepted."""

from __future__ import annotations

import dataclasses

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from gui.present import numbers
from gui.state import variant_session
from gui.state.session import SessionError
from gui.state.variant_session import call_sizes

# plain Python costs about this per cell of scores per head (mask, softmax, bookkeeping) and
# this per multiply-add (q . k, weights @ v, the projections); measured with the scratch backend
# on a loaded 2-core machine: 1.2 s for 256 tokens (estimate 0.8 s), 0.26 s for decode step 2048
# (estimate 0.13 s), 2 heads of width 4, d_model 8
CELL_US, MULTIPLY_US = 3.0, 0.4
WARN_S = 10.0  # longer than this: asked first


def scratch_work(s: object) -> tuple[int, int]:
    """(score cells, multiply-adds) of the call session `s` makes: at decode step n one query
    against n keys, not the whole sequence (gui.state.variant_session.call_sizes)."""
    L, S = call_sizes(s)
    H, H_kv = s.num_heads, s.num_kv_heads
    cells = H * L * S  # (H, L, S) scores
    multiplies = cells * (s.d_k + s.d_v)  # q . k per score, weights @ v per output feature
    if s.mode == "project":  # x @ w_q for the L queries, x @ w_k and x @ w_v for the S keys
        multiplies += s.d_model * (L * H * s.d_k + S * H_kv * (s.d_k + s.d_v))
    return cells, multiplies


def scratch_seconds(s: object) -> float:
    """About how long the scratch backend takes for session `s` (0 for another backend)."""
    if s.backend != "scratch":
        return 0.0
    cells, multiplies = scratch_work(s)
    return (cells * CELL_US + multiplies * MULTIPLY_US) / 1e6


def numpy_refusal(s: object) -> str:
    """Why session `s` on the NumPy backend would be refused ('' when it would compute)."""
    try:
        variant_session.checked(dataclasses.replace(s, backend="numpy"))
    except SessionError as exc:
        return str(exc)
    return ""


def duration(seconds: float) -> str:
    """'about 40 seconds', 'about 1 minute', 'about 3 minutes'."""
    if seconds < 60:
        return f"about {numbers.count(round(seconds), 'second')}"
    return f"about {numbers.count(round(seconds / 60), 'minute')}"


class SlowWarning(QFrame):
    """'scratch would take about 2 minutes at 4096 tokens:' [Use NumPy] [Compute with scratch]."""

    useNumpy = pyqtSignal()
    computeAnyway = pyqtSignal(object)  # the session to compute

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)  # no taller than the status bar's buttons
        self.setStyleSheet("SlowWarning { background: #fff3cd; }")
        self.session = None  # the session waiting for an answer
        self.confirmed: tuple | None = None  # (backend, tokens, keys, heads) computed anyway
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 0, 6, 0)
        self.label = QLabel()
        self.numpy_button = QPushButton("Use NumPy")
        self.anyway_button = QPushButton("Compute with scratch")
        row.addWidget(self.label)
        row.addWidget(self.numpy_button)
        row.addWidget(self.anyway_button)
        self.numpy_button.clicked.connect(self._use_numpy)
        self.anyway_button.clicked.connect(self._anyway)
        self.hide()

    @staticmethod
    def _size(s: object) -> tuple:
        return (s.backend, s.num_tokens, s.num_keys, s.num_heads, s.d_k, s.d_v)

    def holds(self, s: object) -> bool:
        """True when `s` must wait for an answer (shown now); False: compute it."""
        seconds = scratch_seconds(s)
        if seconds <= WARN_S or self.confirmed == self._size(s):
            self.session = None
            self.hide()
            return False
        self.session = s
        refusal = numpy_refusal(s)  # never offer a path that will be refused
        self.numpy_button.setVisible(not refusal)
        self.numpy_button.setToolTip(refusal)
        self.label.setText(
            f"scratch would take {duration(seconds)} at {numbers.count(s.num_tokens, 'token')}:"
        )
        self.label.setToolTip(
            "The scratch backend is the exact ground truth in plain Python: it computes every "
            "score one by one. NumPy computes the same trace in about a second and is checked "
            "against the ground truth on sampled rows."
        )
        self.show()
        return True

    def drop(self) -> None:
        """No question any more: the inputs it asked about are no longer waiting."""
        self.session = None
        self.hide()

    def _use_numpy(self) -> None:
        """Ask for NumPy; the question goes when the new session arrives (`holds`), and stays
        if the edit is refused."""
        self.useNumpy.emit()

    def _anyway(self) -> None:
        s, self.session = self.session, None
        self.hide()
        if s is not None:
            self.confirmed = self._size(s)
            self.computeAnyway.emit(s)

"""The sampled check's ground truth in a second process, computed while the backend attends.

The ground truth is plain Python and holds the GIL while it runs: in a thread of the window's
process it would take turns with the trace's NumPy calls (and the GUI thread), in the worker
thread after the trace it adds its whole time to the recompute. In a process of its own it runs
on another core while the backend computes the scores. Meanwhile OpenBLAS is held to one
thread (`sharing_cores`): a busy process beside a NumPy trace at 4096 tokens slowed it from
0.14 s to 0.20 s (OpenBLAS's two threads wait for each other when one core is taken), with one
BLAS thread it took 0.16 s either way. (At the lowest priority, nice 19, the child instead
starved: OpenBLAS's idle threads spin, and the trace waited up to 94 ms for its answer.)

One child process (`python -c "...serve()"`: unlike multiprocessing's spawn it never re-runs
the caller's main script) starts at first use and is kept; requests and answers are pickles on
its stdin and stdout, one at a time. When it cannot start or dies, the rows are computed in the
calling thread instead and the next call starts a new one. No NumPy here: the child imports
this module and scratch only.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import pickle
import subprocess
import sys
import threading
import time

import scratch

_SERVE = "from gui.truth_process import serve; serve()"
_lock = threading.Lock()  # one conversation with the child at a time
_child: _Child | None = None
_child_cpu = [0.0]  # CPU seconds the child spent on the answers read so far
MIN_PATIENCE_S = 0.2  # the least time result() waits for the child before computing here


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off meanwhile (restored after, unless it was off).

    The ground truth makes about a million floats and lists at 4096 tokens and no cycles; the
    collections their allocations set off cost about a quarter of its time."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def exact_rows(arguments: tuple, options: dict) -> tuple[list, list]:
    """scratch.attention_rows(*arguments, **options): (head outputs, weights) of the passed
    rows, nested lists (H, R, d_v) and (H, R, S)."""
    with _collector_paused():
        return scratch.attention_rows(*arguments, **options)


def serve() -> None:
    """The child's loop: read (arguments, options), answer ("ok", truth, cpu seconds) or
    ("error", exception), until stdin closes. Anything printed goes to stderr."""
    requests, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the answers
    while True:
        try:
            arguments, options = pickle.load(requests)
        except EOFError:
            return
        start = time.process_time()
        try:
            answer = ("ok", exact_rows(arguments, options), time.process_time() - start)
        except Exception as exc:  # noqa: BLE001 - sent back and raised in the window
            answer = ("error", exc)
        pickle.dump(answer, answers, pickle.HIGHEST_PROTOCOL)
        answers.flush()


class _Child:
    """The child process, and a thread reading its answers as they come."""

    def __init__(self) -> None:
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.sent = self.answered = 0
        self.alive = True
        self.answers: dict[int, tuple] = {}  # answers read but not yet taken, by number
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, name="truth-answers", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        """Read answers until the child ends (at most the two newest are kept)."""
        while True:
            try:
                answer = pickle.load(self.process.stdout)
            except _BROKEN:
                with self.changed:
                    self.alive = False
                    self.changed.notify_all()
                return
            with self.changed:
                self.answered += 1
                self.answers[self.answered] = answer
                self.answers.pop(self.answered - 2, None)  # an older one nobody took
                self.changed.notify_all()

    def send(self, request: tuple) -> int:
        """Send a request; returns its number."""
        pickle.dump(request, self.process.stdin, pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        self.sent += 1
        return self.sent

    def take(self, number: int, timeout: float) -> tuple | None:
        """The answer to request `number`; None when the child died, dropped it, or has not
        answered within `timeout` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: self.answered >= number or not self.alive, timeout)
            return self.answers.pop(number, None)

    def stop(self) -> None:
        """Close its stdin (it ends), wait for it (killed after 5 s) and for the reader."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join()
        with contextlib.suppress(OSError):
            self.process.stdout.close()


_BROKEN = (OSError, EOFError, pickle.UnpicklingError, ValueError)  # no child, or it died


def _drop(child: _Child | None) -> None:
    """Forget a child that failed; the next request starts a new one."""
    global _child
    with _lock:
        if child is None or _child is not child:
            return
        _child = None
    with contextlib.suppress(OSError):
        child.process.kill()
    child.stop()


class Pending:
    """The ground truth of one sampled check, being computed in the child (or here, later)."""

    def __init__(self, arguments: tuple, options: dict):
        global _child
        self.arguments, self.options = arguments, options
        self.child: _Child | None = None
        self.number = 0
        self.sent_at = time.perf_counter()
        for _ in range(2):  # a child that died since the last request is replaced once
            try:
                with _lock:
                    if _child is None:
                        _child = _Child()
                    self.child = _child
                    self.number = _child.send((arguments, options))
                break
            except _BROKEN:
                _drop(self.child)
                self.child = None
        self.in_second_process = self.child is not None

    def result(self) -> tuple[list, list]:
        """(head outputs, weights): the child's answer, or computed in this thread when the
        child could not start, died, or is slow (it runs at the lowest priority, so on a busy
        machine it may starve: it gets as long again as it has had, then this thread computes
        the rows itself). An error of the ground truth is raised here."""
        if self.child is not None:
            patience = max(MIN_PATIENCE_S, time.perf_counter() - self.sent_at)
            answer = self.child.take(self.number, patience)
            if answer is None and not self.child.alive:
                _drop(self.child)
            if answer is not None:
                if answer[0] == "error":
                    raise answer[1]
                _child_cpu[0] += answer[2]
                return answer[1]
            self.in_second_process = False
        return exact_rows(self.arguments, self.options)


@contextlib.contextmanager
def sharing_cores():
    """OpenBLAS (NumPy's) on one thread meanwhile, so the child keeps its core (see above)."""
    try:
        from scratch.backends.numpy_threads import single_threaded_blas
    except ImportError:  # no NumPy: nothing to hold
        yield
        return
    with single_threaded_blas():
        yield


def start(arguments: tuple, options: dict) -> Pending:
    """Send exact_rows(arguments, options) to the child; read it with .result()."""
    return Pending(arguments, options)


def child_cpu_seconds() -> float:
    """CPU seconds the child spent on the answers read so far."""
    return _child_cpu[0]


def child_pid() -> int | None:
    """The child's process id while it runs, else None (for tests and the bench)."""
    with _lock:
        return None if _child is None else _child.process.pid


def shutdown() -> None:
    """Stop the child and wait for it (the app at exit, tests at the end)."""
    global _child
    with _lock:
        child, _child = _child, None
    if child is not None:
        child.stop()


atexit.register(shutdown)  # the child ends with the window

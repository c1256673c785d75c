"""The sampled check's ground truth in a second process, computed while the backend attends.

The ground truth is plain Python and holds the GIL while it runs: in a thread of the window's
process it would take turns with the trace's NumPy calls (and the GUI thread), in the worker
thread after the trace it adds its whole time to the recompute. In a process of its own it runs
on another core while the backend computes the scores. Meanwhile OpenBLAS is held to one
thread (`sharing_cores`): a busy process beside a NumPy trace at 4096 tokens slowed it from
0.14 s to 0.20 s (OpenBLAS's two threads wait for each other when one core is taken), with one
BLAS thread it took 0.16 s either way. (At the lowest priority, nice 19, the child instead
starved: OpenBLAS's idle threads spin, and the trace waited up to 94 ms for its answer.)

One child process (`python -P -c "...serve()"`: unlike multiprocessing's spawn it never re-runs
the caller's main script) starts at first use and is kept; requests and answers are pickles on
its stdin and stdout. A new request while an older one is unanswered (a superseded recompute)
stops the child and starts a new one, so nobody waits for a ground truth nobody reads. When
the child cannot start, dies or is too slow, the rows are computed in the calling thread
instead and the next request starts a new child. At exit it is killed (its answer is wanted by
nobody then). No NumPy here: the child imports this module and scratch only.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import gc
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time

import scratch
from scratch import backends
from scratch.trace import variant_rows

_SERVE = "from gui.state.truth_process import serve; serve()"
_lock = threading.Lock()  # over _child (which child is current) and _child_cpu
_child: _Child | None = None
_child_cpu = [0.0]  # CPU seconds the child spent on the answers read so far
MIN_PATIENCE_S = 0.2  # the least time result() waits for the child before computing here
STARTUP_S = 2.0  # ... and for a child that has not answered yet (it starts and imports first)


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


def exact_rows(arguments: tuple, options: object) -> tuple[list, list] | dict:
    """scratch.attention_rows(*arguments) under `options` (Options): (head outputs, weights) of
    the passed rows, nested lists (H, R, d_v) and (H, R, S); or, for a variant (`options` a
    RowsCall), scratch.trace.variant_rows(*arguments, options): every step of the sampled rows."""
    o = options
    with _collector_paused():
        if isinstance(o, variant_rows.RowsCall):
            return variant_rows.variant_rows(*arguments, o)
        return scratch.attention_rows(
            *arguments, o.attn_mask, o.is_causal, o.scale, enable_gqa=o.enable_gqa,
            masked_rows=o.masked_rows,
        )  # fmt: skip


def serve() -> None:
    """The child's loop: read (arguments, options), answer ("ok", truth, cpu seconds) or
    ("error", exception), until stdin closes. Anything printed goes to stderr; Ctrl-C in the
    terminal is the window's to handle (the window stops this process itself)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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


_BROKEN = (OSError, EOFError, pickle.UnpicklingError, ValueError)  # no child, or it died


class _Child:
    """The child process, a thread writing its requests and one reading its answers.

    Writing never blocks the caller (a request is about 0.65 MB at 4096 tokens, the pipe holds
    64 KB: the write waits until the child reads it). Answers come in the order requests were
    written and go to their Pending."""

    def __init__(self) -> None:
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        # -P: the caller's current directory is not put first (a gui/ there would shadow ours)
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-c", _SERVE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()  # Pendings to write; None: stop
        self.written: collections.deque = collections.deque()  # written, not yet answered
        self.guard = threading.Lock()  # over `written` and `alive`
        self.alive = True  # False once its answers have ended (it died or was stopped)
        self.newest: Pending | None = None  # the last request sent (answers come in order)
        self.answered_once = False  # until then it may still be starting
        self.threads = [
            threading.Thread(target=self._write, name="truth-requests", daemon=True),
            threading.Thread(target=self._read, name="truth-answers", daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _write(self) -> None:
        """Write each Pending's request, in order, until told to stop or the child is gone."""
        while (pending := self.inbox.get()) is not None:
            with self.guard:
                alive = self.alive
                if alive:
                    self.written.append(pending)
            if not alive:  # its answers have ended: nothing written will be answered
                pending.deliver(None)
                continue
            try:
                pickle.dump(pending.request, self.process.stdin, pickle.HIGHEST_PROTOCOL)
                self.process.stdin.flush()
            except _BROKEN:  # the child is gone: this request gets no answer (nor later ones)
                with self.guard:
                    self.alive = False
                pending.deliver(None)
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def _read(self) -> None:
        """Hand each answer to the oldest written Pending; when the child ends, every Pending
        still waiting gets None (it computes its rows itself)."""
        while True:
            try:
                answer = pickle.load(self.process.stdout)
            except _BROKEN:
                answer = None
            with self.guard:
                pending = self.written.popleft() if self.written else None
                if answer is None:
                    orphans = [pending, *self.written] if pending else list(self.written)
                    self.written.clear()
                    self.alive = False
            if answer is not None:
                self.answered_once = True
                pending.deliver(answer)
                continue
            for waiting in orphans:  # (the writer answers later requests with None)
                waiting.deliver(None)
            return

    def send(self, pending: Pending) -> None:
        """Queue the request for the writer; until its Pending is done the child is busy."""
        self.newest = pending
        self.inbox.put(pending)

    def usable(self) -> bool:
        """Alive, with no request unanswered (an unanswered one is a superseded recompute's).
        Asked of the newest Pending, not the queues: a request the writer has taken from the
        inbox and not yet recorded as written is in neither."""
        idle = self.newest is None or self.newest.done.is_set()
        with self.guard:
            alive = self.alive
        return alive and idle and self.process.poll() is None

    def stop(self) -> None:
        """Kill it at once (nobody waits for its answers) and join both threads."""
        self.inbox.put(None)
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        for thread in self.threads:
            thread.join()
        with contextlib.suppress(OSError):
            self.process.stdout.close()


def _drop(child: _Child | None) -> None:
    """Stop a child that failed, is stuck or works on a request nobody wants; the next
    request starts a new one."""
    global _child
    with _lock:
        if child is None or _child is not child:
            return
        _child = None
    child.stop()


class Pending:
    """The ground truth of one sampled check, being computed in the child (or here, later)."""

    def __init__(self, arguments: tuple, options: scratch.Options):
        global _child
        self.request = (arguments, options)  # exact_rows' arguments
        self.answer: tuple | None = None
        self.done = threading.Event()
        self.sent_at = time.perf_counter()
        with _lock:
            stale = _child if _child is not None and not _child.usable() else None
        if stale is not None:  # dead, or busy with a request nobody will read (a superseded
            _drop(stale)  # recompute's): a new child starts at once, not after that job
        self.child: _Child | None = None
        try:
            with _lock:
                if _child is None:
                    _child = _Child()
                self.child = _child
                _child.send(self)
        except OSError:  # the child cannot start: computed here
            self.child = None
            self.done.set()
        self.in_second_process = self.child is not None

    def deliver(self, answer: tuple | None) -> None:
        """The child's answer (reader thread), or None when the child ended without one."""
        self.answer = answer
        self.done.set()

    def result(self) -> tuple[list, list] | dict:
        """exact_rows' answer: the child's, or computed in this thread when the
        child could not start, died, or is slow (on a busy machine: it gets as long again as it
        has had, then it is stopped and this thread computes the rows itself). An error of
        the ground truth is raised here."""
        patience = max(MIN_PATIENCE_S, time.perf_counter() - self.sent_at)
        if self.child is not None and not self.child.answered_once:
            patience = max(patience, STARTUP_S)  # a new child imports scratch first
        if self.child is not None:
            self.done.wait(patience)
        answer = self.answer
        if answer is None and self.child is not None:  # stuck, starved, dead or stopped: not
            _drop(self.child)  # waited for any longer; the next request starts a new one
        if answer is not None:
            if answer[0] == "error":
                raise answer[1]
            with _lock:
                _child_cpu[0] += answer[2]
            return answer[1]
        self.in_second_process = False
        return exact_rows(*self.request)


@contextlib.contextmanager
def sharing_cores():
    """OpenBLAS (NumPy's) on one thread meanwhile, so the child keeps its core (see above).
    torch's own threads are not held: beside the torch backend the child shares the cores."""
    with backends.single_threaded_blas():  # no NumPy: nothing to hold
        yield


def start(arguments: tuple, options: scratch.Options) -> Pending:
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
    """Kill the child and reap it (the app at exit, tests at the end)."""
    global _child
    with _lock:
        child, _child = _child, None
    if child is not None:
        child.stop()


atexit.register(shutdown)  # the child ends with the window

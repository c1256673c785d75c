"""Stop a pure-Python computation in a worker thread when it is cancelled, within milliseconds.

The ground truth (scratch) runs plain Python loops for minutes at 4096 tokens; before, Cancel
only dropped its result and the thread ran on, holding a core and gigabytes, until the end.
`stoppable(cancelled, Stop)` runs a block with a watcher beside it: every POLL_S the watcher
asks `cancelled()`, and once it is True it raises `Stop` in the computing thread
(`PyThreadState_SetAsyncExc`: the interpreter raises it at the thread's next bytecode, inside
scratch's loops, without scratch knowing). The exception unwinds the computation's frames, so
its lists are freed; the caller catches `Stop` as it catches any cancellation.

The exception is raised only while the block runs: leaving it (under the same lock the watcher
takes) clears one that was set but not yet raised. Use it around plain Python only: NumPy or
torch calls finish their C work before the exception fires, and code that starts processes or
holds locks must not be inside.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Iterator

POLL_S = 0.02  # how often the watcher asks whether the computation was cancelled
_armed = [0]  # blocks running now (tests and the bench read it)
_count_lock = threading.Lock()


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise `exc` in thread `thread_id` at its next bytecode (None clears a pending one)."""
    target = ctypes.py_object(exc) if exc is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target)


def armed() -> int:
    """How many stoppable blocks are running now."""
    with _count_lock:
        return _armed[0]


@contextlib.contextmanager
def stoppable(cancelled: Callable[[], bool], stop: type[BaseException]) -> Iterator[None]:
    """Run the block; raise `stop` inside it as soon as `cancelled()` is True."""
    thread_id = threading.get_ident()
    lock = threading.Lock()
    inside = [True]  # the block still runs (written under `lock`)
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            if cancelled():
                with lock:
                    if inside[0]:
                        _raise_in(thread_id, stop)
                return

    watcher = threading.Thread(target=watch, name="cancel-watcher", daemon=True)
    with _count_lock:
        _armed[0] += 1
    try:
        watcher.start()  # (no exception can be raised here before this)
        yield
    finally:
        while True:  # the watcher raises at most once: this loop runs at most twice
            try:
                with lock:
                    inside[0] = False
                    _raise_in(thread_id, None)  # set, not yet raised: cleared, never raised
                break
            except stop:  # raised on the way out: the block is being left anyway
                continue
        done.set()
        watcher.join()
        with _count_lock:
            _armed[0] -= 1


def return_memory() -> None:
    """Ask the C allocator to hand freed memory back to the system (glibc's malloc_trim; a no-op
    elsewhere): a cancelled ground truth's lists are freed by the unwinding, and this returns the
    pages they leave empty."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)

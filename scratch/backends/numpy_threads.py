"""Threads for the NumPy kernel: OpenBLAS's thread count, a pool, and sharing tasks over cores.

The chunked kernel runs one worker per core; OpenBLAS is held to one thread meanwhile (two BLAS
threads per worker would oversubscribe the cores, and idle OpenBLAS threads spin after a call).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from itertools import product

import numpy as np

_BLAS_LOCK = threading.RLock()  # re-entrant: a caller may hold it around the chunked kernel


def _openblas_function(name: str):
    """A function of the OpenBLAS that NumPy loaded (any of its symbol spellings), or None."""
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)  # the library NumPy already loaded: same handle
        except OSError:
            continue
        for prefix, suffix in product(("scipy_openblas_", "openblas_"), ("64_", "")):
            found = getattr(lib, f"{prefix}{name}{suffix}", None)
            if found is not None:
                return found
    return None


@functools.cache
def openblas_threads() -> tuple | None:
    """(get, set) for the thread count of the OpenBLAS that NumPy loaded, or None."""
    get, put = _openblas_function("get_num_threads"), _openblas_function("set_num_threads")
    return None if get is None or put is None else (get, put)


@functools.cache
def openblas_core() -> str | None:
    """The core type OpenBLAS chose its kernels for (e.g. SkylakeX, Haswell, Zen), or None."""
    get = _openblas_function("get_corename")
    if get is None:
        return None
    get.restype = ctypes.c_char_p
    return get().decode(errors="replace")


@contextlib.contextmanager
def single_threaded_blas():
    """OpenBLAS on one thread while our own workers (one per core) run; restored after.

    Two BLAS threads per worker would oversubscribe the cores, and idle OpenBLAS threads spin
    for a while after each call. Without a known OpenBLAS this yields False (no workers).
    """
    control = openblas_threads()
    if control is None:
        yield False
        return
    get, put = control
    with _BLAS_LOCK:
        before = get()
        put(1)
        try:
            yield True
        finally:
            put(before)


@functools.cache
def pool(workers: int) -> ThreadPoolExecutor:
    """One pool per worker count, kept for the life of the process (threads start once)."""
    return ThreadPoolExecutor(workers, thread_name_prefix="scratch-numpy")


def cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def share(tasks: list, workers: int, work) -> None:
    """Run work(task) for every task on `workers` threads, this one among them: each takes the
    next task when it is free (no thread waits idle while the others work)."""
    pending = iter(tasks)
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                task = next(pending, None)
            if task is None:
                return
            work(task)

    helpers = [pool(workers - 1).submit(drain) for _ in range(workers - 1)]
    try:
        drain()
    except BaseException:
        with lock:  # the helpers stop after their current task
            for _ in pending:
                pass
        raise
    finally:
        for future in helpers:
            future.result()  # waits for each helper (and raises what it raised)

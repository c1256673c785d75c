"""Peak memory growth of one call: tracemalloc, the RSS sampled from /proc, or CUDA's allocator."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from collections.abc import Callable

GIB = 2**30


def _rss_bytes() -> int | None:
    """Resident set size of this process from /proc (None where there is no /proc)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _peak_rss_growth(fn: Callable[[], object]) -> int | None:
    """Run fn while a thread samples the RSS every millisecond; peak minus the start."""
    start = _rss_bytes()
    if start is None:
        fn()
        return None
    peak = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes() or 0)
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], _rss_bytes() or 0) - start


def _peak_traced(fn: Callable[[], object]) -> int:
    """Peak bytes allocated during fn, as tracemalloc sees them (NumPy reports to it)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _peak_cuda(fn: Callable[[], object]) -> int:
    """Peak CUDA bytes allocated during fn, from torch's allocator statistics."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


_PROBES = {"tracemalloc": _peak_traced, "rss": _peak_rss_growth, "cuda": _peak_cuda}


def peak_growth(fn: Callable[[], object], method: str) -> int | None:
    """Call fn once; its peak memory growth by `method` (None for "n/a": fn is not called)."""
    return _PROBES[method](fn) if method in _PROBES else None


def format_bytes(n: int | None) -> str:
    """Bytes as KiB/MiB/GiB."""
    if n is None:
        return "n/a"
    for unit, size in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"

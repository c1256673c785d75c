"""Keep freed memory in the process: a training step's arrays are made and freed every step.

A step makes dozens of arrays of 1-3 MiB (the (B, H, T, T) weights and their gradients, the
logits) and frees them. glibc's malloc serves each from fresh pages (mmap, or a heap it trimmed
back when the last ones were freed), and every fresh 4 KiB page costs a page fault on first
touch: on this host (a VM) about 10 us each, 5 ms for one 2.2 MiB array, 40% of a step. With
the thresholds raised, freed arrays go back to malloc's heap and are reused, already touched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # arrays up to 32 MiB come from the heap (glibc's largest allowed)
TRIM_THRESHOLD = 256 << 20  # give memory back to the system only above 256 MiB free at the top


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc's malloc, once per process, to reuse freed memory instead of returning it to
    the system (False where the C library is not glibc: nothing changed)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # no C library by that name, or not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


__all__ = ["keep_freed_memory"]

"""The checker's own NumPy work on one OpenBLAS thread; the kernel checked keeps its threads.

The checker's products are small ((24, 4096) @ (4096, 64) for a 4096-token case). On this
project's 2-core machines under load, OpenBLAS's second thread waits for a core and spins:
measured there, that product took 45 ms of CPU on two threads and 0.33 ms on one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def own_work() -> Iterator[None]:
    """OpenBLAS held to one thread while the checker computes (without numpy: nothing to do)."""
    try:
        from scratch.backends.numpy_threads import single_threaded_blas
    except ImportError:  # no numpy: the checker's own work is plain Python
        yield
        return
    with single_threaded_blas():
        yield

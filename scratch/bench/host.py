"""What the benchmark ran on, and how busy the machine was: the host line and the load check."""

from __future__ import annotations

import os
import time

IDLE_CPUS = 0.3  # other processes using at most this many CPUs count as idle
LOAD_SAMPLE_S = 0.1  # one look at /proc/stat
LOAD_WAIT_S = 1.0  # the longest a pair waits for the machine to go idle


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def steal_seconds() -> float | None:
    """CPU seconds the hypervisor has taken from this virtual machine since boot (the steal
    column of /proc/stat), or None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        return float(fields[7]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def busy_cpus(seconds: float = LOAD_SAMPLE_S) -> float | None:
    """CPUs other processes kept busy over the next `seconds`: the machine's busy CPUs less
    this process's own (its sleeping thread uses none, but torch's OpenMP threads may still
    spin for a few ms after a call: they read as 0.1 CPUs of load that was the bench's own)."""
    before, own = _cpu_times(), time.process_time()
    time.sleep(seconds)
    after, own = _cpu_times(), time.process_time() - own
    if before is None or after is None or after[1] <= before[1]:
        return None
    everyone = (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)
    return max(0.0, everyone - own / seconds)


def wait_for_idle(limit_s: float = LOAD_WAIT_S) -> float | None:
    """Sample until other processes use <= IDLE_CPUS or `limit_s` passed; the last sample."""
    deadline = time.perf_counter() + limit_s
    load = busy_cpus()
    while load is not None and load > IDLE_CPUS and time.perf_counter() < deadline:
        load = busy_cpus()
    return load


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or platform's guess)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def numpy_simd() -> tuple[list[str], list[str]]:
    """(baseline, found) SIMD extensions of NumPy's dispatch, as np.show_runtime() lists them."""
    try:
        from numpy._core import _multiarray_umath as um
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as um
    found = [f for f in um.__cpu_dispatch__ if um.__cpu_features__.get(f)]
    return list(um.__cpu_baseline__), found


def has_avx512() -> bool:
    """True where NumPy found AVX-512 (X86_V4 / AVX512F) on this CPU."""
    _, found = numpy_simd()
    return any(f in found for f in ("X86_V4", "AVX512F", "AVX512_SKX"))


def _blas() -> str:
    """NumPy's BLAS: name and version from its build config, core type and threads at run time."""
    import numpy as np

    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 - older NumPy: no dicts mode
        name = "unknown BLAS"
    from scratch.backends import numpy_threads

    control = numpy_threads.openblas_threads()
    core = numpy_threads.openblas_core()
    threads = f", {control[0]()} threads" if control else ""
    return f"{name}" + (f" (core type {core}{threads})" if core else threads)


def _torch() -> str:
    """torch's version, CPU capability (its SIMD kernels) and thread count."""
    try:
        import torch
    except ImportError:
        return "no torch"
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        capability = "?"
    threads = torch.get_num_threads()
    return f"torch {torch.__version__} (CPU capability {capability}, {threads} threads)"


def host_line() -> str:
    """One sentence naming the host: CPU, cores, NumPy SIMD and BLAS, torch, NumPy's exp."""
    import numpy as np

    from scratch.backends import numpy_chunked

    baseline, found = numpy_simd()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"Host: {_cpu_model()}, {cores} cores; numpy {np.__version__} (SIMD baseline "
        f"{' '.join(baseline) or '-'}, found {' '.join(found) or '-'}; BLAS {_blas()}); "
        f"{_torch()}; numpy chunked kernel: {numpy_chunked.exp_choice()[1]}."
    )

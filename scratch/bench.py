"""Benchmark: every attention kernel here on the same inputs, one table from one run.

    python -m scratch.bench                 # L in 64, 256, 1024, 4096, 32768 (about 5 minutes)
    python -m scratch.bench --quick         # a few seconds: small sizes only
    python -m scratch.bench --sizes 256,4096 --repeats 5 --markdown

Rows: the ground truth (plain Python, fsum), the pure-Python kernel limit (just the two matrix
products q @ k^T and weights @ v as fsum dot products: the floor for any plain-Python
attention), NumPy explicit and chunked, NumPy's two matmuls alone (q @ k^T and scores @ v, no
softmax: roughly the ceiling for any NumPy kernel), torch explicit (the torch backend), the
torch backend's fast path and a bare `torch.nn.functional.scaled_dot_product_attention`.
E = 64, float32 (the plain-Python rows take the same float32 values as Python floats). Times are
medians; ratios are throughput relative to torch SDPA at the same L (2.0 = twice as fast).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from operator import mul

E = 64
SIZES = (64, 256, 1024, 4096, 32768)
QUICK_SIZES = (16, 64)
PYTHON_MAX_L = 256  # plain-Python rows: L = 256 takes about a second per run
EXPLICIT_MAX_L = 4096  # explicit kernels build (L, S) matrices: 4 GiB each at 32768
TIME_BUDGET_S = 1.5  # per row: repeat until about this much time is spent (at least 3 runs)
MAX_REPEATS = 30
WARM_UP_COUNTS_S = 2.0  # a first call slower than this is also a timed run
GIB = 2**30


@dataclass
class Row:
    """One measured kernel at one size."""

    L: int
    name: str
    seconds: float  # median
    runs: int
    peak_bytes: int | None  # peak memory growth during one call
    memory_method: str  # "tracemalloc", "rss", "cuda" or "n/a"
    ratio: float | None = None  # torch SDPA time / this time, same L

    @property
    def gflops(self) -> float:
        """4 L S E flops (two matrix products) per call, in GFLOP/s."""
        return 4 * self.L * self.L * E / self.seconds / 1e9


# ---------------------------------------------------------------- memory


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


def measure(
    fn: Callable[[], object], memory: str, repeats: int | None
) -> tuple[float, int, int | None]:
    """(median seconds, timed runs, peak memory growth of one call).

    The first call warms up (lazy imports, kernel selection, page faults) and is timed only when
    it takes over WARM_UP_COUNTS_S (warm-up effects are then small); a second, untimed call
    measures memory, so tracing never slows a timed run.
    """
    times: list[float] = []
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > WARM_UP_COUNTS_S:
        times.append(first)
    probe = {"tracemalloc": _peak_traced, "rss": _peak_rss_growth, "cuda": _peak_cuda}
    peak = probe[memory](fn) if memory in probe else None
    while True:
        if repeats is not None:
            if len(times) >= repeats:
                break
        elif len(times) >= 3 and (sum(times) >= TIME_BUDGET_S or len(times) >= MAX_REPEATS):
            break
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times), peak


# ---------------------------------------------------------------- contenders


def python_kernel_limit(q: list, k: list, v: list, weights: list) -> list:
    """Only the two matrix products, as fsum dot products: scores and weights @ v."""
    scores = [[math.fsum(map(mul, q_i, k_j)) for k_j in k] for q_i in q]  # (L, E) @ (E, S)
    v_t = list(zip(*v))  # (Ev, S): columns of v
    output = [[math.fsum(map(mul, w_i, v_c)) for v_c in v_t] for w_i in weights]  # (L, S) @ (S, Ev)
    return [scores, output]


FLOOR_ROW = "numpy matmuls alone (no softmax)"


def numpy_matmuls_alone(q, k, v) -> Callable[[], object]:
    """Just q @ k^T and scores @ v into preallocated buffers, no softmax: the BLAS work that
    every NumPy attention kernel does, so roughly the ceiling for their speed."""
    import numpy as np

    scores = np.empty((q.shape[0], k.shape[0]), dtype=q.dtype)  # (L, S)
    output = np.empty((q.shape[0], v.shape[1]), dtype=q.dtype)  # (L, Ev)

    def run() -> np.ndarray:
        np.matmul(q, k.T, out=scores)  # (L, E) @ (E, S) -> (L, S)
        return np.matmul(scores, v, out=output)  # (L, S) @ (S, Ev) -> (L, Ev)

    return run


def contenders(L: int, device: str) -> list[tuple[str, Callable[[], object], str]]:
    """(name, zero-argument call, memory method) for every kernel that runs at this L."""
    import numpy as np

    import scratch
    from scratch import backends

    rng = np.random.default_rng(L)
    # (batch 1, head 1, L, E): torch's fused CPU kernel wants 4-D input (2-D falls back to
    # its math kernel, about 4x slower at L = 4096); NumPy treats the leading 1s as a loop
    q, k, v = (rng.standard_normal((1, 1, L, E), dtype=np.float32) for _ in range(3))
    numpy_be = backends.get("numpy")
    rows: list[tuple[str, Callable[[], object], str]] = []
    if device == "cpu" and L <= PYTHON_MAX_L:
        lists = [a[0, 0].tolist() for a in (q, k, v)]  # the same float32 values, as floats
        # the ground truth's own weights, so the limit multiplies exactly the same matrices
        weights = scratch.scaled_dot_product_attention(*lists)[1]
        rows.append(
            (
                "ground truth (scratch)",
                lambda: scratch.scaled_dot_product_attention(*lists),
                "tracemalloc",
            )
        )
        rows.append(
            (
                "pure-Python kernel limit",
                lambda: python_kernel_limit(*lists, weights),
                "tracemalloc",
            )
        )
    if device == "cpu":
        if L <= EXPLICIT_MAX_L:
            rows.append(
                (
                    "numpy explicit",
                    lambda: numpy_be.scaled_dot_product_attention(q, k, v),
                    "tracemalloc",
                )
            )
        rows.append(
            (
                "numpy chunked",
                lambda: numpy_be.scaled_dot_product_attention(q, k, v, need_weights=False),
                "tracemalloc",
            )
        )
        if L <= EXPLICIT_MAX_L:
            rows.append((FLOOR_ROW, numpy_matmuls_alone(q[0, 0], k[0, 0], v[0, 0]), "n/a"))
    try:
        import torch
    except ImportError:
        return rows
    name = f"torch-{device}"
    if name not in backends.available():
        return rows
    tq, tk, tv = (torch.from_numpy(a).to(device) for a in (q, k, v))
    memory = "cuda" if device == "cuda" else "rss"

    def synced(fn: Callable[[], object]) -> Callable[[], object]:
        if device != "cuda":
            return fn
        return lambda: (fn(), torch.cuda.synchronize())

    torch_be = backends.get(name)
    if L <= EXPLICIT_MAX_L:
        rows.append(
            (
                f"torch explicit ({device})",
                synced(lambda: torch_be.scaled_dot_product_attention(tq, tk, tv)),
                memory,
            )
        )
    rows.append(
        (
            f"torch backend fast ({device})",
            synced(lambda: torch_be.scaled_dot_product_attention(tq, tk, tv, need_weights=False)),
            memory,
        )
    )
    rows.append(
        (
            f"torch SDPA ({device})",
            synced(lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)),
            memory,
        )
    )
    if L <= EXPLICIT_MAX_L:  # for reference: (L, E) input takes torch's unfused math kernel
        tq2, tk2, tv2 = (t[0, 0] for t in (tq, tk, tv))
        rows.append(
            (
                f"torch SDPA, 2-D input ({device})",
                synced(lambda: torch.nn.functional.scaled_dot_product_attention(tq2, tk2, tv2)),
                memory,
            )
        )
    return rows


PYTHON_PAIR = ("ground truth (scratch)", "pure-Python kernel limit")
PAIR_RUNS = 7  # interleaved runs of each plain-Python row (their ratio is a goal)


def alternating_groups(device: str) -> tuple[tuple[str, ...], ...]:
    """Rows whose ratio is a goal and that share one library: timed alternately, not in turn."""
    return (PYTHON_PAIR, (f"torch backend fast ({device})", f"torch SDPA ({device})"))


def measure_alternating(
    L: int, rivals: list[tuple[str, Callable[[], object], str]], runs: int | None
) -> list[Row]:
    """Time the rivals one call each in turn, so load drifts hit them alike.

    Only for rows of one library: OpenBLAS and OpenMP threads spin after a call and would
    slow the other library's next call. After a warm-up call each and one untimed call that
    measures memory, `runs` rounds; with runs None, rounds until every row has spent about
    TIME_BUDGET_S (at least 3 rounds, at most MAX_REPEATS).
    """
    probe = {"tracemalloc": _peak_traced, "rss": _peak_rss_growth, "cuda": _peak_cuda}
    peaks = []
    for _, fn, memory in rivals:
        fn()  # warm up
        peaks.append(probe[memory](fn) if memory in probe else None)
    times: list[list[float]] = [[] for _ in rivals]
    while True:
        done = len(times[0])
        if runs is not None:
            if done >= runs:
                break
        elif done >= 3 and (min(map(sum, times)) >= TIME_BUDGET_S or done >= MAX_REPEATS):
            break
        for (_, fn, _), bucket in zip(rivals, times):
            t0 = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - t0)
    return [
        Row(L, name, statistics.median(bucket), len(bucket), peak, memory)
        for (name, _, memory), bucket, peak in zip(rivals, times, peaks)
    ]


def run_table(
    sizes: tuple[int, ...], repeats: int | None = None, device: str = "cpu", progress: bool = True
) -> list[Row]:
    """Measure every contender at every size; ratios are to torch SDPA at the same L."""
    rows: list[Row] = []
    devices = ("cpu", "cuda") if device == "cuda" else ("cpu",)

    def say(L: int, what: str) -> None:
        if progress:
            print(f"\r[bench] L={L:<6} {what:<32}", end="", file=sys.stderr, flush=True)

    for L in sizes:
        here: list[Row] = []
        for dev in devices:
            rivals = contenders(L, dev)
            names = [name for name, _, _ in rivals]
            groups = [g for g in alternating_groups(dev) if set(g) <= set(names)]
            for name, fn, memory in rivals:
                group = next((g for g in groups if name in g), None)
                if group is None:
                    say(L, name)
                    seconds, runs, peak = measure(fn, memory, repeats)
                    here.append(Row(L, name, seconds, runs, peak, memory))
                elif name == group[0]:  # the whole group at its first member
                    say(L, f"{len(group)} rows, alternately")
                    members = [r for r in rivals if r[0] in group]
                    fixed = PAIR_RUNS if group == PYTHON_PAIR else None
                    here.extend(measure_alternating(L, members, repeats or fixed))
        sdpa = {r.name: r.seconds for r in here if r.name.startswith("torch SDPA (")}
        for r in here:
            ref = sdpa.get("torch SDPA (cuda)" if "(cuda)" in r.name else "torch SDPA (cpu)")
            r.ratio = ref / r.seconds if ref else None
        rows.extend(here)
    if progress:
        print("\r" + " " * 50 + "\r", end="", file=sys.stderr, flush=True)
    return rows


# ---------------------------------------------------------------- goals and output


def _find(rows: list[Row], L: int, name: str) -> Row | None:
    """The row called `name` at size L, if it was measured."""
    return next((r for r in rows if r.L == L and r.name == name), None)


def goals(rows: list[Row]) -> list[tuple[str, str, str]]:
    """(goal, PASS/FAIL/not measured, the measured numbers) for each goal of the project."""
    out = []
    gt, limit = (
        _find(rows, 256, "ground truth (scratch)"),
        _find(rows, 256, "pure-Python kernel limit"),
    )
    if gt and limit:
        r = limit.seconds / gt.seconds
        out.append(
            (
                "ground truth >= 0.9x the pure-Python kernel limit at L = 256",
                "PASS" if r >= 0.9 else "FAIL",
                f"{r:.2f}x",
            )
        )
    else:
        out.append(
            (
                "ground truth >= 0.9x the pure-Python kernel limit at L = 256",
                "not measured",
                "needs L = 256",
            )
        )
    chunked = _find(rows, 4096, "numpy chunked")
    if chunked and chunked.ratio:
        out.append(
            (
                "numpy output-only >= 1.0x torch SDPA at L = 4096",
                "PASS" if chunked.ratio >= 1.0 else "FAIL",
                f"{chunked.ratio:.2f}x",
            )
        )
    else:
        out.append(
            (
                "numpy output-only >= 1.0x torch SDPA at L = 4096",
                "not measured",
                "needs L = 4096 and torch",
            )
        )
    floor = _find(rows, 4096, FLOOR_ROW)
    if floor and floor.ratio:
        out.append(
            (
                "(reference, no goal) NumPy's two matmuls alone, no softmax, vs torch SDPA at "
                "L = 4096: roughly the ceiling for any NumPy kernel; below 1.0x the goal above "
                "is out of reach on this machine",
                "info",
                f"{floor.ratio:.2f}x",
            )
        )
    plain = _find(rows, 4096, "torch SDPA, 2-D input (cpu)")
    if chunked and plain:
        r = plain.seconds / chunked.seconds
        out.append(
            (
                "(reference, no goal) numpy output-only vs torch SDPA on 2-D (L, E) input "
                "at L = 4096",
                "info",
                f"{r:.2f}x",
            )
        )
    fast, sdpa = (
        _find(rows, 4096, "torch backend fast (cpu)"),
        _find(rows, 4096, "torch SDPA (cpu)"),
    )
    if fast and sdpa:
        r = fast.seconds / sdpa.seconds
        out.append(
            (
                "torch fast path within 1.05x of bare SDPA at L = 4096",
                "PASS" if r <= 1.05 else "FAIL",
                f"{r:.3f}x the time",
            )
        )
    else:
        out.append(
            (
                "torch fast path within 1.05x of bare SDPA at L = 4096",
                "not measured",
                "needs L = 4096 and torch",
            )
        )
    big = _find(rows, 32768, "numpy chunked")
    if big and big.peak_bytes is not None:
        out.append(
            (
                "numpy at L = 32768: peak memory growth < 1 GiB",
                "PASS" if big.peak_bytes < GIB else "FAIL",
                _mem(big.peak_bytes),
            )
        )
    else:
        out.append(
            ("numpy at L = 32768: peak memory growth < 1 GiB", "not measured", "needs L = 32768")
        )
    return out


def _mem(n: int | None) -> str:
    """Bytes as KiB/MiB/GiB."""
    if n is None:
        return "n/a"
    for unit, size in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _time(s: float) -> str:
    """Seconds with a readable unit."""
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def format_table(rows: list[Row], markdown: bool = False, repeats: int | None = None) -> str:
    """The table, the goals and a footer saying how things were measured."""
    head = ("L", "kernel", "median", "runs", "GFLOP/s", "x SDPA", "peak mem")
    body = [
        (
            str(r.L),
            r.name,
            _time(r.seconds),
            str(r.runs),
            f"{r.gflops:.2f}",
            "-" if r.ratio is None else f"{r.ratio:.3g}",
            _mem(r.peak_bytes) + ("" if r.memory_method == "n/a" else f" ({r.memory_method})"),
        )
        for r in rows
    ]
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join("---:" if i != 1 else "---" for i in range(len(head))) + "|")
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
    else:
        widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]
        fmt = lambda cells: "  ".join(  # noqa: E731
            c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )
        lines += [fmt(head), fmt(["-" * w for w in widths]), *map(fmt, body)]
    lines.append("")
    found = goals(rows)
    if all(status == "not measured" for _, status, _ in found):
        lines.append(
            "No goal was measured: each needs its own size (L = 256, 4096 and 32768); "
            "run `python -m scratch.bench` without --quick or --sizes for the goals."
        )
    else:
        for goal, status, detail in found:
            lines.append(f"{'- ' if markdown else ''}{status}: {goal} ({detail})")
    lines.append("")
    lines.append(footer(markdown, repeats))
    return "\n".join(lines)


def footer(markdown: bool = False, repeats: int | None = None) -> str:
    """How the numbers were taken; `repeats` is the fixed number of timed runs, if one was set."""
    import numpy as np

    threads = "?"
    try:
        import torch

        threads = str(torch.get_num_threads())
        versions = f"numpy {np.__version__}, torch {torch.__version__}"
    except ImportError:
        versions = f"numpy {np.__version__}, no torch"
    if repeats is None:
        runs_text = (
            f"Median of the timed runs (at least 3, more until about {TIME_BUDGET_S} s per row);"
        )
        pair_runs = PAIR_RUNS
    else:
        runs_text = f"Median of {repeats} timed runs per row (fixed by --repeats or --quick);"
        pair_runs = repeats
    text = (
        f"E = {E}, S = L, float32, inputs of shape (1, 1, L, E) (torch's fused CPU kernel "
        f"needs 4-D input) from a seeded generator, shared by every row (plain Python takes "
        f"the (L, E) matrices as nested lists). "
        f"{runs_text} "
        f"before them one warm-up call (timed too when it takes over {WARM_UP_COUNTS_S:g} s) "
        f"and one untimed call that measures memory. Two pairs whose ratio is a goal are timed "
        f"alternately, so load drifts hit both alike: the plain-Python rows ({pair_runs} "
        f"runs each) and the torch backend's fast path with bare SDPA. The other rows run one "
        f"after another, never interleaved across libraries, because OpenBLAS and OpenMP "
        f"worker threads spin for a while after each call and would take the cores from the "
        f"next library's call. "
        f"GFLOP/s counts 4*L*S*E flops. x SDPA = torch SDPA time / row time at the same L. "
        f"Peak memory growth: tracemalloc for NumPy and plain Python (NumPy reports its "
        f"allocations to tracemalloc), RSS sampled every 1 ms from /proc for torch (its "
        f"allocator is invisible to tracemalloc; cached memory is not counted again), the CUDA "
        f"allocator's peak for cuda rows; n/a for the matmuls-alone row, whose buffers are "
        f"allocated beforehand. {os.cpu_count()} CPUs, torch threads {threads}, "
        f"{versions}. Plain Python runs only up to L = {PYTHON_MAX_L}, explicit kernels up to "
        f"L = {EXPLICIT_MAX_L}. {_load()}"
    )
    return ("_" + text + "_") if markdown else text


def _load() -> str:
    """The 1-minute load average: other processes on the machine skew every row."""
    try:
        return f"Load average at the end: {os.getloadavg()[0]:.2f}."
    except OSError:
        return ""


MODEL_TEXT = "The quick brown fox jumps over the lazy dog while the old cat watches"  # 16 tokens
MODEL_GOAL_S = 2.0


def model_timing(runs: int = 3) -> str:
    """Goal line: loading the default model from disk plus one 16-token run, best of `runs`."""
    try:
        from scratch import models
        from scratch.models.model import _load
    except ImportError as exc:
        return f"not measured: real-model load + one 16-token run < {MODEL_GOAL_S:g} s ({exc})"
    best, tokens = math.inf, 0
    for _ in range(runs):
        _load.cache_clear()  # a cold load every time: read, hash-check and convert the weights
        t0 = time.perf_counter()
        try:
            run = models.load().run(MODEL_TEXT)
        except models.ModelError as exc:
            return f"not measured: real-model load + one run < {MODEL_GOAL_S:g} s ({exc})"
        best, tokens = min(best, time.perf_counter() - t0), len(run.tokens)
    status = "PASS" if best < MODEL_GOAL_S else "FAIL"
    return (
        f"{status}: all-MiniLM-L6-v2 load (SHA-256 check included) + one {tokens}-token run "
        f"< {MODEL_GOAL_S:g} s ({best:.2f} s, best of {runs} cold loads)"
    )


def main(argv: list[str] | None = None) -> int:
    """Parse options, run the table, print it."""
    parser = argparse.ArgumentParser(
        prog="python -m scratch.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sizes", help="comma-separated L values (default 64,...,32768)")
    parser.add_argument("--repeats", type=int, help="timed runs per row (default: adaptive, >= 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke test)")
    parser.add_argument("--markdown", action="store_true", help="print a README-ready table")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda adds torch rows on the GPU (when CUDA is present)",
    )
    args = parser.parse_args(argv)
    if args.sizes:
        try:
            sizes = tuple(int(s) for s in args.sizes.split(",") if s.strip())
        except ValueError:
            parser.error(f"--sizes: expected comma-separated integers, found {args.sizes!r}")
        if not sizes or min(sizes) < 1:
            parser.error(f"--sizes: expected positive integers, found {args.sizes!r}")
    else:
        sizes = QUICK_SIZES if args.quick else SIZES
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats: expected a positive integer, found {args.repeats}")
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else None)
    device = args.device
    if device == "cuda":
        from scratch import backends

        if "torch-cuda" not in backends.available():
            print(
                "[bench] --device cuda: no CUDA device here; measuring the CPU only",
                file=sys.stderr,
            )
            device = "cpu"
    rows = run_table(sizes, repeats, device)
    print(format_table(rows, args.markdown, repeats))
    print(("- " if args.markdown else "") + model_timing(1 if args.quick else 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

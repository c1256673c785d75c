"""The table's text: rows, goal lines and a footer saying how and where it was measured."""

from __future__ import annotations

import os

from scratch.bench import host
from scratch.bench.contenders import EXPLICIT_MAX_L, NOISE_L, PYTHON_MAX_L, E
from scratch.bench.goals import goals
from scratch.bench.groups import GOAL_BUDGET_S, GOAL_MAX_ROUNDS, GOAL_MIN_ROUNDS, PAIR_RUNS
from scratch.bench.memory import format_bytes
from scratch.bench.row import Row
from scratch.bench.timing import SETTLE_S, TIME_BUDGET_S, WARM_UP_COUNTS_S


def _time(s: float) -> str:
    """Seconds with a readable unit."""
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def format_table(
    rows: list[Row], markdown: bool = False, repeats: int | None = None, waited: bool = True
) -> str:
    """The table, the goals and a footer saying how things were measured. With `repeats` (a
    fixed run count: --repeats or --quick) the goals' numbers are shown but not judged: a few
    rounds are no full balanced cycle; `waited`: whether rounds waited for an idle host."""
    head = ("L", "kernel", "median", "best", "runs", "GFLOP/s", "x SDPA", "load", "peak mem")
    body = [
        (
            str(r.L),
            r.name,
            _time(r.seconds),
            _time(r.best),
            str(r.runs),
            f"{r.gflops:.2f}",
            "-" if r.ratio is None else f"{r.ratio:.3g}",
            "-" if r.load is None else f"{r.load:.1f}",
            format_bytes(r.peak_bytes)
            + ("" if r.memory_method == "n/a" else f" ({r.memory_method})"),
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
            "No goal was measured: each needs its own size (L = 256, 4096, 16384 and 32768); "
            "run `python -m scratch.bench` without --quick or --sizes for the goals."
        )
    else:
        for goal, status, detail in found:
            if repeats is not None and status in ("PASS", "FAIL"):
                status = f"not judged ({repeats} fixed runs per row)"
            lines.append(f"{'- ' if markdown else ''}{status}: {goal} ({detail})")
    lines.append("")
    lines.append(footer(markdown, repeats, waited))
    return "\n".join(lines)


def footer(markdown: bool = False, repeats: int | None = None, waited: bool = True) -> str:
    """How the numbers were taken and on what host; `repeats` is the fixed run count, if set;
    `waited`: whether each round waited for other processes to go idle (not with --quick)."""
    if repeats is None:
        runs_text = (
            f"Rows outside a goal: at least 3 timed runs, more until about {TIME_BUDGET_S} s per "
            f"row, after one warm-up call (timed too when it takes over {WARM_UP_COUNTS_S:g} s) "
            f"and one untimed call that measures memory. Rows whose ratio is a goal are timed "
            f"interleaved in groups (the plain-Python pairs, forward and backward, at L = 256, "
            f"{PAIR_RUNS} rounds each; numpy "
            f"chunked, torch's fast path, SDPA and the numpy call again as a noise-floor row at "
            f"L = {NOISE_L} and numpy with SDPA at L = 16384, at least {GOAL_MIN_ROUNDS} rounds, "
            f"more until about {GOAL_BUDGET_S:g} s per row, at most {GOAL_MAX_ROUNDS})"
        )
    else:
        runs_text = (
            f"{repeats} timed runs per row (fixed by --repeats or --quick); rows whose ratio is a "
            f"goal timed interleaved in groups"
        )
    text = (
        f"E = {E}, S = L, float32, inputs of shape (1, 1, L, E) (torch's fused CPU kernel "
        f"needs 4-D input) from a seeded generator, shared by every row (plain Python takes "
        f"the (L, E) matrices as nested lists). {runs_text}: one call of each row per round, "
        f"in balanced orders (each row first after the pause, and right after each other row, "
        f"equally often: warm and cold calls alike) so load drifts hit all alike, and every call "
        f"in a group {SETTLE_S * 1000:g} ms after the one before (torch's OpenMP threads spin "
        f"for a few ms after a call: NumPy's kernel right after SDPA took 33.5 ms, 10 ms later "
        f"27.5 ms). "
        + (
            f"Before each round (and before each other row) the bench waits up to "
            f"{host.LOAD_WAIT_S:g} s for other processes to use <= {host.IDLE_CPUS:g} CPUs "
            f"(sampled from /proc/stat every {host.LOAD_SAMPLE_S:g} s)"
            if waited
            else "No round waited for an idle host (--quick)"
        )
        + "; 'load' is what other processes used just before (median over rounds). "
        "A goal compares the rows' 10th percentile times (linear between order statistics: "
        "the least disturbed runs, not the one luckiest), with best vs best and the median of "
        "the per-round ratios beside it (the plain-Python pairs are judged by that median: one "
        "thread of plain Python each, load slows both alike); the noise-floor line is the same "
        "comparison of the numpy call with itself. median and best are over the timed runs; "
        "GFLOP/s (4*L*S*E flops, the forward's two products, also on the backward rows) and "
        "x SDPA (torch SDPA's best time / the row's best time at the same L) use the best run. "
        f"The matmuls-alone row (q @ k^T into a full (L, S) buffer, then @ v, OpenBLAS's own "
        f"threads, no softmax) is a reference, not a ceiling: the tiled kernel's products on "
        f"one worker per core run faster. Peak memory growth: tracemalloc for NumPy and plain "
        f"Python, RSS sampled every 1 ms from /proc for torch, the CUDA allocator's peak for "
        f"cuda rows, during a call after the warm-up (buffers a kernel keeps between calls, "
        f"such as numpy chunked's few MiB per thread, are made by the warm-up and not counted); "
        f"n/a for the matmuls-alone and noise-floor rows. Plain Python runs only up to "
        f"L = {PYTHON_MAX_L}, explicit kernels up to L = {EXPLICIT_MAX_L}. "
        f"{host.host_line()} {load_average()}"
    )
    return ("_" + text + "_") if markdown else text


def load_average() -> str:
    """The 1-minute load average: other processes on the machine skew every row."""
    try:
        return f"Load average at the end: {os.getloadavg()[0]:.2f}."
    except OSError:
        return ""

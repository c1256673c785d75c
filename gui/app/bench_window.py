"""The window's recompute at 4096 tokens, a bench plugin: time and event-loop gaps.

`python -m scratch.bench --plugin gui.app.bench_window` (what `make bench` runs) reads BENCH_GOALS
below; scratch never imports the app.

A recompute is what the app does after an edit: TraceWorker runs controller.run (the backend's
trace and the check against the ground truth: a seeded sample of rows at this size, its ground
truth computed in a second process while the backend attends) in a worker thread while the GUI
thread keeps its event loop. The backend's trace alone is timed the same way in the same rounds
(a job on the worker's thread pool, Python's collector paused as TraceWorker pauses it, the
event loop running), the order rotated every round, so the ratio measures what the check adds
and nothing else. A QTimer ticking every TICK_MS records the largest gap between its ticks
while a recompute runs (offscreen, no window), also for a few recomputes under each causal mask
and a custom one (their paths differ: a may-attend grid, a mask array, a grid of tuples
converted row by row). Before each round the machine is given up to host.LOAD_WAIT_S to
go idle, and the load is kept.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable

from gui.views import bench_views
from scratch.bench import host, plugins
from scratch.bench.row import low_quantile
from scratch.variants import causal_cells

WHAT = "the window's recompute at 4096 tokens"  # the goals' name in the bench's output
TICK_MS = 5
WINDOW_TOKENS = 4096
RECOMPUTE_GOAL = 1.5  # recompute (trace + check) <= this x the backend's trace alone
GAP_GOAL_S = 0.100  # the event loop is never blocked longer than this
MIN_ROUNDS = 10  # at least this many rounds ...
BUDGET_S = 8.0  # ... and more until the recomputes have taken about this long
MAX_ROUNDS = 30
MASKS = ("causal-top-left", "causal-bottom-right", "drawn")  # the gap goal also covers ...
MASKED_RECOMPUTES = 2  # ... this many recomputes each, after a warm-up (their own paths:
# a may-attend grid of 16.7 M cells, a mask the backend converts)
_app = None  # the QApplication measure() made or found


def _session(tokens: int):
    """A random projected session of `tokens` tokens on the NumPy backend in float32."""
    from gui.state.session import random_session

    s = random_session(0, num_tokens=tokens)
    return dataclasses.replace(s, backend="numpy", dtype="float32")


def _trace_alone_job(pool, session, call: tuple):
    """(a function that starts the backend's trace alone on `pool`, the worker whose signals
    report it): a gui.work.jobs job like the recompute's, Python's collector paused while it
    runs."""
    from gui.work.jobs import Worker
    from scratch import backends

    alone = Worker(said=(Exception,))  # any failure is reported to the waiting loop
    alone.pool = pool
    trace = lambda report, stop: backends.get(session.backend).trace_example(  # noqa: E731
        *call, dtype=session.dtype
    )
    return (lambda: alone.start(trace)), alone


def _cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of the check's second process."""
    from gui.state import truth_process

    return time.process_time() + truth_process.child_cpu_seconds()


def _timed_with_steal(job) -> tuple[float, float, float, float | None]:
    """_timed(*job) and the CPU seconds the hypervisor took from this machine meanwhile."""
    before = host.steal_seconds()
    seconds, cpu, gap = _timed(*job)
    after = host.steal_seconds()
    return seconds, cpu, gap, None if before is None or after is None else after - before


def _timed(start: Callable[[], object], signals) -> tuple[float, float, float]:
    """(seconds from start() to `signals.finished`, CPU seconds meanwhile (every thread: the
    job's, BLAS's, the timer's, and the check's second process), the largest event-loop gap
    meanwhile)."""
    from PyQt6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    done: list[object] = []
    last, gap = [time.perf_counter()], [0.0]

    def tick() -> None:
        now = time.perf_counter()
        gap[0] = max(gap[0], now - last[0])
        last[0] = now

    def finish(result: object) -> None:
        done.append(result)
        loop.quit()

    def fail(message: str) -> None:
        done.append(RuntimeError(message))
        loop.quit()

    timer = QTimer()
    timer.setInterval(TICK_MS)
    timer.timeout.connect(tick)
    signals.finished.connect(finish)
    signals.failed.connect(fail)
    timer.start()
    cpu0 = _cpu_seconds()
    t0 = last[0] = time.perf_counter()
    start()
    loop.exec()
    seconds = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    tick()  # the gap up to the end
    timer.stop()
    # both handlers go: one left connected would keep `done`, and with it the result's
    # 0.5 GiB of arrays, alive for the life of the worker (a round's worth per round)
    signals.finished.disconnect(finish)
    signals.failed.disconnect(fail)
    if isinstance(done[0], Exception):
        raise done[0]
    return seconds, cpu, gap[0]


def measure(
    rounds: int | None = None,
    tokens: int = WINDOW_TOKENS,
    load_wait_s: float | None = None,
) -> dict:
    """Every time of trace alone and recompute (same rounds), gaps, loads, the sample note.

    rounds None: at least MIN_ROUNDS, more until the recomputes took about BUDGET_S (at most
    MAX_ROUNDS). load_wait_s None: host.LOAD_WAIT_S; 0 skips the load check."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PyQt6.QtWidgets import QApplication

    from gui.state import controller, sampled_check, truth_process
    from gui.work.collector import own_collection
    from gui.work.worker import TraceWorker

    global _app  # kept alive: a second measure() in this process reuses it (Qt's objects too)
    _app = QApplication.instance() or QApplication([])
    own_collection(_app)  # the app's rule: collection only in the GUI thread, between events
    wait_s = host.LOAD_WAIT_S if load_wait_s is None else load_wait_s
    worker = TraceWorker()
    session = _session(tokens)
    call = controller.example_and_options(session)  # (Example, Options)
    trace_alone = _trace_alone_job(worker.pool, session, call)
    recompute = (lambda: worker.submit(session)), worker
    times: dict[str, list[float]] = {"trace": [], "recompute": []}
    cpu: dict[str, list[float]] = {"trace": [], "recompute": []}
    gaps: list[float] = []
    steals: list[float | None] = []  # hypervisor steal during each gap's recompute
    loads: list[float] = []
    for job in (trace_alone, recompute):  # warm-up (imports, first allocations)
        _timed(*job)
    try:
        while True:
            done = len(times["trace"])
            if rounds is not None:
                if done >= rounds:
                    break
            elif done >= MIN_ROUNDS and (sum(times["recompute"]) >= BUDGET_S or done >= MAX_ROUNDS):
                break
            if wait_s > 0:
                load = host.wait_for_idle(wait_s)
                if load is not None:
                    loads.append(load)
            for what in ("trace", "recompute") if done % 2 == 0 else ("recompute", "trace"):
                job = trace_alone if what == "trace" else recompute
                seconds, cpu_s, gap, stolen = _timed_with_steal(job)
                times[what].append(seconds)
                cpu[what].append(cpu_s)
                if what == "recompute":
                    gaps.append(gap)
                    steals.append(stolen)
        masked_gaps, masked_steals = _masked_gaps(worker, tokens, wait_s)
    finally:
        worker.pool.waitForDone()
        truth_process.shutdown()
    return {
        "tokens": tokens,
        "trace": times["trace"],
        "recompute": times["recompute"],
        "cpu_trace": cpu["trace"],
        "cpu_recompute": cpu["recompute"],
        "gaps": gaps,
        "masked_gaps": masked_gaps,
        "steals": steals + masked_steals,  # one per gap, unmasked then masked
        "load": statistics.median(loads) if loads else None,
        "sampled": sampled_check.describe(tokens) if sampled_check.wanted("numpy", tokens) else "",
    }


def _masked_gaps(worker, tokens: int, wait_s: float) -> tuple[list, list]:
    """The largest event-loop gap of each recompute of the session under each of MASKS, and
    the hypervisor's steal during each."""
    from gui.state.variant_session import with_mask_mode

    gaps, steals = [], []
    for mask in MASKS:
        base = _session(tokens)
        if mask == "drawn":  # the causal grid, as a user's edit leaves it: tuples
            rows = causal_cells(tokens, tokens, "top-left")
            variant = dataclasses.replace(base.variant, mask="drawn", drawn=tuple(map(tuple, rows)))
        else:
            variant = with_mask_mode(base.variant, mask)
        session = dataclasses.replace(base, variant=variant)
        job = (lambda s=session: worker.submit(s)), worker
        _timed(*job)  # warm-up
        for _ in range(MASKED_RECOMPUTES):
            if wait_s > 0:
                host.wait_for_idle(wait_s)
            _, _, gap, stolen = _timed_with_steal(job)
            gaps.append(gap)
            steals.append(stolen)
    return gaps, steals


def goal_lines(result: dict) -> list[tuple[str, str, str]]:
    """(goal, PASS/FAIL, numbers) for the recompute time and the largest event-loop gap.

    Judged at the 10th percentile times (as the bench's other ratio goals: the least disturbed
    runs, not the one luckiest), with best vs best and the median of the per-round ratios and
    their range beside it."""
    return [_recompute_line(result), _gap_line(result)]


def _recompute_line(result: dict) -> tuple[str, str, str]:
    """The recompute goal's (goal, verdict, numbers)."""
    trace, recompute = (low_quantile(result[k]) for k in ("trace", "recompute"))
    ratio = recompute / trace
    best = min(result["recompute"]) / min(result["trace"])
    per_round = [r / t for r, t in zip(result["recompute"], result["trace"])]
    cpu_ratios = [r / t for r, t in zip(result["cpu_recompute"], result["cpu_trace"])]
    load = result.get("load")
    load_text = "" if load is None else f"; other processes used {load:.1f} CPUs"
    second_process = (
        "; the sampled rows' ground truth computed in a second process while the backend "
        "attends (the CPU time it spent computing counted above, not its pickling)"
    )
    return (
        f"window recompute at {result['tokens']} tokens (numpy float32 trace + check) <= "
        f"{RECOMPUTE_GOAL:g}x the backend's trace alone",
        "PASS" if ratio <= RECOMPUTE_GOAL else "FAIL",
        f"{ratio:.2f}x at the 10th percentiles ({recompute:.3f} s vs {trace:.3f} s; best vs "
        f"best {best:.2f}x); median of "
        f"{len(per_round)} interleaved rounds {statistics.median(per_round):.2f}x (range "
        f"{min(per_round):.2f}-{max(per_round):.2f}x){load_text}; process CPU time per "
        f"round {statistics.median(cpu_ratios):.2f}x (median; range {min(cpu_ratios):.2f}-"
        f"{max(cpu_ratios):.2f}x); both timed as jobs on the "
        f"worker's thread with the event loop running; check: "
        f"{result['sampled'] or 'full ground truth'}{second_process if result['sampled'] else ''}",
    )


def _gap_line(result: dict) -> tuple[str, str, str]:
    """The event-loop goal's (goal, verdict, numbers)."""
    masked_gaps = result.get("masked_gaps", [])
    gaps = result["gaps"] + masked_gaps
    masked = f"{max(masked_gaps) * 1000:.0f} ms" if masked_gaps else "not measured"
    return (
        f"event loop never blocked > {GAP_GOAL_S * 1000:.0f} ms during the recompute at "
        f"{result['tokens']} tokens",
        "PASS" if max(gaps) <= GAP_GOAL_S else "FAIL",
        f"largest gap between {TICK_MS} ms timer ticks {max(gaps) * 1000:.0f} ms over "
        f"{len(gaps)} recomputes: {max(result['gaps']) * 1000:.0f} ms over "
        f"{len(result['gaps'])} without a mask, {masked} over {len(masked_gaps)} with "
        f"{', '.join(m.replace('-', ' ', 1) for m in MASKS)} masks (offscreen, the result "
        f"not drawn){_steal_text(result, gaps)}",
    )


def _steal_text(result: dict, gaps: list[float]) -> str:
    """What the hypervisor took from this virtual machine during the worst gap's recompute
    and during all of them (steal time), or "" where it is not known."""
    steals = result.get("steals") or []
    if len(steals) != len(gaps) or any(s is None for s in steals):
        return ""
    worst = steals[max(range(len(gaps)), key=gaps.__getitem__)]
    return (
        f"; the hypervisor took {worst * 1000:.0f} ms of CPU time from this virtual machine "
        f"(steal, /proc/stat) during the recompute with the largest gap, "
        f"{sum(steals) * 1000:.0f} ms during all {len(steals)}"
    )


def window_goals() -> list[plugins.Goal]:
    """The window's two goals, measured, or why they were not (no PyQt6 here)."""
    try:
        import PyQt6.QtWidgets  # noqa: F401 - the window's toolkit, checked before measuring
    except ImportError as exc:
        return [(WHAT, "not measured", f"the window cannot start: {exc}")]
    return goal_lines(measure())


BENCH_GOALS = (
    plugins.GoalSet("window", WHAT, window_goals),
    plugins.GoalSet("views", bench_views.WHAT, bench_views.view_goals),  # step change, hover
)

"""Timing: repeated calls of one row, and the rows of a group called in turn, round by round."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from scratch.bench import host
from scratch.bench.host import LOAD_WAIT_S
from scratch.bench.memory import peak_growth
from scratch.bench.row import Row

TIME_BUDGET_S = 1.5  # per row: repeat until about this much time is spent (at least 3 runs)
MAX_REPEATS = 30
# in a goal group every call starts after this pause: torch's OpenMP threads keep spinning on
# the cores for a few ms after a call (measured: docs/notes/bench.md)
SETTLE_S = 0.02
WARM_UP_COUNTS_S = 2.0  # a first call slower than this is also a timed run


def measure(
    fn: Callable[[], object], memory: str, repeats: int | None
) -> tuple[list[float], int | None]:
    """(every timed run's seconds, peak memory growth of one call).

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
    peak = peak_growth(fn, memory)
    while True:
        if repeats is not None:
            if len(times) >= repeats:
                break
        elif len(times) >= 3 and (sum(times) >= TIME_BUDGET_S or len(times) >= MAX_REPEATS):
            break
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times, peak


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n rows, one per round, in which every row takes every place and directly
    follows every other row equally often (a Williams design: n orders, 2n for odd n; why, not
    a rotation: docs/notes/bench.md)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    orders = [[(row + shift) % n for row in first] for shift in range(n)]
    return orders + [order[::-1] for order in orders] if n % 2 and n > 1 else orders


def measure_alternating(
    L: int,
    rivals: list[tuple[str, Callable[[], object], str]],
    runs: int | None,
    load_wait_s: float | None = LOAD_WAIT_S,
    budget_s: float = TIME_BUDGET_S,
    min_rounds: int = 3,
    max_rounds: int = MAX_REPEATS,
) -> list[Row]:
    """Time the rivals one call each per round, in balanced orders (`balanced_orders`).

    Load drifts then hit every row alike, each row is first in a round (right after the load
    check's pause: a "cold" call) as often as the others, and each follows each other row as
    often as the rest (what ran just before matters: see `balanced_orders`). Before each round
    the machine is given up to `load_wait_s` to go idle (None: no check); what other processes
    used is kept per row. After a warm-up call each and one untimed call that measures memory,
    `runs` rounds; with runs None, rounds until every row has spent about `budget_s` (at least
    `min_rounds`, at most `max_rounds`), stopping only after a whole cycle of orders.
    """
    peaks = []
    for _, fn, memory in rivals:
        fn()  # warm up
        peaks.append(peak_growth(fn, memory))
    times: list[list[float]] = [[] for _ in rivals]
    loads: list[float] = []
    cycle = balanced_orders(len(rivals))
    while True:
        done = len(times[0])
        if runs is not None:
            if done >= runs:
                break
        elif (
            done >= min_rounds
            and done % len(cycle) == 0  # the balance holds per whole cycle
            and (min(map(sum, times)) >= budget_s or done >= max_rounds)
        ):
            break
        if load_wait_s is not None:
            load = host.wait_for_idle(load_wait_s)
            if load is not None:
                loads.append(load)
        for i in cycle[done % len(cycle)]:
            time.sleep(SETTLE_S)  # the previous call's threads go idle first (see SETTLE_S)
            t0 = time.perf_counter()
            rivals[i][1]()
            times[i].append(time.perf_counter() - t0)
    load = statistics.median(loads) if loads else None
    return [
        Row(L, name, statistics.median(bucket), len(bucket), peak, memory, None, bucket, load)
        for (name, _, memory), bucket, peak in zip(rivals, times, peaks)
    ]


def best_of(run: Callable[[], object], runs: int) -> tuple[float, float, object]:
    """(best wall seconds, that call's CPU seconds, what it returned) over `runs` calls."""
    best: tuple[float, float, object] = (float("inf"), 0.0, None)
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        result = run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if wall < best[0]:
            best = (wall, cpu, result)
    return best

"""run_table: every contender at every size, goal groups interleaved, ratios to torch SDPA."""

from __future__ import annotations

import statistics
import sys

from scratch.bench import groups, host
from scratch.bench.contenders import contenders
from scratch.bench.host import LOAD_WAIT_S
from scratch.bench.row import Row
from scratch.bench.timing import measure, measure_alternating


def run_table(
    sizes: tuple[int, ...],
    repeats: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    load_wait_s: float | None = LOAD_WAIT_S,
) -> list[Row]:
    """Measure every contender at every size; ratios are to torch SDPA at the same L."""
    rows: list[Row] = []
    devices = ("cpu", "cuda") if device == "cuda" else ("cpu",)

    def say(L: int, what: str) -> None:
        if progress:
            print(f"\r[bench] L={L:<6} {what:<40}", end="", file=sys.stderr, flush=True)

    for L in sizes:
        here: list[Row] = []
        order: list[str] = []
        for dev in devices:
            rivals = contenders(L, dev)
            names = [name for name, _, _ in rivals]
            order += names
            # a group keeps the members measured here (without torch: numpy and its noise row)
            kept = [tuple(n for n in g if n in names) for g in groups.goal_groups(L, dev)]
            kept = [g for g in kept if len(g) > 1]
            for name, fn, memory in rivals:
                group = next((g for g in kept if name in g), None)
                if group is None:
                    say(L, name)
                    load = None if load_wait_s is None else host.wait_for_idle(load_wait_s)
                    times, peak = measure(fn, memory, repeats)
                    median = statistics.median(times)
                    here.append(Row(L, name, median, len(times), peak, memory, None, times, load))
                elif name == next(n for n in names if n in group):  # the group, once
                    say(L, f"{len(group)} rows, interleaved")
                    members = [r for r in rivals if r[0] in group]
                    python = group in groups.PYTHON_GROUPS
                    here.extend(
                        measure_alternating(
                            L,
                            members,
                            repeats or (groups.PAIR_RUNS if python else None),
                            load_wait_s,
                            groups.GOAL_BUDGET_S,
                            groups.GOAL_MIN_ROUNDS,
                            groups.GOAL_MAX_ROUNDS,
                        )
                    )
        here.sort(key=lambda r: order.index(r.name))  # the table's order, not the order timed
        sdpa = {r.name: r.best for r in here if r.name.startswith("torch SDPA (")}
        for r in here:
            ref = sdpa.get("torch SDPA (cuda)" if "(cuda)" in r.name else "torch SDPA (cpu)")
            r.ratio = ref / r.best if ref else None
        rows.extend(here)
    if progress:
        print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)
    return rows

"""Row: one measured kernel at one size, every timed run kept; how two rows compare; goal lines.

The statistics behind each rule are in docs/notes/bench.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from scratch.bench.contenders import E
from scratch.bench.plugins import Goal

GOAL_QUANTILE = 0.1  # ratio goals compare this quantile of each row's timed runs


def low_quantile(times: list[float]) -> float:
    """The GOAL_QUANTILE of timed runs (linear between order statistics, as NumPy's default)."""
    if not times:
        raise ValueError("times: expected at least one timed run, found none")
    ordered = sorted(times)
    position = GOAL_QUANTILE * (len(ordered) - 1)  # 60 runs: 5.9, near the 7th fastest
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


@dataclass
class Row:
    """One measured kernel at one size."""

    L: int
    name: str
    seconds: float  # median
    runs: int
    peak_bytes: int | None  # peak memory growth during one call
    memory_method: str  # "tracemalloc", "rss", "cuda" or "n/a"
    ratio: float | None = None  # best torch SDPA time / best time of this row, same L
    times: list[float] = field(default_factory=list)  # every timed run, in order (rounds)
    load: float | None = None  # CPUs other processes used just before (median over rounds)

    @property
    def best(self) -> float:
        """The fastest timed run (the least disturbed by other processes)."""
        return min(self.times) if self.times else self.seconds

    @property
    def p10(self) -> float:
        """The 10th percentile of the timed runs (GOAL_QUANTILE): goals compare this."""
        return low_quantile(self.times) if self.times else self.seconds

    @property
    def gflops(self) -> float:
        """4 L S E flops (two matrix products) per call, in GFLOP/s, from the best run."""
        return 4 * self.L * self.L * E / self.best / 1e9

    def scaled(self, factor: float, name: str) -> Row:
        """This row with every time times `factor` (a floor, or a share of the work), kept in
        its rounds so a paired ratio still pairs them."""
        times = [t * factor for t in self.times]
        return Row(
            self.L, name, self.seconds * factor, self.runs, None, "n/a", None, times, self.load
        )


@dataclass
class PairRatio:
    """How much faster row a is than row b: b's time / a's time, at the 10th percentile, best
    vs best and per round."""

    p10: float  # b.p10 / a.p10: what goals between threaded kernels judge
    best: float  # b.best / a.best
    median: float | None  # median over rounds of b / a (None when not interleaved): what the
    # plain-Python pair's goal judges (see goals.PAIRED_MEDIAN_GOALS)
    low: float | None
    high: float | None
    rounds: int
    load: float | None

    def text(self, unit: str = "x", paired: bool = False) -> str:
        """'1.01x at the 10th percentiles (best vs best 1.02x); median of 8 rounds ...', or with
        `paired` the median of the per-round ratios first (the statistic that goal judges)."""
        quantile = (  # 3 places: 0.996x is not 1.00x
            f"{self.p10:.3f}{unit} at the 10th percentiles (best vs best {self.best:.3f}{unit})"
        )
        parts = [quantile]
        if self.median is not None:
            median = (
                f"median of {self.rounds} interleaved rounds {self.median:.{3 if paired else 2}f}"
                f"{unit} (range {self.low:.2f}-{self.high:.2f}{unit})"
            )
            parts = [median, quantile] if paired else [quantile, median]
        if self.load is not None:
            parts.append(f"other processes used {self.load:.1f} CPUs")
        return "; ".join(parts)


def pair_ratio(a: Row, b: Row) -> PairRatio:
    """b's time over a's time (above 1: a is faster), from rows timed in the same rounds."""
    paired = len(a.times) == len(b.times) and len(a.times) > 0 and a.load == b.load
    per_round = [tb / ta for ta, tb in zip(a.times, b.times)] if paired else []
    return PairRatio(
        b.p10 / a.p10,
        b.best / a.best,
        statistics.median(per_round) if per_round else None,
        min(per_round) if per_round else None,
        max(per_round) if per_round else None,
        len(per_round),
        a.load,
    )


def verdict(
    goal: str, ratio: PairRatio, passes: Callable[[float], bool], unit: str = "x", paired=False
) -> Goal:
    """(goal, PASS or FAIL, the numbers): judged at the 10th percentiles, or by the median of the
    per-round ratios when `paired` and the rows were timed in the same rounds."""
    paired = paired and ratio.median is not None
    judged = ratio.median if paired else ratio.p10
    detail = ratio.text(unit, paired)
    if passes(round(judged, 3)) != passes(judged):  # the 3 printed places meet the goal
        detail += f"; unrounded {judged:.6f}{unit}"  # the verdict's own number
    return goal, "PASS" if passes(judged) else "FAIL", detail


def reference_lines(rows: list[Row], where: str) -> list[Goal]:
    """An info line per row: its 10th percentile, best and rounds (`where` ends the goal)."""
    return [
        (
            f"(reference) {r.name}{where}",
            "info",
            f"10th percentile {r.p10 * 1e3:.1f} ms, best {r.best * 1e3:.1f} ms, {r.runs} rounds",
        )
        for r in rows
    ]

"""Row: one measured kernel at one size, every timed run kept."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from scratch.bench.contenders import E
from scratch.bench.stats import PairRatio, low_quantile


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
        """The 10th percentile of the timed runs (stats.GOAL_QUANTILE): goals compare this."""
        return low_quantile(self.times) if self.times else self.seconds

    @property
    def gflops(self) -> float:
        """4 L S E flops (two matrix products) per call, in GFLOP/s, from the best run."""
        return 4 * self.L * self.L * E / self.best / 1e9


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

"""Row: one measured kernel at one size, every timed run kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from scratch.bench.contenders import E
from scratch.bench.stats import low_quantile


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

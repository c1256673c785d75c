"""The bench's statistics: the 10th percentile that goals compare, and paired ratios of rows."""

from __future__ import annotations

from dataclasses import dataclass

# Ratio goals compare this quantile of each row's timed runs. Measured here (2-core AVX-512 VM,
# 100 interleaved rounds at L = 4096, the same NumPy call timed as two rows, five runs): one
# call against itself came out 0.982-1.083x best vs best, 0.977-0.999x at the 10th percentile
# and 0.987-1.009x as the median of per-round ratios. The minimum hangs on one rare lucky
# call; the median would flatter NumPy under load (torch's OpenMP kernel slows far more);
# the 10th percentile still keeps only the least disturbed runs.
GOAL_QUANTILE = 0.1


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

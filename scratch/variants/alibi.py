"""ALiBi (Press et al., BLOOM, MPT): a linear distance penalty per head.

score + slope[h] * (kv_idx - q_idx): the bias is 0 on the diagonal and slope * distance below
zero for past keys (kv_idx < q_idx), so farther keys count less. Slopes are the paper's
geometric sequence: for n heads a power of two, slope[h] = 2 ** (-8 (h + 1) / n), the first
head steepest (n = 8: 1/2, 1/4, ..., 1/256). For other n: the slopes of the largest power of
two p < n, then every other slope of 2p heads (the 1st, 3rd, ...) for the n - p heads left.
Query i sits at position i + shift (shift = S - L: the queries are the last L of S positions, as
in decode); with learned sinks the offset matters, since the sink's logit is not shifted.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Self

from scratch.variants.arrays import entry
from scratch.variants.base import Variant, check_count, check_int, number
from scratch.variants.causal import _plus


def alibi_slopes(num_heads: int) -> list[float]:
    """The ALiBi paper's slope per head, for any head count.

    Args:
        num_heads: H.

    Returns:
        H slopes, 2^(-8/H), 2^(-16/H), ... for a power of two H.

    Examples:
        >>> from scratch.variants import alibi_slopes
        >>> alibi_slopes(4)
        [0.25, 0.0625, 0.015625, 0.00390625]
    """
    check_int(num_heads, "num_heads", least=1)

    def powers(n: int) -> list[float]:  # n a power of two: 2^(-8/n), 2^(-16/n), ...
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    p = 2 ** int(math.log2(num_heads))
    return powers(p) + powers(2 * p)[0::2][: num_heads - p]


@dataclass(frozen=True)
class ALiBi(Variant):
    """score + slopes[h] * (kv_idx - (q_idx + shift)); slopes: the paper's via for_heads.

    Attributes:
        slopes: one slope per query head (alibi_slopes gives the paper's).
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    slopes: tuple[float, ...]
    shift: int = 0

    def __post_init__(self):
        super().__post_init__()  # the shift
        if not isinstance(self.slopes, (list, tuple)) or not self.slopes:
            raise ValueError(f"slopes: expected one number per head, found {self.slopes!r}")
        for h, slope in enumerate(self.slopes):
            scalar = isinstance(slope, numbers.Real) or getattr(slope, "ndim", None) == 0
            if isinstance(slope, bool) or not scalar:  # a 0-d tensor or array is a number too
                raise ValueError(f"slopes[{h}]: expected a number, found {slope!r}")
            if not math.isfinite(float(slope)):
                raise ValueError(f"slopes[{h}]: expected a finite number, found {slope!r}")
        object.__setattr__(self, "slopes", tuple(float(s) for s in self.slopes))

    @classmethod
    def for_heads(cls, num_heads: int, shift: int = 0) -> Self:
        """This ALiBi (or SymmetricALiBi) with the paper's slopes for `num_heads` heads.

        Args:
            num_heads: H, the number of query heads (one slope each).
            shift: the diagonal: query i sits at key position i + shift.
        """
        return cls(tuple(alibi_slopes(num_heads)), shift)

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        check_count(len(self.slopes), H, "H", "slopes", "slope per query head", one=False)

    def score_mod(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        slope = entry(self, "slopes", self.slopes, score, h)
        return score + slope * (kv_idx - (q_idx + self.shift))

    def rule(self) -> str:
        i = f"(i{_plus(self.shift)})" if self.shift else "i"
        return f"ALiBi: score + slope[h] * (j - {i}), slopes " + ", ".join(map(number, self.slopes))

    def score_words(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        s = self.slopes[h]
        out = self.score_mod(score, b, h, q_idx, kv_idx)
        return (
            f"alibi({number(score)}) = {number(score)} + {number(s)} * ({kv_idx} - "
            f"{q_idx + self.shift}) "
            f"= {number(out)}"
        )

"""Symmetric ALiBi (FlashAttention's alibi without causal): the penalty grows with |distance|.

score - slope[h] * |i + shift - j|: keys on either side of the query's position lose slope per
step; shift = S - L aligns the queries bottom-right, as FlashAttention's `attention_ref` does.
With causal masking it equals ALiBi's slope * (j - i) on every key that is seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.alibi import ALiBi
from scratch.variants.arrays import entry
from scratch.variants.base import number


@dataclass(frozen=True)
class SymmetricALiBi(ALiBi):
    """score - slopes[h] * |i + shift - j| (slopes as ALiBi's).

    Attributes:
        slopes: one slope per query head (alibi_slopes gives the paper's).
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    shift: int = 0

    def score_mod(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        slope = entry(self, "slopes", self.slopes, score, h)
        return score - slope * abs(q_idx + self.shift - kv_idx)

    def rule(self) -> str:
        slopes = ", ".join(map(number, self.slopes))
        return f"symmetric ALiBi: score - slope[h] * |i + {self.shift} - j|, slopes {slopes}"

    def score_words(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        out = self.score_mod(score, b, h, q_idx, kv_idx)
        return (
            f"alibi({number(score)}) = {number(score)} - {number(self.slopes[h])} * "
            f"|{q_idx} + {self.shift} - {kv_idx}| = {number(out)}"
        )

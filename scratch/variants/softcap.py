"""Logit softcapping (Gemma 2, Grok): cap * tanh(score / cap) squeezes scores into (-cap, cap).

Applied to the scaled score, before the mask (as Gemma 2 and FlashAttention's `softcap`). Its
derivative, 1 - tanh(score / cap)^2, comes from dual.tanh when the backward differentiates it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratch.variants import dual
from scratch.variants.base import Variant, number


@dataclass(frozen=True)
class Softcap(Variant):
    """cap * tanh(score / cap), cap > 0.

    Attributes:
        cap: the largest |score| after the cap (Gemma 2: 50).
    """

    cap: float

    def __post_init__(self):
        ok = isinstance(self.cap, (int, float)) and not isinstance(self.cap, bool)
        if not ok or not (0.0 < self.cap < math.inf):
            raise ValueError(f"cap: expected a finite number > 0, found {self.cap!r}")

    def score_mod(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        return self.cap * dual.tanh(score / self.cap)

    def rule(self) -> str:
        return f"softcap: {number(self.cap)} * tanh(score / {number(self.cap)})"

    def score_words(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        c, out = number(self.cap), number(self.score_mod(score, b, h, q_idx, kv_idx))
        return f"softcap({number(score)}) = {c} * tanh({number(score)} / {c}) = {out}"

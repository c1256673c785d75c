"""Dilated sliding window (Longformer): w steps back from the diagonal, d keys per step.

Query i (at position i + shift) sees key j iff 0 <= i + shift - j <= w * d and
(i + shift - j) % d == 0: its own position and every d-th key before it, w of them, so the
window reaches w * d keys back for the price of w + 1 (Longformer gives some heads d > 1 to see
further at the same cost). d = 1 is the causal window SlidingWindow(w, 0). This file is the whole
variant: the picker, session files, the checker, NumPy and torch take it from the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.base import Variant
from scratch.variants.causal import at_or_before
from scratch.variants.params import Param


@dataclass(frozen=True)
class DilatedWindow(Variant):
    """Key j seen by query i iff 0 <= i + shift - j <= width * dilation and
    (i + shift - j) % dilation == 0."""

    key, label = "dilated", "dilated window"
    params = (
        Param("width", 2, 0, "w: keys seen before the diagonal key, each d positions apart"),
        Param("dilation", 2, 1, "d: positions between two keys seen (1: a plain causal window)"),
    )
    width: int
    dilation: int = 1
    shift: int = 0

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        diagonal = q_idx + self.shift
        reach = self.width * self.dilation  # how far back the last key seen lies
        inside = at_or_before(kv_idx, diagonal) & at_or_before(diagonal - reach, kv_idx)
        return inside & ((diagonal - kv_idx) % self.dilation == 0)

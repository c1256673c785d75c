"""Causal attention: key j visible to query i iff j <= i + shift.

shift = 0 is top-left alignment (PyTorch's `is_causal`, `tril(ones(L, S))`); shift = S - L is
bottom-right (FlashAttention's causal, and decode: the L queries are the last L positions of S
keys). A query with i + shift < 0 sees no key at all (its row is fully masked).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Ranges, Variant, clip


def shift_of(align: str, L: int, S: int) -> int:
    """The diagonal's offset: 0 for 'top-left', S - L for 'bottom-right'."""
    if align == "top-left":
        return 0
    if align == "bottom-right":
        return S - L
    raise ValueError(f"align: expected 'top-left' or 'bottom-right', found {align!r}")


@dataclass(frozen=True)
class Causal(Variant):
    """Key j visible to query i iff j <= i + shift (shift 0: top-left; S - L: bottom-right)."""

    shift: int = 0

    @classmethod
    def aligned(cls, align: str, L: int, S: int) -> Causal:
        """The causal variant for L queries and S keys aligned 'top-left' or 'bottom-right'."""
        return cls(shift_of(align, L, S))

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return kv_idx <= q_idx + self.shift

    def mask_mod_array(self, b, h, q_idx, kv_idx, xp):
        return kv_idx <= q_idx + self.shift

    def rule(self) -> str:
        return f"causal: key j seen by query i iff j <= i{_plus(self.shift)}"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        sign = "<=" if self.mask_mod(b, h, q_idx, kv_idx) else ">"
        return f" (causal: key {kv_idx} {sign} {q_idx}{_plus(self.shift)})"

    def key_ranges(self, b: int, h: int, q_lo: int, q_hi: int, S: int) -> Ranges:
        return clip(0, q_hi - 1 + self.shift + 1, S) if q_lo < q_hi else []


def _plus(shift: int) -> str:
    """' + 3', ' - 2' or '' for an offset."""
    return "" if shift == 0 else f" {'+' if shift > 0 else '-'} {abs(shift)}"

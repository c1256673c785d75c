"""Prefix-LM (T5's prefix LM, PaliGemma): the prefix is seen by all, the rest causally.

Key j is seen by query i iff j < prefix (bidirectional over the prefix: image and prompt) or
j <= i + shift (causal over the rest). `prefix` is one length for every batch entry, or one
length per batch entry b.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.arrays import entry
from scratch.variants.base import Variant, check_count, check_int
from scratch.variants.causal import _plus, at_or_before
from scratch.variants.params import Param


@dataclass(frozen=True)
class PrefixLM(Variant):
    """Key j seen by query i iff j < prefix[b] or j <= i + shift.

    Attributes:
        prefix: the keys every query sees (one count, or one per batch b).
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    key, label = "prefix", "prefix-LM"
    params = (Param("prefix", 2, 0, "keys every query sees"),)
    prefix: int | tuple[int, ...]
    shift: int = 0

    def check_params(self) -> None:
        """One length, or one per batch entry (kept as a tuple)."""
        if isinstance(self.prefix, (list, tuple)):
            object.__setattr__(self, "prefix", tuple(self.prefix))
            for b, n in enumerate(self.prefix):
                check_int(n, f"prefix[{b}]", least=0)
        else:
            check_int(self.prefix, "prefix", least=0)

    def length(self, b: int) -> int:
        """The prefix length of batch entry b (an index array b: the lengths of its entries).

        Args:
            b: the batch index (an int, or an index array).
        """
        if isinstance(self.prefix, tuple):
            return entry(self, "prefix", self.prefix, b, b)
        return self.prefix

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        if isinstance(self.prefix, tuple):
            check_count(len(self.prefix), B, "B", "prefix", "length per batch entry", one=False)

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return (kv_idx < self.length(b)) | at_or_before(kv_idx, q_idx + self.shift)

    def rule(self) -> str:
        return (
            f"prefix-LM: key j seen by query i iff j < {self.prefix} or j <= i{_plus(self.shift)}"
        )

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        n = self.length(b)
        if kv_idx < n:
            return f" (key {kv_idx} in the prefix of {n})"
        sign = "<=" if at_or_before(kv_idx, q_idx + self.shift) else ">"
        return f" (key {kv_idx} after the prefix of {n}, {sign} {q_idx}{_plus(self.shift)})"

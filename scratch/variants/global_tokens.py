"""Global tokens (Longformer, BigBird): a few positions that see every key and every query sees.

Query i (at position i + shift) sees key j iff j is a global position or i + shift is one.
Alone it is a sparse mask: rows of the global positions full, their columns full, nothing else.
Longformer's attention is its union with a window of w keys on each side:
or_masks(SlidingWindow(w, w).mask_mod, GlobalTokens([0]).mask_mod), position 0 being [CLS].
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.base import Variant, check_int
from scratch.variants.causal import _plus


@dataclass(frozen=True)
class GlobalTokens(Variant):
    """Key j seen by query i iff j in tokens or i + shift in tokens.

    Attributes:
        tokens: the global positions: seen by every query, and seeing every key.
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    tokens: tuple[int, ...]
    shift: int = 0

    def __post_init__(self):
        super().__post_init__()  # the shift
        if isinstance(self.tokens, (str, bytes)) or not hasattr(self.tokens, "__iter__"):
            raise TypeError(f"tokens: expected a list of positions, found {self.tokens!r}")
        found = sorted({check_int(t, "tokens", least=0) for t in self.tokens})
        if not found:
            raise ValueError("tokens: expected at least one global position, found none")
        object.__setattr__(self, "tokens", tuple(found))

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        if self.tokens[-1] >= S:
            raise ValueError(f"tokens: position {self.tokens[-1]} is past the S = {S} keys")

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        seen = False
        for t in self.tokens:  # a few positions: one comparison each (also under torch's vmap)
            seen = seen | (kv_idx == t) | (q_idx + self.shift == t)
        return seen

    def rule(self) -> str:
        shown = ", ".join(map(str, self.tokens))
        where = f"i{_plus(self.shift)}"
        return f"global tokens {{{shown}}}: key j seen by query i iff j or {where} is one"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        position = q_idx + self.shift
        if kv_idx in self.tokens:
            return f" (key {kv_idx} is a global token)"
        if position in self.tokens:
            return f" (query at position {position} is a global token)"
        return f" (neither key {kv_idx} nor the query's position {position} is a global token)"

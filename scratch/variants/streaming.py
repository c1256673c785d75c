"""Sink tokens kept in a sliding window (StreamingLLM): the first keys stay visible forever.

Query i sees key j iff j <= i + shift (causal) and (j < sinks or j >= i + shift - left): the
first `sinks` positions (the "attention sink" tokens) plus the window of the left + 1 most
recent keys, counted as SlidingWindow's left side.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.base import Variant
from scratch.variants.causal import _plus, at_or_before
from scratch.variants.params import Param


@dataclass(frozen=True)
class SinkTokens(Variant):
    """Key j seen by query i iff j <= i + shift and (j < sinks or j >= i + shift - left).

    Attributes:
        sinks: the first keys every query keeps seeing (StreamingLLM's attention sinks).
        left: keys before the diagonal key in the window.
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    key, label = "sink_tokens", "sink tokens + window"
    params = (
        Param("sinks", 1, 0, "the first keys every query keeps seeing", "sink_tokens",
              named="sink tokens"),
        Param("left", 2, 0, "keys before the diagonal key (-1: unbounded); (2, 0) sees 3 keys"),
    )  # fmt: skip
    sinks: int
    left: int
    shift: int = 0

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        diagonal = q_idx + self.shift  # recent: one of the left + 1 keys up to the diagonal
        recent = at_or_before(diagonal - self.left, kv_idx)
        return at_or_before(kv_idx, diagonal) & ((kv_idx < self.sinks) | recent)

    def rule(self) -> str:
        d = f"i{_plus(self.shift)}"
        return (
            f"{self.sinks} sink tokens + window of {self.left}: key j seen by query i iff "
            f"j <= {d} and (j < {self.sinks} or j >= {d} - {self.left})"
        )

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        d = q_idx + self.shift
        if not at_or_before(kv_idx, d):
            return f" (key {kv_idx} after query position {d})"
        if kv_idx < self.sinks:
            return f" (key {kv_idx} is a sink token)"
        inside = not at_or_before(kv_idx, d - self.left - 1)
        return f" (key {kv_idx} {'in' if inside else 'outside'} the window [{d - self.left}, {d}])"

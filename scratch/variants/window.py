"""Sliding-window attention, counted as FlashAttention's `window_size=(left, right)`.

Query i sees key j iff  i + shift - left <= j <= i + shift + right, where -1 for a side means
unbounded on that side. `left` and `right` count keys beside the diagonal key i + shift, so a
query sees at most left + 1 + right keys: Mistral's "sliding window of W keys, causal" is
(left, right) = (W - 1, 0). shift = S - L (bottom-right) is FlashAttention's alignment and the
default of `SlidingWindow.aligned`; shift = 0 is top-left.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.base import Variant, check_window_side
from scratch.variants.causal import _plus, at_or_before, shift_of
from scratch.variants.params import Param


@dataclass(frozen=True)
class SlidingWindow(Variant):
    """Key j seen by query i iff i + shift - left <= j <= i + shift + right (-1: unbounded).

    Attributes:
        left: keys before the diagonal key (-1: unbounded); (2, 0) sees 3 keys.
        right: keys after the diagonal key (-1: unbounded).
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).

    Examples:
        >>> from scratch.variants import SlidingWindow
        >>> window = SlidingWindow(1)
        >>> [[window.mask_mod(0, 0, i, j) for j in range(3)] for i in range(3)]
        [[True, False, False], [True, True, False], [False, True, True]]
    """

    key, label = "window", "sliding window (left, right)"
    params = (
        Param("left", 2, -1, "keys before the diagonal key (-1: unbounded); (2, 0) sees 3 keys"),
        Param("right", 0, -1, "keys after the diagonal key (-1: unbounded)"),
    )
    left: int
    right: int = 0
    shift: int = 0

    def check_params(self) -> None:
        check_window_side(self.left, "left")
        check_window_side(self.right, "right")

    @classmethod
    def aligned(cls, left: int, right: int, L: int, S: int, align: str = "bottom-right"):
        """The window for L queries and S keys, aligned as FlashAttention (bottom-right).

        Args:
            left: keys seen before the diagonal key (-1: unbounded).
            right: keys seen after it (-1: unbounded).
            L: the number of queries.
            S: the number of keys.
            align: 'bottom-right' (shift S - L) or 'top-left' (shift 0).
        """
        return cls(left, right, shift_of(align, L, S))

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        diagonal = q_idx + self.shift
        after_start = self.left == -1 or at_or_before(diagonal - self.left, kv_idx)
        before_end = self.right == -1 or at_or_before(kv_idx, diagonal + self.right)
        return after_start & before_end

    def rule(self) -> str:
        lo = "" if self.left == -1 else f"i{_plus(self.shift - self.left)} <= "
        hi = "" if self.right == -1 else f" <= i{_plus(self.shift + self.right)}"
        if not lo and not hi:
            return f"window ({self.left}, {self.right}): every key j seen by every query i"
        return f"window ({self.left}, {self.right}): key j seen by query i iff {lo}j{hi}"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        d = q_idx + self.shift
        lo = "-inf" if self.left == -1 else str(d - self.left)
        hi = "inf" if self.right == -1 else str(d + self.right)
        where = "in" if self.mask_mod(b, h, q_idx, kv_idx) else "outside"
        return f" (window: key {kv_idx} {where} [{lo}, {hi}])"

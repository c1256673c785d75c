"""Causal attention, the one place its rule is written: key j visible to query i iff j <= i + shift.

shift = 0 is top-left alignment (PyTorch's `is_causal`, `tril(ones(L, S))`); shift = S - L is
bottom-right (FlashAttention's causal, and decode: the L queries are the last L positions of S
keys). A query with i + shift < 0 sees no key at all (its row is fully masked).

Every reader asks here: the `Causal` variant (mask_mod, words) and the forms of the
same grid the fast paths need: some cells as nested bools (`causal_cells`, for sampled rows or a
thinned picture at 4096 tokens), the whole grid or one tile as a NumPy array (`causal_array`,
`causal_tile`), the grid as a torch tensor on a device (`causal_tensor`). tests/test_causal.py
checks every form against the rule and scans scratch/ and gui/ for a copy written elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scratch.ops.validate import check_positive_int
from scratch.variants.base import Variant

ALIGNS = ("top-left", "bottom-right")


def at_or_before(kv_idx: object, position: object) -> object:
    """The rule itself: key kv_idx is at or before `position` (query i's causal diagonal is
    i + shift). Ints give a bool; NumPy or torch index arrays give the broadcast bool array."""
    return kv_idx <= position


def shift_of(align: str, L: int, S: int) -> int:
    """The diagonal's offset: 0 for 'top-left', S - L for 'bottom-right'."""
    if align == "top-left":
        return 0
    if align == "bottom-right":
        return S - L
    raise ValueError(f"align: expected 'top-left' or 'bottom-right', found {align!r}")


def causal_shift(L: int, S: int, align: str = "top-left") -> int:
    """The diagonal of the causal grid: key j is visible to query i iff j <= i + shift.

    Args:
        L: the query length.
        S: the key length.
        align: "top-left" (PyTorch's is_causal) or "bottom-right" (decoding with a cache).

    Returns:
        0 for "top-left" (PyTorch's is_causal, tril(ones(L, S))), S - L for "bottom-right" (the
        last query sees every key, as in decoding with a cache).

    Examples:
        >>> from scratch.variants import causal_shift
        >>> causal_shift(2, 5), causal_shift(2, 5, "bottom-right")
        (0, 3)
    """
    L, S = check_positive_int(L, "L"), check_positive_int(S, "S")
    return shift_of(align, L, S)


def causal_cells(
    L: int,
    S: int,
    align: str = "top-left",
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> list[list[bool]]:
    """Rows `rows` and columns `cols` of the (L, S) causal grid; only the cells asked for are made.

    Args:
        L: the query length.
        S: the key length.
        align: "top-left" (PyTorch's is_causal) or "bottom-right" (decoding with a cache).
        rows: the query rows to make; None: every one.
        cols: the key columns to make; None: every one.

    Returns:
        The (len(rows), len(cols)) grid of bools, True = may attend.
    """
    causal = Causal(causal_shift(L, S, align))  # L, S and align checked first
    return causal.cells(range(L) if rows is None else rows, range(S) if cols is None else cols)


def causal_array(L: int, S: int, align: str = "top-left") -> object:
    """The (L, S) causal grid as a NumPy bool array (needs NumPy).

    Milliseconds at 4096 tokens, where 16.7 M nested bools take seconds to make and to convert.

    Args:
        L: the query length.
        S: the key length.
        align: "top-left" (PyTorch's is_causal) or "bottom-right" (decoding with a cache).

    Returns:
        The (L, S) numpy bool array, True = may attend.
    """
    return causal_tile(causal_shift(L, S, align), range(L), range(S))


def causal_tile(shift: int, rows: range, cols: range) -> object:
    """Rows `rows` and columns `cols` (contiguous ranges) of the causal grid whose diagonal is
    `shift` (from causal_shift), as a NumPy bool array (R, C): one np.tri, no Python per cell."""
    if rows.step != 1 or cols.step != 1:
        raise ValueError(f"rows, cols: expected contiguous ranges, found {rows} and {cols}")
    import numpy as np

    # cell (a, b) is query rows[a], key cols[b]: cols[b] <= rows[a] + shift
    diagonal = shift + rows.start - cols.start
    return np.tri(len(rows), len(cols), diagonal, dtype=bool)  # (R, C)


def causal_tensor(shift: int, L: int, S: int, device: object = None) -> object:
    """The (L, S) causal grid whose diagonal is `shift` as a torch bool tensor made on `device`
    (needs torch): tril(ones(L, S), shift), True = may attend."""
    import torch

    return torch.ones(L, S, dtype=torch.bool, device=device).tril(shift)  # (L, S)


@dataclass(frozen=True)
class Causal(Variant):
    """Key j visible to query i iff j <= i + shift (shift 0: top-left; S - L: bottom-right).

    Attributes:
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    key, label = "causal", "causal"
    shift: int = 0

    @classmethod
    def aligned(cls, align: str, L: int, S: int) -> Causal:
        """The causal variant for L queries and S keys, its diagonal aligned as named.

        Args:
            align: 'top-left' (shift 0) or 'bottom-right' (shift S - L).
            L: the number of queries.
            S: the number of keys.
        """
        return cls(shift_of(align, L, S))

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return at_or_before(kv_idx, q_idx + self.shift)

    def cells(self, rows: Sequence[int], cols: Sequence[int]) -> list[list[bool]]:
        """The grid's cells for queries `rows` and keys `cols` as nested bools (R, C).

        Args:
            rows: the R query rows i.
            cols: the C key columns j.
        """
        shift = self.shift  # at_or_before(j, i + shift) inlined: 16.7 M calls at 4096 tokens
        return [[j <= i + shift for j in cols] for i in rows]  # (R, C)

    def tile(self, rows: range, cols: range) -> object:
        """Queries `rows`, keys `cols` as a NumPy bool array (R, C).

        Args:
            rows: the R query rows i, a contiguous range.
            cols: the C key columns j, a contiguous range.
        """
        return causal_tile(self.shift, rows, cols)

    def tensor(self, L: int, S: int, device: object = None) -> object:
        """The (L, S) grid as a torch bool tensor on `device`.

        Args:
            L: the number of queries.
            S: the number of keys.
            device: the torch device (None: torch's default).
        """
        return causal_tensor(self.shift, L, S, device)

    def sees_whole_tile(self, rows: range, cols: range) -> bool:
        """Whether every query of `rows` sees every key of `cols` (the tile needs no mask).

        True when the tile's last key is on or below its first query's diagonal.

        Args:
            rows: the tile's query rows, a range.
            cols: the tile's key columns, a range.
        """
        return self.mask_mod(0, 0, rows.start, cols.stop - 1)

    def rule(self) -> str:
        return f"causal: key j seen by query i iff j <= i{_plus(self.shift)}"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        sign = "<=" if self.mask_mod(b, h, q_idx, kv_idx) else ">"
        return f" (causal: key {kv_idx} {sign} {q_idx}{_plus(self.shift)})"

    def diagonal(self, q_idx: int) -> int:
        """The last key query q_idx may see: its diagonal, q_idx + shift.

        A window's edges are measured from it.

        Args:
            q_idx: the query's row i.
        """
        return q_idx + self.shift

    def first_query(self, kv_idx: int) -> int:
        """The first query that sees key kv_idx (every later query sees it too).

        Args:
            kv_idx: the key's column j.
        """
        return max(0, kv_idx - self.shift)

    def keys_seen(self, q_lo: int, q_hi: int, S: int) -> int:
        """How many leading keys queries q_lo..q_hi-1 may see together (the rest are skipped).

        Args:
            q_lo: the block's first query row.
            q_hi: one past its last query row.
            S: the number of keys.
        """
        return max(0, min(q_hi + self.shift, S)) if q_lo < q_hi else 0  # the last query's keys


def _plus(shift: int) -> str:
    """' + 3', ' - 2' or '' for an offset."""
    return "" if shift == 0 else f" {'+' if shift > 0 else '-'} {abs(shift)}"


__all__ = [
    "ALIGNS",
    "Causal",
    "at_or_before",
    "causal_array",
    "causal_cells",
    "causal_shift",
    "causal_tensor",
    "causal_tile",
    "shift_of",
]

"""The causal rule, once: query i may attend key j iff j <= i + shift, for any part of the grid.

`scratch.causal_mask` builds the whole (L, S) grid of nested bools. A window at 4096 tokens
wants less or faster: a few sampled rows, a thinned picture, a NumPy array for a backend's
call. Each asks here, so the rule (and its two alignments) is written in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

from .masks import ALIGNS
from .validate import check_positive_int


def causal_shift(L: int, S: int, align: str = "top-left") -> int:
    """The diagonal of the causal grid: key j is visible to query i iff j <= i + shift.

    0 for "top-left" (PyTorch's is_causal, tril(ones(L, S))), S - L for "bottom-right" (the
    last query sees every key, as in decoding with a cache)."""
    L, S = check_positive_int(L, "L"), check_positive_int(S, "S")
    if align not in ALIGNS:
        raise ValueError(f"align: expected 'top-left' or 'bottom-right', found {align!r}")
    return 0 if align == "top-left" else S - L


def causal_cells(
    L: int,
    S: int,
    align: str = "top-left",
    rows: Sequence[int] | None = None,
    cols: Sequence[int] | None = None,
) -> list[list[bool]]:
    """Rows `rows` and columns `cols` (every one when None) of the (L, S) causal grid, True =
    may attend; only the cells asked for are made."""
    shift = causal_shift(L, S, align)
    rows = range(L) if rows is None else rows
    cols = range(S) if cols is None else cols
    return [[j <= i + shift for j in cols] for i in rows]  # (R, C)


def causal_array(L: int, S: int, align: str = "top-left") -> object:
    """The (L, S) causal grid as a NumPy bool array (needs NumPy): milliseconds at 4096 tokens,
    where 16.7 M nested bools take seconds to make and to convert."""
    import numpy as np

    return np.tri(L, S, causal_shift(L, S, align), dtype=bool)  # True where j <= i + shift


__all__ = ["causal_array", "causal_cells", "causal_shift"]

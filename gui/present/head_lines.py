"""The head view's state without Qt: which heads are on, which token is in focus, the lines."""

from __future__ import annotations

import dataclasses

import numpy as np

SHOWN = 0.02  # lines for weights below this are left out (they would only add grey)
ROW_MIN = 18.0  # pixels per token at least: every label has its own row, none overlap
ROW_MAX = 36.0  # and at most: a short text is not spread thin over a tall window
MARGIN = 8.0  # pixels above the first token and below the last
SPREAD = 2.0  # pixels between the ends of two heads' lines at the same token
SIDES = ("query", "key")  # the left column (queries) and the right column (keys)


@dataclasses.dataclass(frozen=True)
class Lines:
    """The lines to draw, weakest first (drawn in this order, the strongest ends on top)."""

    head: np.ndarray  # (n,) int
    query: np.ndarray  # (n,) int: the token on the left
    key: np.ndarray  # (n,) int: the token on the right
    weight: np.ndarray  # (n,) float, ascending


def row_step(tokens: int, available: float) -> float:
    """Pixels per token: the available height shared out, kept within ROW_MIN..ROW_MAX."""
    share = (available - 2 * MARGIN) / max(tokens, 1)
    return min(max(share, ROW_MIN), ROW_MAX)


def row_y(i: int, step: float) -> float:
    """Vertical centre of token i's row."""
    return MARGIN + step * (i + 0.5)


def height(tokens: int, step: float) -> float:
    """Pixels all the rows take (the scrolled canvas's height)."""
    return 2 * MARGIN + step * tokens


def token_at(y: float, tokens: int, step: float) -> int | None:
    """The token whose row holds height y, if any."""
    i = int((y - MARGIN) // step)
    return i if 0 <= i < tokens and y >= MARGIN else None


class HeadLines:
    """One layer's heads: the heads drawn (the legend), the token in focus (the mouse)."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.weights: np.ndarray | None = None  # (heads, T, T) of one layer
        self.on: list[int] = []  # the heads drawn, ascending
        self.hover: tuple[str, int] | None = None  # (side, token) under the mouse
        self.pinned: int | None = None  # a query token in focus while none is hovered

    def set_layer(
        self, tokens: list[str], weights: np.ndarray, heads: list[int], pinned: int | None = None
    ) -> None:
        """A layer's (heads, T, T) weights with `heads` on; pinned: a query token in focus."""
        weights = np.asarray(weights)
        if weights.ndim != 3 or weights.shape[1:] != (len(tokens), len(tokens)):
            raise ValueError(
                f"weights: expected (heads, {len(tokens)}, {len(tokens)}) for "
                f"{len(tokens)} tokens, found {weights.shape}"
            )
        bad = [h for h in heads if not 0 <= h < weights.shape[0]]
        if bad:
            raise ValueError(f"heads: expected 0 to {weights.shape[0] - 1}, found {bad}")
        self.tokens, self.weights = list(tokens), weights
        self.on = sorted(set(heads))
        self.hover, self.pinned = None, pinned

    @property
    def count(self) -> int:
        """How many heads the layer has."""
        return 0 if self.weights is None else self.weights.shape[0]

    def toggle(self, head: int) -> None:
        """The legend's click: head `head` on if off, off if on."""
        on = set(self.on) ^ {head}
        self.on = sorted(h for h in on if 0 <= h < self.count)

    def solo(self, head: int) -> None:
        """The legend's double click: that head alone."""
        self.on = [head] if 0 <= head < self.count else self.on

    def all_on(self) -> None:
        """Every head of the layer."""
        self.on = list(range(self.count))

    def chosen(self) -> int | None:
        """The one head on, if exactly one is (the model grid outlines it)."""
        return self.on[0] if len(self.on) == 1 else None

    def set_hover(self, side: str, token: int | None) -> bool:
        """The mouse over token `token` of the query or key column (None: over neither);
        True when the focus changed."""
        if side not in SIDES:
            raise ValueError(f"side: expected one of {SIDES}, found {side!r}")
        new = None if token is None else (side, token)
        changed = new != self.hover
        self.hover = new
        return changed

    def focus(self) -> tuple[str, int] | None:
        """The token whose lines alone are drawn: the hovered one, else the pinned query."""
        if self.hover is not None:
            return self.hover
        return None if self.pinned is None else ("query", self.pinned)

    def lines(self, shown: float = SHOWN) -> Lines:
        """The lines of the heads on, filtered to the focused token, weakest first."""
        empty = np.zeros(0, dtype=int)
        if self.weights is None or not self.on:
            return Lines(empty, empty, empty, np.zeros(0))
        on = np.asarray(self.on)
        chosen = self.weights[on]  # (heads on, T, T)
        keep = chosen >= shown
        focus = self.focus()
        if focus is not None:
            side, token = focus
            near = np.zeros_like(keep)
            if side == "query":
                near[:, token, :] = True  # what the query token attends to
            else:
                near[:, :, token] = True  # which query tokens attend to the key token
            keep &= near
        h, i, j = np.nonzero(keep)
        w = chosen[h, i, j]
        order = np.argsort(w, kind="stable")  # weakest first: the strongest drawn last, on top
        return Lines(on[h][order], i[order], j[order], w[order])

    def offset(self, head: int, step: float) -> float:
        """Vertical shift of head `head`'s line ends: the heads on fan out around a token's
        centre, so two heads' lines between the same tokens lie side by side, not on top."""
        if head not in self.on or len(self.on) == 1:
            return 0.0
        gap = min(SPREAD, (step - 6) / (len(self.on) - 1))
        return (self.on.index(head) - (len(self.on) - 1) / 2) * gap

"""Combining variants: masks meet (and_masks) or join (or_masks), score changes compose.

As FlexAttention: `and_masks(a, b)` sees a key iff every mask sees it, `or_masks` iff any does,
and score_mods compose in the order given: `compose(softcap, alibi)` is alibi(softcap(score)).
`combine(*variants)` makes one Variant of several: masks and-ed, score_mods composed in order.

What and_masks, or_masks and compose return is the bound mod of a small Variant (Masks,
Composed), whose array forms are derived as every variant's are (none when a part is a user's
own plain function: then a backend evaluates the mod cell by cell).
"""

from __future__ import annotations

from collections.abc import Callable

from scratch.variants.arrays import xp_of
from scratch.variants.base import Variant, array_form, check_sizes


class Mods(Variant):
    """A variant made of several plain mods of one kind ('mask' or 'score')."""

    def __init__(self, mods: tuple, kind: str):
        self.mods = mods
        self.on_arrays = all(array_form(m, kind) is not None for m in mods)

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        for m in self.mods:
            check_sizes(m, B, H, L, S)


class Masks(Mods):
    """mask_mods met (every: all must see the key) or joined (any one sees it)."""

    def __init__(self, mask_mods: tuple, every: bool):
        super().__init__(mask_mods, "mask")
        self.every = every

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        found = (m(b, h, q_idx, kv_idx) for m in self.mods)
        if xp_of(b, h, q_idx, kv_idx) is None:  # numbers: stop at the first answer that decides
            return all(found) if self.every else any(found)
        seen = next(found)
        for more in found:  # index arrays: met or joined cell by cell
            seen = (seen & more) if self.every else (seen | more)
        return seen

    def rule(self) -> str:
        return f"{'every' if self.every else 'any'} of {len(self.mods)} masks"


class Composed(Mods):
    """score_mods applied in order (the first one sees the scaled score)."""

    def __init__(self, score_mods: tuple):
        super().__init__(score_mods, "score")

    def score_mod(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        for f in self.mods:
            score = f(score, b, h, q_idx, kv_idx)
        return score

    def rule(self) -> str:
        return f"{len(self.mods)} score changes in order"


def and_masks(*mask_mods: Callable[..., bool]) -> Callable[..., bool]:
    """A mask_mod that sees a key iff every given mask_mod sees it.

    Args:
        *mask_mods: mask_mod(b, h, q_idx, kv_idx) -> bool functions.

    Returns:
        Their and.
    """
    return Masks(mask_mods, every=True).mask_mod


def or_masks(*mask_mods: Callable[..., bool]) -> Callable[..., bool]:
    """A mask_mod that sees a key iff some given mask_mod sees it.

    Args:
        *mask_mods: mask_mod(b, h, q_idx, kv_idx) -> bool functions.

    Returns:
        Their or.
    """
    return Masks(mask_mods, every=False).mask_mod


def compose(*score_mods: Callable[..., float]) -> Callable[..., float]:
    """A score_mod applying the given ones in order (the first one sees the scaled score).

    Args:
        *score_mods: score_mod(score, b, h, q_idx, kv_idx) -> float functions.

    Returns:
        Their composition.
    """
    return Composed(score_mods).score_mod


class Combined(Variant):
    """Several variants as one: every mask must see the key; score_mods apply in order.

    Args:
        *parts: the Variants, at least one.
    """

    def __init__(self, *parts: Variant):
        if not parts or not all(isinstance(p, Variant) for p in parts):
            raise TypeError("combine: expected one or more Variant objects")
        self.parts = parts
        masks = tuple(p.mask_mod for p in parts if p.mask_mod is not None)
        scores = tuple(p.score_mod for p in parts if p.score_mod is not None)
        self.meet = Masks(masks, every=True) if masks else None
        self.chain = Composed(scores) if scores else None
        self.on_arrays = all(p.on_arrays for p in (self.meet, self.chain) if p is not None)
        if masks:
            self.mask_mod = self._mask
        if scores:
            self.score_mod = self._score

    def _mask(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return self.meet.mask_mod(b, h, q_idx, kv_idx)

    def _score(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        return self.chain.score_mod(score, b, h, q_idx, kv_idx)

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        for p in self.parts:
            p.check(B, H, L, S)

    def rule(self) -> str:
        return " and ".join(p.rule() for p in self.parts)

    def explain(self, b: int, h: int, q_idx: int, kv_idx: int, score: float | None = None) -> str:
        if self.mask_mod is not None and not self.mask_mod(b, h, q_idx, kv_idx):
            score = None  # a masked key's score changes nothing: say only why it is masked
        words = []
        for p in self.parts:
            words.append(p.explain(b, h, q_idx, kv_idx, score))
            if p.score_mod is not None and score is not None:
                score = p.score_mod(score, b, h, q_idx, kv_idx)
        return "; ".join(w for w in words if w)


def combine(*variants: Variant) -> Combined:
    """One variant made of several (masks and-ed, score_mods composed in the order given).

    Args:
        *variants: the Variants, at least one.

    Returns:
        The Combined variant.

    Examples:
        >>> from scratch.variants import Causal, Softcap, SlidingWindow, combine
        >>> both = combine(SlidingWindow(1), Causal(0), Softcap(30.0))
        >>> both.mask_mod(0, 0, 2, 0), both.mask_mod(0, 0, 2, 1)
        (False, True)
    """
    return Combined(*variants)

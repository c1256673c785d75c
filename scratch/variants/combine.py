"""Combining variants: masks meet (and_masks) or join (or_masks), score changes compose.

As FlexAttention: `and_masks(a, b)` sees a key iff every mask sees it, `or_masks` iff any does,
and score_mods compose in the order given: `compose(softcap, alibi)` is alibi(softcap(score)).
`combine(*variants)` makes one Variant of several: masks and-ed, score_mods composed in order,
key ranges intersected (each part's own closed form: every key a query of the block sees is
inside, possibly with a few that no single query sees, so skipping the rest stays exact).
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Ranges, Variant


def and_masks(*mask_mods: Callable[..., bool]) -> Callable[..., bool]:
    """A mask_mod that sees a key iff every given mask_mod sees it."""

    def mask_mod(b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return all(m(b, h, q_idx, kv_idx) for m in mask_mods)

    return mask_mod


def or_masks(*mask_mods: Callable[..., bool]) -> Callable[..., bool]:
    """A mask_mod that sees a key iff some given mask_mod sees it."""

    def mask_mod(b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return any(m(b, h, q_idx, kv_idx) for m in mask_mods)

    return mask_mod


def compose(*score_mods: Callable[..., float]) -> Callable[..., float]:
    """A score_mod applying the given ones in order (the first one sees the scaled score)."""

    def score_mod(score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        for f in score_mods:
            score = f(score, b, h, q_idx, kv_idx)
        return score

    return score_mod


def intersect(a: Ranges, b: Ranges) -> Ranges:
    """Keys in both lists of half-open ranges."""
    found = []
    for lo, hi in a:
        for lo2, hi2 in b:
            start, end = max(lo, lo2), min(hi, hi2)
            if start < end:
                found.append((start, end))
    return sorted(found)


class Combined(Variant):
    """Several variants as one: every mask must see the key; score_mods apply in order."""

    def __init__(self, *parts: Variant):
        if not parts or not all(isinstance(p, Variant) for p in parts):
            raise TypeError("combine: expected one or more Variant objects")
        self.parts = parts
        masks = [p.mask_mod for p in parts if p.mask_mod is not None]
        scores = [p.score_mod for p in parts if p.score_mod is not None]
        self.mask_mod = and_masks(*masks) if masks else None
        self.score_mod = compose(*scores) if scores else None
        for mod in (self.mask_mod, self.score_mod):
            if mod is not None:
                mod.variant = self  # so flex_attention finds the parts to check

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

    def key_ranges(self, b: int, h: int, q_lo: int, q_hi: int, S: int) -> Ranges:
        found = [(0, S)] if q_lo < q_hi else []
        for p in self.parts:
            if p.mask_mod is not None:
                found = intersect(found, p.key_ranges(b, h, q_lo, q_hi, S))
        return found


def combine(*variants: Variant) -> Combined:
    """One variant made of several (masks and-ed, score_mods composed in the order given)."""
    return Combined(*variants)

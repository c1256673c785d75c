"""A given attn_mask as a variant (SDPA's `attn_mask`): bools select keys, floats are added.

A bool mask (True = may attend) becomes a mask_mod. A float mask is added to the scaled score
(a score_mod), and its -inf entries also make a mask_mod, so tiles that are all -inf are
skipped. The mask has SDPA's shapes: (L, S) or anything that broadcasts to (B, H, L, S).
"""

from __future__ import annotations

from collections.abc import Callable
from math import inf

from ..nested import at
from ..validate import as_mask, check_mask_shape
from .arrays import cells, constant, ones
from .base import Variant, number


class GivenMask(Variant):
    """attn_mask[b][h][i][j] (broadcast): bool = may the query see the key; float = added."""

    def __init__(self, attn_mask: object):
        self.attn_mask = attn_mask  # as given: a backend reads its own array from here
        values, shape, self.is_bool = as_mask(attn_mask, "attn_mask")
        if len(shape) > 4:
            raise ValueError(f"attn_mask: expected at most 4 dims (B, H, L, S), found {shape}")
        if len(shape) < 2:
            raise ValueError(f"attn_mask: expected (L, S) or (B, H, L, S), found shape {shape}")
        self.values, self.shape = values, (1,) * (4 - len(shape)) + shape
        for _ in range(4 - len(shape)):
            self.values = [self.values]

    @classmethod
    def unchecked(cls, attn_mask: object) -> GivenMask:
        """The variant of `attn_mask`, checked and read as nested lists only when first used
        (a backend reads `attn_mask` as its own array and never pays for 16.7 M Python cells)."""
        found = cls.__new__(cls)
        found.attn_mask = attn_mask
        return found

    def __getattr__(self, name: str) -> object:
        """An unchecked mask's cells, read on first use (only attributes not yet set land here)."""
        if name in ("values", "shape", "is_bool") and "attn_mask" in vars(self):
            self.__init__(self.attn_mask)
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def mask_mod(self) -> Callable[..., bool]:
        """May the query see the key: the bool entry, or a float entry that is not -inf."""
        return self._sees

    @property
    def score_mod(self) -> Callable[..., float] | None:
        """A float mask's entry added to the score; None for a bool mask."""
        return None if self.is_bool else self._add

    @property
    def mask_mod_array(self) -> Callable[..., object]:
        """mask_mod's array form (xp: numpy or torch)."""
        return self._sees_array

    @property
    def score_mod_array(self) -> Callable[..., object] | None:
        """score_mod's array form; None for a bool mask."""
        return None if self.is_bool else self._add_array

    @property
    def score_grad_array(self) -> Callable[..., object] | None:
        """d score_mod / d score as an array (1 everywhere); None for a bool mask."""
        return None if self.is_bool else self._grad_array

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        mb, mh, _, _ = self.shape
        check_mask_shape(self.shape, (mb if B is None else B, mh if H is None else H, L, S))

    def value(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool | float:
        """The mask's entry for one cell (size-1 axes broadcast)."""
        index = tuple(n if size > 1 else 0 for n, size in zip((b, h, q_idx, kv_idx), self.shape))
        return at(self.values, index)

    def _sees(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        v = self.value(b, h, q_idx, kv_idx)
        return v if self.is_bool else v != -inf

    def _add(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        return score + self.value(b, h, q_idx, kv_idx)

    def value_array(self, b, h, q_idx, kv_idx, xp, like, own_dtype=False):
        """The mask's entries for index arrays (size-1 axes broadcast), as like's dtype."""
        # (B or 1, H or 1, L, S): bools as bools, floats in the score's dtype
        values = constant(self, "values", self.values, xp, like, own_dtype=own_dtype)
        index = tuple(n if size > 1 else 0 for n, size in zip((b, h, q_idx, kv_idx), self.shape))
        return values[index]

    def _sees_array(self, b, h, q_idx, kv_idx, xp):
        found = self.value_array(b, h, q_idx, kv_idx, xp, kv_idx, own_dtype=True)
        return (found if self.is_bool else found != -inf) & cells(q_idx, kv_idx)

    def _add_array(self, score, b, h, q_idx, kv_idx, xp):
        return score + self.value_array(b, h, q_idx, kv_idx, xp, score)

    def _grad_array(self, score, b, h, q_idx, kv_idx, xp):
        return ones(score, xp)

    def rule(self) -> str:
        if self.is_bool:
            return "given mask: key j seen by query i iff attn_mask[i][j] is True"
        return "given mask: score + attn_mask[i][j] (-inf: masked)"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        return f" (attn_mask[{q_idx}][{kv_idx}] = {self.value(b, h, q_idx, kv_idx)})"

    def score_words(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        v = self.value(b, h, q_idx, kv_idx)
        cell = f"attn_mask[{q_idx}][{kv_idx}]"
        return f"{number(score)} + {cell} = {number(score)} + {number(v)} = {number(score + v)}"

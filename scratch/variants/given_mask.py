"""A given attn_mask as a variant (SDPA's `attn_mask`): bools select keys, floats are added.

A bool mask (True = may attend) becomes a mask_mod. A float mask is added to the scaled score
(a score_mod), and its -inf entries also make a mask_mod, so tiles that are all -inf are
skipped. The mask has SDPA's shapes: (L, S) or anything that broadcasts to (B, H, L, S).
"""

from __future__ import annotations

from math import inf

from ..nested import at
from ..validate import as_mask, check_mask_shape
from .arrays import cells, constant, ones
from .base import Variant, number


class GivenMask(Variant):
    """attn_mask[b][h][i][j] (broadcast): bool = may the query see the key; float = added."""

    def __init__(self, attn_mask: object):
        values, shape, self.is_bool = as_mask(attn_mask, "attn_mask")
        if len(shape) > 4:
            raise ValueError(f"attn_mask: expected at most 4 dims (B, H, L, S), found {shape}")
        if len(shape) < 2:
            raise ValueError(f"attn_mask: expected (L, S) or (B, H, L, S), found shape {shape}")
        self.values, self.shape = values, (1,) * (4 - len(shape)) + shape
        for _ in range(4 - len(shape)):
            self.values = [self.values]
        self.mask_mod = self._sees
        self.score_mod = None if self.is_bool else self._add
        self.mask_mod_array = self._sees_array
        self.score_mod_array = None if self.is_bool else self._add_array
        self.score_grad_array = None if self.is_bool else self._grad_array

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

"""A given attn_mask as a variant (SDPA's `attn_mask`): bools select keys, floats are added.

A bool mask (True = may attend) becomes a mask_mod. A float mask is added to the scaled score
(a score_mod), and its -inf entries also make a mask_mod, so tiles that are all -inf are
skipped. The mask has SDPA's shapes: (L, S) or anything that broadcasts to (B, H, L, S).
"""

from __future__ import annotations

from collections.abc import Callable
from math import inf

from scratch.ops.validate import as_mask, bool_grid, check_mask_shape
from scratch.variants.arrays import entry
from scratch.variants.base import Variant, number


class GivenMask(Variant):
    """`attn_mask[b][h][i][j]` (broadcast): bool = may the query see the key; float = added.

    Args:
        attn_mask: SDPA's attn_mask, (L, S) up to (B, H, L, S): bool or float.
    """

    def __init__(self, attn_mask: object):
        self.attn_mask = attn_mask  # as given: a backend reads its own array from here
        grid = bool_grid(attn_mask)  # rows of Python bools (a drawn grid): read as they are
        values, shape, self.is_bool = (attn_mask, grid, True) if grid else as_mask(attn_mask)
        if len(shape) > 4:
            raise ValueError(f"attn_mask: expected at most 4 dims (B, H, L, S), found {shape}")
        if len(shape) < 2:
            raise ValueError(f"attn_mask: expected (L, S) or (B, H, L, S), found shape {shape}")
        self.values, self.shape = values, (1,) * (4 - len(shape)) + shape
        for _ in range(4 - len(shape)):
            self.values = [self.values]

    @classmethod
    def unchecked(cls, attn_mask: object) -> GivenMask:
        """The variant of `attn_mask`, checked and read as nested lists only when first used.

        A backend reads `attn_mask` as its own array and never pays for 16.7 M Python cells.

        Args:
            attn_mask: (B or 1, H or 1, L, S) bools (True: seen) or floats (added to the score),
                nested lists or an array.
        """
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

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        mb, mh, _, _ = self.shape
        check_mask_shape(self.shape, (mb if B is None else B, mh if H is None else H, L, S))

    def value(self, b: int, h: int, q_idx: int, kv_idx: int, like: object = None) -> bool | float:
        """The mask's entry for one cell (size-1 axes broadcast), or for index arrays, one array.

        Args:
            b: the batch index (an int, or an index array).
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
            like: an array whose dtype the entries take (None: the mask's own, bools as bools).
        """
        index = tuple(n if size > 1 else 0 for n, size in zip((b, h, q_idx, kv_idx), self.shape))
        own = like is None  # (B or 1, H or 1, L, S): bools as bools, floats in the score's dtype
        return entry(self, "values", self.values, kv_idx if own else like, *index, own_dtype=own)

    def _sees(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        v = self.value(b, h, q_idx, kv_idx)
        return v if self.is_bool else v != -inf

    def _add(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        return score + self.value(b, h, q_idx, kv_idx, like=score)

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

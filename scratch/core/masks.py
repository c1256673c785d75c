"""Masks: a call's mask variant (causal, a user's attn_mask) as cells broadcast over the scores."""

from __future__ import annotations

from scratch.ops.validate import Nested, as_mask, check_mask_shape
from scratch.variants.causal import Causal, causal_cells


def causal_mask(L: int, S: int, align: str = "top-left") -> list[list[bool]]:
    """True where query i may attend key j: j <= i (top-left) or j <= i + S - L (bottom-right).

    Args:
        L: the query length.
        S: the key length.
        align: "top-left" (PyTorch's is_causal, tril(ones(L, S))) or "bottom-right" (the last
            query sees every key, as in decoding with a cache).

    Returns:
        The (L, S) grid of bools, True = may attend.

    Examples:
        >>> from scratch import causal_mask
        >>> causal_mask(2, 3)
        [[True, False, False], [True, True, False]]
        >>> causal_mask(2, 3, align="bottom-right")
        [[True, True, False], [True, True, True]]
    """
    return causal_cells(L, S, align)  # PyTorch's is_causal is top-left: tril(ones(L, S))


class Mask:
    """A validated mask, broadcast to scores of shape (..., L, S); hands out (L, S) slices."""

    def __init__(
        self, values: Nested, shape: tuple[int, ...], is_bool: bool, target: tuple[int, ...]
    ):
        check_mask_shape(shape, target)
        for _ in range(len(target) - len(shape)):  # left-pad with size-1 axes
            values, shape = [values], (1,) + shape
        self.values, self.shape, self.is_bool, self.target = values, shape, is_bool, target

    @classmethod
    def from_user(cls, attn_mask: object, target: tuple[int, ...]) -> Mask:
        """Validate a user's bool (True = may attend) or float (added) mask."""
        values, shape, is_bool = as_mask(attn_mask, "attn_mask")
        return cls(values, shape, is_bool, target)

    @classmethod
    def causal(cls, target: tuple[int, ...], variant: Causal | None = None) -> Mask:
        """The causal variant's mask for scores of shape (..., L, S) (None: top-left)."""
        L, S = target[-2:]
        variant = Causal(0) if variant is None else variant
        return cls(variant.cells(range(L), range(S)), (L, S), True, target)

    def slice(self, index: tuple[int, ...]) -> list[list]:
        """The (L, S) mask for one leading index, broadcast out to full size."""
        block = self.values
        for i, size in zip(index, self.shape):
            block = block[i if size != 1 else 0]
        L, S = self.target[-2:]
        rows = block if len(block) == L else block * L
        return [row if len(row) == S else row * S for row in rows]

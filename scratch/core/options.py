"""Options: everything about one attention call except its arrays, checked once, passed inward.

The public functions keep PyTorch's keyword arguments; the first thing each does is build one
`Options` from them, and only that value travels further in. A new option (a mask kind, a score
modifier, a flag for the backward pass) is a field here plus the code that reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scratch.ops.validate import (
    _describe,
    check_dropout_p,
    check_flag,
    check_masked_rows,
    check_scale,
)
from scratch.variants import Causal, GivenMask, Variant, combine

MASK_KINDS = ("none", "causal", "given")


def check_rng(rng: object) -> None:
    """`rng` is None or a `random.Random`-like object with a .random() method."""
    if rng is not None and not callable(getattr(rng, "random", None)):
        raise TypeError(f"rng: expected a random.Random or None, found {type(rng).__name__}")


@dataclass(frozen=True)
class Options:
    """How one attention call computes: mask, scale, empty-row policy, dropout, GQA, lse.

    Attributes:
        attn_mask: None, or (..., L, S) broadcast to the scores: bool (True = may attend) or
            float (added).
        is_causal: PyTorch's top-left causal mask, tril(ones(L, S)); not with attn_mask.
        variant: a scratch.variants object applied after the scale (a mask and/or a score
            change), or None.
        scale: the scores' factor; None: 1 / sqrt(E).
        dropout_p: the probability of dropping each weight after softmax.
        enable_gqa: key/value may have fewer heads than query.
        masked_rows: a row where every key is masked: "zero", "nan" or "uniform".
        rng: random.Random (or a backend's generator) for dropout.
        return_lse: also return each row's log-sum-exp of the masked scores.
    """

    attn_mask: object = None  # bool (True = may attend) or float (added), broadcast to scores
    is_causal: bool = False  # PyTorch's top-left causal mask, tril(ones(L, S))
    variant: object = (
        None  # a scratch.variants object applied after the scale (mask and/or score change)
    )
    scale: float | None = None  # None: 1 / sqrt(E)
    dropout_p: float = 0.0  # probability of dropping each weight after softmax
    enable_gqa: bool = False  # key/value may have fewer heads than query
    masked_rows: str = "zero"  # policy for rows in which every key is masked
    rng: object = None  # random.Random (or a backend's generator) for dropout
    return_lse: bool = False  # also return each row's log-sum-exp of the masked scores

    def __post_init__(self) -> None:
        """Check every field once; errors name the keyword argument."""
        check_flag(self.is_causal, "is_causal")
        check_flag(self.enable_gqa, "enable_gqa")
        check_flag(self.return_lse, "return_lse")
        object.__setattr__(self, "masked_rows", check_masked_rows(self.masked_rows))
        object.__setattr__(self, "dropout_p", check_dropout_p(self.dropout_p))
        check_rng(self.rng)
        if self.scale is not None:
            object.__setattr__(self, "scale", check_scale(self.scale, 1))
        if self.is_causal and self.attn_mask is not None:
            raise ValueError("is_causal: cannot be combined with attn_mask; pass one or the other")
        if self.variant is not None and not isinstance(self.variant, Variant):
            found = _describe(self.variant)
            raise TypeError(f"variant: expected a scratch.variants object or None, found {found}")

    @property
    def attention_variant(self) -> Variant | None:
        """The one variant the call computes (None when nothing changes the scores).

        Causal(0) for is_causal (top-left, as PyTorch), GivenMask for attn_mask (checked when its
        cells are first read), and `variant`, combined (masks and-ed, score changes in that order).
        """
        parts = []
        if self.is_causal:
            parts.append(Causal(0))
        if self.attn_mask is not None:
            parts.append(GivenMask.unchecked(self.attn_mask))
        if self.variant is not None:
            parts.append(self.variant)
        if len(parts) > 1:
            return combine(*parts)
        return parts[0] if parts else None

    @property
    def mask_kind(self) -> str:
        """'none', 'causal' or 'given' (a user's attn_mask): what a mask builder reads."""
        if self.is_causal:
            return "causal"
        return "none" if self.attn_mask is None else "given"

    def scale_for(self, E: int) -> float:
        """The softmax scale for head width E: the given scale, or 1 / sqrt(E).

        Args:
            E: the query's and key's width (d_k).
        """
        return check_scale(self.scale, E)

    def describe(self) -> str:
        """One line for reports and the window: the options that differ from the defaults."""
        parts = [f"mask={self.mask_kind}"]
        if self.scale is not None:
            parts.append(f"scale={self.scale:g}")
        if self.dropout_p:
            parts.append(f"dropout_p={self.dropout_p:g}")
        if self.enable_gqa:
            parts.append("enable_gqa")
        if self.masked_rows != "zero":
            parts.append(f"masked_rows={self.masked_rows}")
        if self.rng is not None:
            parts.append(f"rng={_describe(self.rng)}")
        if self.return_lse:
            parts.append("return_lse")
        if self.variant is not None:
            parts.append(f"variant={self.variant.rule()}")
        return ", ".join(parts)


@dataclass(frozen=True)
class FlexOptions:
    """How one flex_attention (or decode) call computes, PyTorch's keywords as given: the mods,
    the scale, GQA, lse and the sinks. Checked where the arrays are known
    (scratch.flex.forward.check_call,
    scratch.decode.attention.check_mods)."""

    score_mod: Callable[..., float] | None = None  # score_mod(score, b, h, q_idx, kv_idx)
    block_mask: object = None  # create_block_mask's BlockMask (torch's own, for torch)
    scale: float | None = None  # None: 1 / sqrt(E)
    enable_gqa: bool = False  # key/value may have fewer heads than query
    return_lse: bool = False  # also return each row's log-sum-exp
    sinks: object = None  # one learned sink logit per query head (gpt-oss), or None
    mask_mod: Callable[..., bool] | None = (
        None  # decode's mask at true positions (scratch.decode.attention)
    )


__all__ = ["MASK_KINDS", "FlexOptions", "Options", "check_rng"]

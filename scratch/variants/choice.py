"""A variant as plain data (what the window's picker and session files hold) -> one Variant.

`VariantChoice` names a mask (none, one of the registered masks: causal, window, chunked,
prefix-LM, documents from cu_seqlens, sink tokens, ... see registry.py; or a grid drawn by hand:
SDPA's bool attn_mask) with its alignment and its parameters, the score changes (softcap, then
ALiBi), learned sinks and RoPE, in numbers and words only; `variant(L, S, H)` builds the one
Variant a call of L queries, S keys and H heads computes, with the variants' own checks (a
refusal names the field: `left`, `cap`, `cu_seqlens`, `slopes`, `sinks`, ...). The queries are
the last L of S positions when aligned bottom-right (decode: one query, S cached keys), the first
L when top-left. The masks' parameters are fields too, one per registered Param (left, right,
chunk, prefix, cu_seqlens, sink_tokens, ...), added from the registry: a new mask file adds its
own.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass

from scratch.variants.alibi import ALiBi
from scratch.variants.base import Variant, check_int
from scratch.variants.causal import shift_of
from scratch.variants.combine import combine
from scratch.variants.given_mask import GivenMask
from scratch.variants.params import Param
from scratch.variants.registry import mask_params, mask_variants
from scratch.variants.rotary import Rotary
from scratch.variants.sinks import LearnedSinks
from scratch.variants.softcap import Softcap

MASKS = ("none", *mask_variants(), "drawn")  # drawn: a grid clicked by hand, not a rule
ALIGNS = ("top-left", "bottom-right")
ROPES = ("none", "half", "interleaved")


def with_mask_params(cls: type) -> type:
    """cls with one field per registered mask parameter (its default), before @dataclass; each
    field's words (Param.words) end its docstring, whose last section is `Attributes:`."""
    for p in mask_params().values():
        cls.__annotations__[p.key] = "tuple[int, ...]" if p.is_list else "int"
        setattr(cls, p.key, p.default)
    words = [f"    {p.key}: {p.words} (default {p.default!r})." for p in mask_params().values()]
    cls.__doc__ = "\n".join([inspect.cleandoc(cls.__doc__), *words])
    return cls


@dataclass(frozen=True)
@with_mask_params
class VariantChoice:
    """One variant in numbers and words: a mask, score changes, learned sinks, RoPE.

    Attributes:
        mask: "none", "drawn" or a registered mask's key (MASKS).
        align: where the queries sit among the keys: "bottom-right" or "top-left" (ALIGNS).
        drawn: the (length, S) grid of the whole sequence, True = may attend (kept while
            another mask is chosen, so choosing "drawn" again brings it back).
        softcap: cap * tanh(score / cap), applied first; None: off.
        alibi: + slope[h] * (j - i), after the softcap.
        slopes: ALiBi's slopes; (): the paper's for the head count.
        sinks: learned sink logits, one per head; (): none.
        rope: RoPE's pairing (ROPES); "none": off.
        rope_base: RoPE's base.
    """

    mask: str = "none"  # one of MASKS
    align: str = "bottom-right"  # where the queries sit among the keys (ALIGNS)
    # drawn: the (length, S) grid of the whole sequence, True = may attend (kept while another
    # mask is chosen, so choosing "drawn" again brings it back)
    drawn: tuple[tuple[bool, ...], ...] = ()
    softcap: float | None = None  # cap * tanh(score / cap), applied first; None: off
    alibi: bool = False  # + slope[h] * (j - i), after the softcap
    slopes: tuple[float, ...] = ()  # ALiBi's slopes; (): the paper's for the head count
    sinks: tuple[float, ...] = ()  # learned sink logits, one per head; (): none
    rope: str = "none"  # RoPE's pairing (ROPES); "none": off
    rope_base: float = 10000.0
    # + the masks' parameters (with_mask_params): left, right, chunk, prefix, cu_seqlens, ...

    def __post_init__(self) -> None:
        for name, allowed in (("mask", MASKS), ("align", ALIGNS), ("rope", ROPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name}: expected one of {', '.join(allowed)}, found {getattr(self, name)!r}"
                )
        for name in ("slopes", "sinks", *(p.key for p in mask_params().values() if p.is_list)):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "drawn", tuple(map(tuple, self.drawn)))

    @staticmethod
    def mask_labels() -> dict[str, str]:
        """The masks a choice may name, in the picker's words: 'none', each registered, 'drawn'."""
        registered = {key: cls.label for key, cls in mask_variants().items()}
        return {"none": "none", **registered, "drawn": "drawn (click the grid)"}

    @staticmethod
    def mask_params() -> dict[str, Param]:
        """The masks' parameters, each a field of the choice: {field: Param}."""
        return mask_params()

    @staticmethod
    def mask_fields(mask: str) -> tuple[str, ...]:
        """The parameter fields `mask` reads ('none' and 'drawn': none).

        Args:
            mask: a key of mask_labels().
        """
        if mask in ("none", "drawn"):
            return ()
        return tuple(p.key for p in mask_variants()[mask].params)

    def _mask(self, L: int, S: int, length: int) -> Variant | None:
        """The mask part for L queries at the last (or first) L of S positions."""
        if self.mask == "none":
            return None
        if self.mask == "drawn":
            return GivenMask.unchecked(self._drawn_rows(L, S, length))
        values = {key: getattr(self, key) for key in mask_params()}
        cls = mask_variants()[self.mask]
        return cls.chosen(values, L, S, shift_of(self.align, L, S), length)

    def _drawn_rows(self, L: int, S: int, length: int) -> tuple[tuple[bool, ...], ...]:
        """The drawn grid's cells for the call: the whole (L, S) grid, or at a decode step (L
        queries of a sequence of `length` tokens, S of them cached) the rows of the newest S - L
        .. S - 1 and keys 0 .. S - 1 of the (length, length) grid."""
        grid = self.drawn
        shape = (len(grid), len(grid[0]) if grid else 0)
        square = all(len(row) == shape[1] for row in grid)
        if shape == (L, S) and square:
            return grid
        if L < length and L <= S <= length and shape == (length, length) and square:
            return tuple(row[:S] for row in grid[S - L : S])
        raise ValueError(
            f"drawn: expected a grid of {L} rows of {S} booleans (True = may attend), found "
            f"{shape[0]} rows of {shape[1]}"
        )

    def variant(self, L: int, S: int, H: int, length: int | None = None) -> Variant | None:
        """The Variant for L queries, S keys, H heads, checked against those sizes.

        Args:
            L: the number of queries (the last L of S positions, or the first: `align`).
            S: the number of keys.
            H: the number of heads (ALiBi's slopes for_heads).
            length: the whole sequence's length, where cu_seqlens end (None: S).

        Returns:
            The variant, combined from the chosen parts; None when nothing is chosen.
        """
        check_int(S, "S", least=1)
        parts = [self._mask(L, S, S if length is None else length)]
        if self.softcap is not None:
            parts.append(Softcap(self.softcap))
        if self.alibi:
            shift = shift_of(self.align, L, S)  # queries at their true positions
            parts.append(ALiBi(self.slopes, shift) if self.slopes else ALiBi.for_heads(H, shift))
        if self.sinks:
            parts.append(LearnedSinks(self.sinks))
        if self.rope != "none":
            parts.append(Rotary(self.rope_base, self.rope))
        parts = [p for p in parts if p is not None]
        for p in parts:  # a drawn grid's shape is checked above; its cells when first read
            if not (self.mask == "drawn" and isinstance(p, GivenMask)):
                p.check(1, H, L, S)
        return None if not parts else parts[0] if len(parts) == 1 else combine(*parts)

    def to_dict(self) -> dict:
        """JSON-ready: lists, numbers, strings, None."""
        data = dataclasses.asdict(self)
        data["drawn"] = [list(row) for row in self.drawn]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: object) -> VariantChoice:
        """A choice from JSON data (a session's "variant"); ValueError naming the field.

        Args:
            data: {field: value}, as to_dict writes it.
        """
        if not isinstance(data, dict):
            raise ValueError(f"expected an object of VariantChoice's fields, found {data!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ValueError(
                f"unknown fields {', '.join(unknown)} (expected some of {', '.join(fields)})"
            )
        for name, value in data.items():
            _check_json(name, value, cls.__dataclass_fields__[name].default)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_json(name: str, value: object, default: object) -> None:
    """One field's JSON type: as its default's (a list for tuples, of integers for a mask's;
    softcap a number or null)."""
    if name == "softcap":
        ok = value is None or _number(value)
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = _number(value)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif name == "drawn":  # rows of bools
        ok = isinstance(value, list) and all(
            isinstance(row, list) and all(isinstance(b, bool) for b in row) for row in value
        )
    else:  # tuples: cu_seqlens of integers, slopes and sinks of numbers
        item = (
            (lambda x: isinstance(x, int) and not isinstance(x, bool))
            if name in mask_params()
            else _number
        )
        ok = isinstance(value, list) and all(item(x) for x in value)
    if not ok:
        raise ValueError(f"{name}: expected a value like {default!r}, found {value!r}")


__all__ = ["ALIGNS", "MASKS", "ROPES", "VariantChoice"]

"""The one definition of an attention variant: its mask_mod and/or score_mod, and what follows.

A variant states its rule once, as FlexAttention does: `mask_mod(b, h, q_idx, kv_idx) -> bool`
(True: the query may see the key) and/or `score_mod(score, b, h, q_idx, kv_idx) -> float` (the
scaled score changed). Everything else is derived from those two functions or checked against
them: the derivative for the backward (`score_grad`, by dual numbers, see dual.py), the keys a
block of queries may see (`key_ranges`, what a tiled kernel needs to skip tiles), and the words
(`rule`, one line; `explain`, the hover text of one cell).

A mask the window's picker offers declares `key`, `label` and `params` (params.Param) as class
attributes and is registered by that (MASK_VARIANTS, in the order the modules are found, see
registry.py): the picker's row, the session file's fields, the checker's case and the NumPy and
torch paths all follow from the declaration, so a new mask is one file in this folder.

Array forms (for NumPy tiles and torch's FlexAttention): `mask_mod_array(b, h, q_idx, kv_idx,
xp)`, `score_mod_array(score, b, h, q_idx, kv_idx, xp)` and `score_grad_array(score, ..., xp)`
(d score_mod / d score) with `xp` the numpy or torch module and index arrays that broadcast;
None where the variant has no such mod. They are the mods themselves, called on index arrays
(the mods are written with operations that work on both, see arrays.py), and the derivative is
the dual numbers' with array values: no variant restates its rule for arrays.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from scratch.variants.arrays import spread
from scratch.variants.dual import Dual, derivative, value_and_grad
from scratch.variants.params import Param

Ranges = list[tuple[int, int]]  # sorted, disjoint half-open key ranges [lo, hi)


def number(x: float) -> str:
    """A number as the hover text writes it (4 significant digits)."""
    return f"{x:.4g}"


def ranges_of(flags: list[bool]) -> Ranges:
    """The runs of True in `flags` as half-open ranges [lo, hi)."""
    found: Ranges = []
    for j, seen in enumerate(flags):
        if not seen:
            continue
        if found and found[-1][1] == j:
            found[-1] = (found[-1][0], j + 1)
        else:
            found.append((j, j + 1))
    return found


class MaskMod(Protocol):
    """FlexAttention's mask_mod: may a query see a key (a variant's `mask_mod`)."""

    def __call__(self, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        """True where query q_idx may see key kv_idx; on index arrays, bools that broadcast.

        Args:
            b: the batch index (an int, or an index array).
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """


class ScoreMod(Protocol):
    """FlexAttention's score_mod: the scaled score changed (a variant's `score_mod`)."""

    def __call__(self, score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        """The scaled score of query q_idx and key kv_idx, changed (a float, or an array).

        Args:
            score: the scaled score q_i . k_j * scale (a float, a dual number or an array).
            b: the batch index (an int, or an index array).
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """


MASK_VARIANTS: dict[str, type[Variant]] = {}  # key -> class: the masks the picker offers


class Variant:
    """An attention variant: set `mask_mod` and/or `score_mod` (methods) in a subclass."""

    key: ClassVar[str] = ""  # a picker mask's name (session files, the checker's feature)
    label: ClassVar[str] = ""  # its words in the picker and the checker's report
    params: ClassVar[tuple[Param, ...]] = ()  # what it takes besides the diagonal's shift

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that declares its own `key` is a picker mask: registered here."""
        super().__init_subclass__(**kwargs)
        if "key" in cls.__dict__:
            if cls.key in MASK_VARIANTS or cls.key == "none":
                raise ValueError(f"key: the mask name {cls.key!r} is taken")
            MASK_VARIANTS[cls.key] = cls

    @classmethod
    def chosen(cls, values: dict, L: int, S: int, shift: int, length: int) -> Variant:
        """The mask for a choice's values, L queries at the diagonal `shift` of S keys.

        Args:
            values: {param key: value} (a VariantChoice's, see params.Param).
            L: the number of queries.
            S: the number of keys.
            shift: key j is on query i's diagonal at j = i + shift.
            length: the whole sequence's length, for rules given over all of it (Documents).
        """
        return cls(**{p.name: values[p.key] for p in cls.params}, shift=shift)

    def __post_init__(self) -> None:
        """A variant with a `shift` (its diagonal's offset) gets an integer there, and its
        declared parameters are checked (check_params)."""
        if hasattr(self, "shift"):
            object.__setattr__(self, "shift", check_shift(self.shift))
        self.check_params()

    def check_params(self) -> None:
        """Each declared integer parameter an integer >= its Param's least, else ValueError.

        The error names the field; a mask that takes more (-1 for unbounded, a list) checks its
        own.
        """
        for p in self.params:
            if not p.is_list:
                check_int(getattr(self, p.name), p.name, least=p.least)

    mask_mod: MaskMod | None = None  # None: no mask
    score_mod: ScoreMod | None = None  # None: no score change
    on_arrays = True  # the mods take index arrays (a combination of a user's plain ones: no)

    @property
    def mask_mod_array(self) -> Callable[..., Any] | None:
        """mask_mod on index arrays, as bools at every (q_idx, kv_idx) cell (None: no mask)."""
        return self._mask_array if self.mask_mod is not None and self.on_arrays else None

    @property
    def score_mod_array(self) -> Callable[..., Any] | None:
        """score_mod on a score array and index arrays (None: no score change)."""
        return self._score_array if self.score_mod is not None and self.on_arrays else None

    @property
    def score_grad_array(self) -> Callable[..., Any] | None:
        """d score_mod / d score on arrays, by dual numbers (None: no score change)."""
        return self._grad_array if self.score_mod is not None and self.on_arrays else None

    def _mask_array(self, b: Any, h: Any, q_idx: Any, kv_idx: Any, xp: Any) -> Any:
        return spread(self.mask_mod(b, h, q_idx, kv_idx), q_idx, kv_idx, xp)

    def _score_array(self, score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any, xp: Any) -> Any:
        return self.score_mod(score, b, h, q_idx, kv_idx)

    def _grad_array(self, score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any, xp: Any) -> Any:
        grad = value_and_grad(self.score_mod(Dual(score, 1.0), b, h, q_idx, kv_idx))[1]
        return xp.ones_like(score) * grad  # a constant derivative (score + bias: 1) spread

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        """Refuse sizes the variant's data does not fit (ValueError); none here.

        Args:
            B: the batch size (None: not known).
            H: the number of heads (None: not known).
            L: the number of queries.
            S: the number of keys.
        """

    def rule(self) -> str:
        """The rule in one line of words (the window's legend, the checker's case name).

        For a declared mask: its label, its values and its docstring's first line.
        """
        said = " ".join((type(self).__doc__ or "").strip().split("\n\n")[0].split())
        values = [f"{p.name} {getattr(self, p.name)}" for p in self.params]
        values += [f"shift {self.shift}"] if getattr(self, "shift", 0) else []
        head = f"{self.label} ({', '.join(values)})" if values else self.label
        said = said.rstrip(".")
        return f"{head}: {said[:1].lower()}{said[1:]}" if said else head

    def explain(self, b: int, h: int, q_idx: int, kv_idx: int, score: float | None = None) -> str:
        """Hover text for one cell: why the key is seen or masked, and the score's change.

        Args:
            b: the batch index.
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
            score: the cell's scaled score (None: no score words).
        """
        parts = []
        if self.mask_mod is not None:
            seen = self.mask_mod(b, h, q_idx, kv_idx)
            parts.append(("seen" if seen else "masked") + self.why(b, h, q_idx, kv_idx))
        if self.score_mod is not None and score is not None:
            parts.append(self.score_words(score, b, h, q_idx, kv_idx))
        return "; ".join(parts)

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        """Words for mask_mod's answer at one cell (a subclass writes its own arithmetic).

        Args:
            b: the batch index.
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """
        return f" (query {q_idx}, key {kv_idx}: {self.rule()})"

    def score_words(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        """Words for score_mod at one cell: 'name(score) = ... = value'.

        Args:
            score: the cell's scaled score.
            b: the batch index.
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """
        return f"{number(score)} -> {number(self.score_mod(score, b, h, q_idx, kv_idx))}"

    def score_grad(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        """d score_mod / d score at one cell, from score_mod itself (dual numbers).

        Args:
            score: the cell's scaled score.
            b: the batch index.
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """
        if self.score_mod is None:
            return 1.0
        return derivative(self.score_mod, score, b, h, q_idx, kv_idx)

    def key_ranges(self, b: int, h: int, q_lo: int, q_hi: int, S: int) -> Ranges:
        """Keys some query in [q_lo, q_hi) may see; a tiled kernel skips every other key.

        Derived from mask_mod by asking it about every cell (no mask_mod: every key), so it
        cannot disagree with the rule.

        Args:
            b: the batch index.
            h: the head index.
            q_lo: the block's first query row.
            q_hi: one past its last query row.
            S: the number of keys.
        """
        queries, sees = range(q_lo, q_hi), self.mask_mod
        return ranges_of([sees is None or any(sees(b, h, i, j) for i in queries) for j in range(S)])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.rule()!r})"


def array_form(mod: Callable | None, kind: str) -> Callable | None:
    """The array form of a variant's bound mod: kind 'mask' -> mask_mod_array, 'score' ->
    score_mod_array, 'grad' -> score_grad_array; None for a user's own plain function."""
    owner = getattr(mod, "__self__", None)
    if not isinstance(owner, Variant):
        return None
    plain = owner.mask_mod if kind == "mask" else owner.score_mod
    if plain is None or mod != plain:
        return None
    name = {"mask": "mask_mod_array", "score": "score_mod_array", "grad": "score_grad_array"}
    return getattr(owner, name[kind])


def check_sizes(mod: object, B: int | None, H: int | None, L: int, S: int) -> None:
    """If mod is a variant's mask_mod/score_mod, check the variant against the call's sizes."""
    owner = getattr(mod, "__self__", None) or getattr(mod, "variant", None)
    if isinstance(owner, Variant):
        owner.check(B, H, L, S)


def check_count(
    found: int, size: int | None, axis: str, name: str, what: str, *, one: bool = True
) -> None:
    """`found` entries for an axis of `size` (one shared entry allowed when `one`)."""
    if size is not None and found != size and not (one and found == 1):
        shared = "1 (shared) or " if one else ""
        raise ValueError(f"{name}: expected {shared}one {what} ({axis} = {size}), found {found}")


def check_shift(value: object) -> int:
    """A diagonal's offset: an integer of any sign (NumPy integers too), not a bool or a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"shift: expected an integer (key j is on query i's diagonal at j = i + shift), "
            f"found {value!r}"
        )
    return int(value)


def check_int(value: object, name: str, *, least: int) -> int:
    """An integer >= least (ValueError naming the field otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name}: expected an integer >= {least}, found {value!r}")
    return value


def check_window_side(value: object, name: str) -> int:
    """One side of a window: keys counted beside the diagonal key, -1 meaning unbounded."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(f"{name}: expected an integer >= 0, or -1 for unbounded, found {value!r}")
    return value


__all__ = [
    "MASK_VARIANTS",
    "MaskMod",
    "Ranges",
    "ScoreMod",
    "Variant",
    "array_form",
    "check_count",
    "check_shift",
    "check_sizes",
    "number",
    "ranges_of",
]

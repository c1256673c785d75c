"""The session's variant and decode step: pure edits, what a call computes, the mask drawn.

The picker's texts become a VariantChoice (scratch's plain data) here, and the
checks are the variants' own: `checked` builds the variant for the session's sizes, so a refusal
names the field as scratch words it (`left`, `cap`, `cu_seqlens`, `slopes`, `sinks`). No Qt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import scratch
from gui.state.session import Session, SessionError
from scratch.variants import VariantChoice


def call_sizes(s: Session) -> tuple[int, int]:
    """(L, S) of the call: the session's, or (1, n) at decode step n (one query, n keys)."""
    return (1, s.decode) if s.decode else (s.num_tokens, s.num_keys)


def is_plain(s: Session) -> bool:
    """Decode off and nothing but a mask SDPA takes (none, causal, a drawn grid): what Copy as
    code writes (the other masks' fields, such as a window's left, are unused then)."""
    v = s.variant
    plain = v.mask in ("none", "causal", "drawn") and v.softcap is None and not v.alibi
    return plain and not v.sinks and v.rope == "none" and not s.decode


def variant_of(s: Session) -> object:
    """The Variant the session's call computes (None for none); ValueError naming the field."""
    L, S = call_sizes(s)
    return s.variant.variant(L, S, s.num_heads, length=s.num_tokens)


def checked(s: Session) -> None:
    """SessionError naming the field when the variant or the decode step do not fit `s`."""
    if s.decode:
        if not 0 <= s.decode <= s.num_tokens:
            raise SessionError(
                f"decode: expected a cache of 1 to {s.num_tokens} tokens, found {s.decode}"
            )
        if s.num_keys != s.num_tokens or (s.mode == "project" and s.key is not None):
            raise SessionError(
                "decode: needs one sequence (self-attention: no key input of its own)"
            )
    try:
        variant_of(s)
    except ValueError as exc:
        raise SessionError(f"variant: {exc}") from None


def in_positions(trace: object, s: Session) -> object:
    """`trace` with its masked step's rule in the window's positions: at decode step n the call
    counts its one query as row 0 (the rule reads 'i + 2 <= j <= i + 4'), but the window shows
    it as token n - 1, so the note gets the rule of the whole sequence, the Variant panel's."""
    if not s.decode or trace is None or getattr(trace.options, "variant", None) is None:
        return trace
    said = scratch.mask_rule(trace.options.variant)
    try:
        whole = s.variant.variant(s.num_tokens, s.num_keys, s.num_heads, length=s.num_tokens)
    except ValueError:
        return trace
    shown = scratch.mask_rule(whole)
    if not said or said == shown or "masked" not in trace:
        return trace
    steps = tuple(
        dataclasses.replace(step, note=step.note.replace(said, shown))
        if step.name == "masked"
        else step
        for step in trace.steps
    )
    return dataclasses.replace(trace, steps=steps)


def _floats(text: str, field: str) -> tuple[float, ...]:
    """'0.5, -1' -> (0.5, -1.0); ValueError naming the field."""
    try:
        return tuple(float(t) for t in text.replace(",", " ").split())
    except ValueError:
        raise ValueError(f"{field}: expected numbers separated by commas, found {text!r}") from None


def _one(text: str, field: str, kind: type) -> int | float:
    """One integer or number from a text box; ValueError naming the field."""
    try:
        return kind(text.strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{field}: expected {what}, found {text!r}") from None


def choice_from_fields(fields: Mapping[str, object]) -> object:
    """A VariantChoice from the picker: combo keys and check boxes as they are, texts parsed.

    `fields`: mask, align, rope (keys); alibi, softcap_on, sinks_on (bools); every mask
    parameter (left, right, chunk, prefix, sink_tokens, cu_seqlens, ...), slopes, softcap,
    sinks, rope_base (texts)."""
    return VariantChoice(
        mask=fields["mask"],
        align=fields["align"],
        **{key: p.parse(fields[key]) for key, p in VariantChoice.mask_params().items()},
        softcap=_one(fields["softcap"], "cap", float) if fields["softcap_on"] else None,
        alibi=bool(fields["alibi"]),
        slopes=_floats(fields["slopes"], "slopes") if fields["alibi"] else (),
        sinks=_floats(fields["sinks"], "sinks") if fields["sinks_on"] else (),
        rope=fields["rope"],
        rope_base=_one(fields["rope_base"], "base", float),
    )


def with_variant(s: Session, fields: Mapping[str, object]) -> Session:
    """The session with the picker's variant; ValueError naming the field when it does not fit.

    The drawn grid stays (the picker does not show it); a first drawn mask starts all True."""
    drawn = s.variant.drawn
    if fields["mask"] == "drawn" and not drawn:
        drawn = tuple(tuple(True for _ in range(s.num_keys)) for _ in range(s.num_tokens))
    choice = dataclasses.replace(choice_from_fields(fields), drawn=drawn)
    edited = dataclasses.replace(s, variant=choice)
    checked(edited)
    return edited


def with_decode(s: Session, n: int) -> Session:
    """Decode off (n = 0) or at step n: the cache holds tokens 0 .. n-1, token n-1 queries."""
    edited = dataclasses.replace(s, decode=n)
    checked(edited)
    return edited


def rule(s: Session) -> str:
    """The variant's rule in words for the session's sizes ('' for none or a refused one)."""
    try:
        variant = s.variant.variant(s.num_tokens, s.num_keys, s.num_heads)
    except ValueError as exc:
        return f"not used: {exc}"
    return "" if variant is None else variant.rule()


# ---------------------------------------------------------------- the one mask, drawn


def variant_cells(choice: VariantChoice, L: int, S: int, H: int, rows, cols) -> list | None:
    """Rows `rows` and columns `cols` of the choice's mask (head 0's: the picture), asked of its
    mask_mod; None when the choice has no mask (or does not fit: the picker says why)."""
    try:
        variant = choice.variant(L, S, H)
    except ValueError:
        return None
    if variant is None or variant.mask_mod is None:
        return None
    return [[bool(variant.mask_mod(0, 0, i, j)) for j in cols] for i in rows]


def _mask_cells(s: Session, rows, cols) -> tuple[tuple[bool, ...], ...]:
    """The mask at queries `rows`, keys `cols`: the variant's (scratch's), or every key."""
    cells = variant_cells(s.variant, s.num_tokens, s.num_keys, s.num_heads, rows, cols)
    if cells is None:
        return tuple(tuple(True for _ in cols) for _ in rows)
    return tuple(map(tuple, cells))


def shown_mask(s: Session) -> tuple[tuple[bool, ...], ...]:
    """The (L, S) grid of the session's one mask, True = may attend (every key without one)."""
    return _mask_cells(s, range(s.num_tokens), range(s.num_keys))


def sampled_indices(n: int, most: int) -> list[int]:
    """At most `most` evenly spaced indices of range(n), first and last included."""
    if n <= most:
        return list(range(n))
    return [round(k * (n - 1) / (most - 1)) for k in range(most)]


def sampled_mask(s: Session, most: int) -> tuple[tuple[bool, ...], ...]:
    """The shown mask at up to `most` evenly spaced queries and keys (a picture of a big mask)."""
    rows, cols = sampled_indices(s.num_tokens, most), sampled_indices(s.num_keys, most)
    return _mask_cells(s, rows, cols)


def toggled_mask_cell(s: Session, i: int, j: int) -> Session:
    """A copy with cell (i, j) of the shown mask flipped: the mask becomes a drawn one."""
    rows = [list(r) for r in shown_mask(s)]
    rows[i][j] = not rows[i][j]
    drawn = tuple(tuple(r) for r in rows)
    return dataclasses.replace(s, variant=dataclasses.replace(s.variant, mask="drawn", drawn=drawn))


def mask_names() -> tuple[str, ...]:
    """The masks a name can choose (main.py's --mask): none, causal in either alignment, and
    every registered mask with its default parameters (documents and a drawn grid need their
    cells, given in the Variant box)."""
    given = ("none", "causal", "documents", "drawn")
    registered = tuple(m for m in VariantChoice.mask_labels() if m not in given)
    return ("none", "causal-top-left", "causal-bottom-right", *registered)


def with_mask_mode(v: VariantChoice, mode: str) -> VariantChoice:
    """The choice with the mask `mode` names (one of mask_names(); 'causal-top-left' is SDPA's
    is_causal); SessionError naming the mask otherwise."""
    if mode not in mask_names():
        raise SessionError(f"mask: expected one of {', '.join(mask_names())}, found {mode!r}")
    if mode.startswith("causal-"):
        return dataclasses.replace(v, mask="causal", align=mode.removeprefix("causal-"))
    return dataclasses.replace(v, mask=mode)  # the alignment stays (ALiBi reads it too)

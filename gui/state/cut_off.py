"""What shrinking a session cut off, so growing it back restores it. No Qt.

One notch down on `L` dropped the token 'step' and its row of x; one notch up gave a token 't5'
full of zeros. The inputs panel keeps a CutOff beside its session: every table, the labels and
the mask at the largest extent seen, the session's own cells laid over the ones cut off.
Growing a size back takes the cells from there (zeros and 't<i>' only where no cell was ever).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from gui.state import session as sm


@dataclass(frozen=True)
class CutOff:
    """The tables, token labels and mask a session had at its largest, cut-off cells included."""

    tables: Mapping[str, sm.Matrix]  # by name (sm.MATRICES); tables the session lacks: absent
    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    mask: tuple[tuple[bool, ...], ...] | None  # the variant's drawn grid (None: none drawn)


def _laid_over(now: tuple | None, before: tuple | None, fill: object) -> tuple | None:
    """`now`'s cells over `before`'s, at the larger of the two extents; `fill` where neither."""
    if now is None or before is None:
        return now
    cols = max((len(row) for row in (*now, *before)), default=0)
    rows = []
    for i in range(max(len(now), len(before))):
        row = now[i] if i < len(now) else ()
        old = before[i] if i < len(before) else ()
        row = row + old[len(row) :]
        rows.append(row + (fill,) * (cols - len(row)))
    return tuple(rows)


def remembered(s: sm.Session, before: CutOff | None) -> CutOff | None:
    """`before` with the session's cells, labels and mask laid over it (None for a random
    example: a new size draws it again from its seed)."""
    if s.preset == "random":
        return None
    tables = {name: s.matrix(name) for name in sm.MATRICES if s.matrix(name) is not None}
    if before is not None:
        tables = {name: _laid_over(m, before.tables.get(name), 0.0) for name, m in tables.items()}
        return CutOff(
            tables=tables,
            tokens=s.tokens + before.tokens[len(s.tokens) :],
            key_tokens=s.key_tokens + before.key_tokens[len(s.key_tokens) :],
            mask=_laid_over(_drawn(s), before.mask, True),
        )
    return CutOff(tables=tables, tokens=s.tokens, key_tokens=s.key_tokens, mask=_drawn(s))


def _drawn(s: sm.Session) -> tuple[tuple[bool, ...], ...] | None:
    """The session's drawn mask grid, None when it has none."""
    return s.variant.drawn or None


def regrown(s: sm.Session, kept: CutOff | None, **sizes: int) -> sm.Session:
    """sm.regenerated at new sizes, with the cells, labels and mask cells `kept` holds where the
    new sizes reach past the session's (`kept` from remembered(s, ...))."""
    new = sm.regenerated(s, **sizes)
    if kept is None or new.preset == "random":  # drawn again: nothing was cut off
        return new
    tables = {
        name: sm.resize_matrix(kept.tables[name], len(m), len(m[0]))
        for name in sm.MATRICES
        if (m := new.matrix(name)) is not None and name in kept.tables
    }
    tokens = sm.resize_labels(kept.tokens, new.num_tokens)
    cross = s.key is not None  # as sm.resized: key labels of their own only with a key input
    variant = new.variant
    if variant.drawn and kept.mask is not None:
        drawn = sm.resize_matrix(kept.mask, new.num_tokens, new.num_keys, fill=True)
        variant = dataclasses.replace(variant, drawn=drawn)
    return dataclasses.replace(
        new,
        tokens=tokens,
        key_tokens=sm.resize_labels(kept.key_tokens, new.num_keys) if cross else tokens,
        variant=variant,
        **tables,
    )

"""Nested-list helpers: index, flatten, reshape and stack row-major nested lists (no numpy)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

Nested = list


def at(nested: Nested, index: tuple[int, ...]) -> Nested:
    """nested[i0][i1]... for a tuple of leading indices."""
    for i in index:
        nested = nested[i]
    return nested


def reshape(flat: list, shape: tuple[int, ...]) -> Nested:
    """Nest a flat row-major list into lists of `shape` (the first axis is implied)."""
    for size in reversed(shape[1:]):
        flat = [flat[i : i + size] for i in range(0, len(flat), size)]
    return flat


def stack(blocks: list, lead: tuple[int, ...]) -> Nested:
    """Nest a row-major list of per-index blocks into the leading dims `lead`."""
    return reshape(blocks, lead) if lead else blocks[0]


def tolist(value: object) -> Nested:
    """Nested lists from a list or from any array with .tolist()."""
    convert = getattr(value, "tolist", None)
    return convert() if callable(convert) else value


def flat(nested: object) -> list:
    """The leaves of nested lists (or of an array) in row-major order."""
    level = [tolist(nested)]
    while level and isinstance(level[0], (list, tuple)):
        level = [y for row in level for y in row]
    return level


def map_leaves(f: Callable[[object], object], nested: object) -> object:
    """f applied to every leaf of nested lists, the nesting kept."""
    if isinstance(nested, list):
        return [map_leaves(f, x) for x in nested]
    return f(nested)


def rows(nested: Nested, lead: tuple[int, ...]) -> list[list]:
    """Every row of a (..., n, width) nested list, leading indices in row-major order."""
    return [row for index in product(*map(range, lead)) for row in at(nested, index)]


def unrows(all_rows: list, lead: tuple[int, ...], n: int) -> Nested:
    """Undo `rows`: n rows per leading index, nested back into the leading dims."""
    return stack([all_rows[i : i + n] for i in range(0, len(all_rows), n)], lead)


__all__ = ["at", "flat", "map_leaves", "reshape", "rows", "stack", "tolist", "unrows"]

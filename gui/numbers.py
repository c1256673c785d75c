"""The window's number formats: one module, so a cell, a sentence and a table agree.

Every format spells -inf, inf and nan out and writes whole numbers as such (below a million);
they differ only in how many digits the room they are printed in allows.
"""

from __future__ import annotations

import math

WHOLE_LIMIT = 1e6  # whole numbers below this print without a decimal point


def _plain(v: float) -> str | None:
    """'-inf', 'inf', 'nan' or a whole number; None for any other number."""
    if not math.isfinite(v):
        return str(v)
    if v == int(v) and abs(v) < WHOLE_LIMIT:
        return str(int(v))
    return None


def cell(v: float) -> str:
    """A heatmap cell: 2 decimals, 3 significant digits from 10 up (a cell is narrow)."""
    return _plain(v) or (f"{v:.2f}" if abs(v) < 10 else f"{v:.3g}")


def prose(v: float) -> str:
    """A number in a sentence: 2 decimals for everyday sizes, 3 digits for tiny or huge ones."""
    return _plain(v) or (f"{v:.2f}" if 0.01 <= abs(v) < 1000 else f"{v:.3g}")


def weight(v: float) -> str:
    """A weight always with two decimals ('1.00' beside '0.24'), so the numbers compare."""
    return f"{v:.2f}"


def error(v: float) -> str:
    """An error or a bound in a table column: 2 decimals in exponent form, '-' for none."""
    return "-" if math.isnan(v) else f"{v:.2e}"


def significant(v: float, digits: int = 3) -> str:
    """`digits` significant digits, Python's 'g' format (a value to read, not to compare)."""
    return f"{v:.{digits}g}"


def count(n: int, noun: str) -> str:
    """'1 token', '6 tokens': a count with its noun, plural unless it is one."""
    return f"{n} {noun}{'' if n == 1 else 's'}"

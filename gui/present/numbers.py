"""The window's number formats: one module, so a cell, a sentence and a table agree.

Every format spells -inf, inf and nan out and writes whole numbers as such (below a million);
they differ only in how many digits the room they are printed in allows.
"""

from __future__ import annotations

import math

WHOLE_LIMIT = 1e6  # whole numbers below this print without a decimal point
COMPACT_WIDTH = 4  # characters in a compact cell number ('-.51', '-3e4')


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


def compact(v: float) -> str:
    """A cell too narrow for `cell`: no leading zero, 2 digits ('-.51', '.07', '1.2', '-3e4').

    At most COMPACT_WIDTH characters for |v| below 1e10 (6 beyond); read back with float(), it is
    within half a unit of its last digit: 0.005 below 0.1, 5% up to 1e3 or so, then a 1-digit
    exponent; whole numbers that fit are exact.
    """
    whole = _plain(v)
    if whole is not None and len(whole) <= COMPACT_WIDTH:
        return whole
    if abs(v) < 0.1:  # 2 decimals as in `cell` ('.07', '-.00'): 2 digits would be wider
        return _drop_zero(f"{v:.2f}")
    text = _two_digits(v)
    return text if len(text) <= COMPACT_WIDTH else _one_digit_exponent(v)


def _two_digits(v: float) -> str:
    """v (not 0) to 2 significant digits in fixed point ('.51', '1.2', '120')."""
    rounded = float(f"{v:.1e}")  # 2 significant digits; 0.996 becomes 1.0
    power = math.floor(math.log10(abs(rounded)))
    return _drop_zero(f"{rounded:.{max(0, 1 - power)}f}")


def _one_digit_exponent(v: float) -> str:
    """v to 1 significant digit with a bare exponent ('3e4', '-1e20')."""
    mantissa, power = f"{v:.0e}".split("e")
    return f"{mantissa}e{int(power)}"


def _drop_zero(text: str) -> str:
    """'0.51' -> '.51', '-0.51' -> '-.51': the leading zero is a character a cell cannot spare."""
    if text.startswith("0."):
        return text[1:]
    return "-" + text[2:] if text.startswith("-0.") else text


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

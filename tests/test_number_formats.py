"""How the window writes a number: in a cell, in a sentence, a weight, an error."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from gui.present import numbers


def test_the_window_writes_numbers_one_way_per_room():
    """A cell is narrow (3 digits from 10 up), a sentence keeps 2 decimals up to 1000."""
    assert [numbers.cell(v) for v in (12.3456, 0.4567, 3.0, -math.inf, 2.5e-5)] == [
        "12.3", "0.46", "3", "-inf", "0.00",
    ]  # fmt: skip
    assert [numbers.prose(v) for v in (12.3456, 0.4567, 3.0, math.nan, 2.5e-5)] == [
        "12.35", "0.46", "3", "nan", "2.5e-05",
    ]  # fmt: skip
    assert (numbers.weight(1.0), numbers.error(math.nan), numbers.error(3.14159e-7)) == (
        "1.00", "-", "3.14e-07",
    )  # fmt: skip
    assert numbers.significant(3.14159, 4) == "3.142"


def _half_unit(text: str) -> float:
    """Half a unit of the last significant digit written (at least the 2nd of a whole number)."""
    mantissa, _, power = text.partition("e")
    digits = mantissa.lstrip("-")
    if "." in digits:
        unit = 10.0 ** -len(digits.split(".")[1])
    else:
        unit = 10.0 ** max(0, len(digits) - max(2, len(digits.rstrip("0"))))
    return 0.5 * unit * 10.0 ** int(power or 0)


def test_a_compact_cell_number_drops_the_leading_zero():
    """'-.51' where '-0.51' does not fit; whole numbers stay exact; inf and nan spelt out."""
    values = (-0.51, 0.0712, 1.23, 12.3, -31234.0, 0.003, -0.003, 16.0, -math.inf, math.nan)
    assert [numbers.compact(v) for v in values] == [
        "-.51", ".07", "1.2", "12", "-3e4", ".00", "-.00", "16", "-inf", "nan",
    ]  # fmt: skip


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_compact_cell_number_reads_back_within_its_last_digit(v):
    """At most 4 characters below 1e10 (6 beyond), sign kept, within half its last digit."""
    text = numbers.compact(v)
    assert len(text) <= (numbers.COMPACT_WIDTH if abs(v) < 1e10 else 6), text
    back = float(text)
    if not math.isfinite(v):
        assert text == str(v)
        return
    assert abs(back - v) <= _half_unit(text) * (1 + 1e-9), text
    if v != 0:
        assert text.startswith("-") == (v < 0), text
    if 0.1 <= abs(v) < 100:  # two significant digits: within 5%
        assert abs(back - v) <= 0.05 * abs(v), text

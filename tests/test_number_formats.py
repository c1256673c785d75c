"""How the window writes a number: in a cell, in a sentence, a weight, an error."""

from __future__ import annotations

import math

from gui import numbers


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

"""Round a Python float to float32, float16 or bfloat16 in plain Python (no NumPy).

One rule for every format: keep `digits` significant bits, ties to even, with the spacing of the
smallest normal exponent below it (subnormals), and infinity past the largest finite value.
This is IEEE 754's round-to-nearest; the tests compare it with struct's float16/float32
packing, NumPy's float16 and torch's bfloat16 conversions.
"""

from __future__ import annotations

import math

# dtype: (significant bits, frexp exponent of the smallest normal, largest finite value)
FORMATS = {
    "float32": (24, -125, (2.0 - 2.0**-23) * 2.0**127),
    "float16": (11, -13, 65504.0),
    "bfloat16": (8, -125, (2.0 - 2.0**-7) * 2.0**127),
}
DTYPES = ("float64", *FORMATS)


def round_to(x: float, dtype: str) -> float:
    """x rounded to the nearest `dtype` value (ties to even); inf past the largest finite one."""
    if dtype == "float64":
        return float(x)
    if dtype not in FORMATS:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, found {dtype!r}")
    x = float(x)
    if x == 0.0 or not math.isfinite(x):
        return x
    digits, smallest, largest = FORMATS[dtype]
    exponent = max(math.frexp(x)[1], smallest)  # |x| = m 2^e with m in [0.5, 1)
    spacing = math.ldexp(1.0, exponent - digits)  # the distance between neighbours near x
    rounded = round(x / spacing) * spacing  # x / spacing is exact; round() ties to even
    return math.copysign(math.inf, x) if abs(rounded) > largest else math.copysign(rounded, x)


def exp_in(x: float, dtype: str) -> float:
    """exp(x) rounded to `dtype`: inf where it overflows (math.exp raises instead)."""
    try:
        return round_to(math.exp(x), dtype)
    except OverflowError:
        return math.inf

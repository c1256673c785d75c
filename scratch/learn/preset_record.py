"""A worked example's record: its inputs, its scale, and what its notebook printed.

- A `Preset` holds the notebook's inputs as nested lists of floats: `x` (query side), `key` and
  `value` (None when they are `x`), `w_q`, `w_k`, `w_v` (None when the notebook has no
  projections, so q = x, k = key, v = value), and `scale`, the factor the scores are
  multiplied by: the notebook's 1/sqrt(d_k) as written (1.0 where it does not scale).
  `key_tokens` is None when the keys are the tokens themselves.
- `printed[step]` is a `Printed`: what the notebook showed, as nested lists of floats, with
  the cell, the expression, the dtype it computed in, and how it was printed. `decimals` is
  the count of digits after the point (of the mantissa when `sci` is true); None means the
  number was printed in full (whole numbers, or a float64 in Python's round-trip repr). A
  value reproduces a print when it is within half a unit of the last printed digit (plus the
  rounding of the notebook's `dtype`); tests/test_presets.py checks exactly that.
  `row` says which row of the step the print is, when the notebook printed one row only.
  Keys are step names of the trace (`x`, `w_k`, `q`, `k`, `v`, `scores`, `weights`, `output`)
  or, for anything else the notebook printed, an extra key explained in `Printed.expr`.
- `corrected[step]` holds the numbers a notebook should have printed where its code slips;
  they were computed once with NumPy in float64 when the preset was written.
- `preset.trace()` runs `scratch.trace_attention` on the preset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scratch.trace.forward import Trace

Matrix = list[list[float]]


@dataclass(frozen=True)
class Printed:
    """One thing a notebook printed, with how precisely it was printed."""

    value: object  # float, list[float] or list[list[float]], as printed
    decimals: int | None  # digits after the point (mantissa digits if sci); None = in full
    cell: str  # e.g. "In[39]"
    expr: str  # the notebook expression whose value this is
    dtype: str = "float32"  # what the notebook computed in: "float32", "float64", "int64"
    sci: bool = False  # printed as mantissa e exponent
    row: int | None = None  # the print is row `row` of the step's matrix


@dataclass(frozen=True)
class Preset:
    """A worked example: inputs, the notebook's scale, and the numbers it printed."""

    name: str
    title: str
    source: str
    tokens: tuple[str, ...]
    x: Matrix
    scale: float
    key_tokens: tuple[str, ...] | None = None
    key: Matrix | None = None
    value: Matrix | None = None
    w_q: Matrix | None = None
    w_k: Matrix | None = None
    w_v: Matrix | None = None
    printed: dict[str, Printed] = field(default_factory=dict)
    corrected: dict[str, Printed] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def kwargs(self) -> dict:
        """Keyword arguments for `scratch.trace_attention` (inputs, tokens and scale)."""
        return {
            "x": self.x,
            "key": self.key,
            "value": self.value,
            "w_q": self.w_q,
            "w_k": self.w_k,
            "w_v": self.w_v,
            "tokens": list(self.tokens),
            "key_tokens": None if self.key_tokens is None else list(self.key_tokens),
            "scale": self.scale,
        }

    def slip_notes(self) -> list[str]:
        """One line per slip the notebook printed (its `slip_*` entries): the cell, what it
        computed and the numbers it printed, to set beside the trace's correct ones."""
        return [
            f"Slip printed by the notebook ({p.cell}): {p.expr} = {_printed_text(p)}"
            for key, p in self.printed.items()
            if key.startswith("slip")
        ]

    def trace(self) -> Trace:
        """Run the ground-truth `scratch.trace_attention` on this preset."""
        from scratch.trace.forward import (
            trace_attention,  # local: keeps this module importable on its own
        )

        return trace_attention(**self.kwargs())


def _printed_text(p: Printed) -> str:
    """A printed value as the notebook showed it: its decimals (mantissa digits when sci)."""

    def one(x: float) -> str:
        if p.decimals is None:
            return f"{x:g}"
        return f"{x:.{p.decimals}e}" if p.sci else f"{x:.{p.decimals}f}"

    def text(v: object) -> str:
        return "[" + ", ".join(text(x) for x in v) + "]" if isinstance(v, list) else one(v)

    return text(p.value)


def floats(rows) -> Matrix:
    """Copy a nested list of numbers as floats."""
    return [[float(v) for v in row] for row in rows]


def notebook_source(seed: str, cells: str) -> str:
    """Source string: the seed file and the cells the preset comes from."""
    return f"seed {seed[:3]} ({seed}.txt), {cells}"


__all__ = ["Matrix", "Preset", "Printed", "floats", "notebook_source"]

"""Explain one cell of a trace for the window: scratch.explain's words, read from a few rows.

scratch.explain reads an array step one row at a time (`scratch.trace_types.Rows`), so one hover
of a NumPy or torch trace at 4096 tokens turns a few rows of 4096 numbers into Python floats,
not 16.7 M cells.
"""

from __future__ import annotations

import scratch


def explain(trace: object, step: str, index: tuple[int, ...]) -> object:
    """scratch.explain of one cell (it reads only the rows it needs)."""
    return scratch.explain(trace, step, tuple(index))

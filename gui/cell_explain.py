"""Explain one cell of a trace whose steps are arrays, without turning whole steps into lists.

scratch.explain reads a step as nested lists (`Step.tolist()`) and indexes the rows it needs.
For a NumPy or torch trace at 4096 tokens that turned 16.7 M cells into Python floats per hover
(seconds). Here each array step is wrapped in `Rows`: indexing it converts only the row asked
for, so one hover reads a few rows of 4096 numbers. The numbers are the trace's own; the text is
scratch.explain's. Nested-list traces (the ground truth) are explained as they are.
"""

from __future__ import annotations

import dataclasses

import scratch


class Rows:
    """An array read as nested lists one row at a time: `rows[i]` is a list of floats for a
    matrix, another Rows for a higher-dimensional array."""

    __slots__ = ("_array",)

    def __init__(self, array: object):
        self._array = array

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape (scratch.Step.shape reads it)."""
        return tuple(int(n) for n in self._array.shape)

    def tolist(self) -> Rows:
        """Itself: scratch.Step.tolist() asks for nested lists, and rows are made when read."""
        return self

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, i: int) -> object:
        part = self._array[i]
        if getattr(part, "ndim", 0) >= 2:
            return Rows(part)
        return part.tolist()  # a row: a list of floats; one entry: a float

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def lazy(trace: object) -> object:
    """The same trace with every array step read row by row (nested-list steps as they are)."""
    steps = tuple(
        dataclasses.replace(step, value=Rows(step.value))
        if hasattr(step.value, "shape") and hasattr(step.value, "tolist")
        else step
        for step in trace.steps
    )
    return dataclasses.replace(trace, steps=steps)


def explain(trace: object, step: str, index: tuple[int, ...]) -> object:
    """scratch.explain of one cell, reading only the rows it needs (see `lazy`)."""
    return scratch.explain(lazy(trace), step, tuple(index))

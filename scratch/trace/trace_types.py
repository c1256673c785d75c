"""What a trace is: its steps (`Step`), the whole (`Trace`), the typed record of what made it
(`Source`, and the call's `Options`), and `MayAttend`, a may-attend grid kept as an array; and
one entry of a step as the registry's explanations read it (`Cell`) with its `Explanation`.

No computation here: `scratch.trace.forward` lays a trace out and adds the backward steps; it builds
these values, and every reader (explain, compare, the window) reads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from scratch.core.options import Options


@dataclass(frozen=True)
class Source:
    """Who computed a trace and how its call was given (the words a trace needs beyond Options).

    backend, dtype and kernel name what ran; `mask` is the mask as the trace names it (none,
    causal, bool or float: `scratch.trace.mask_words`); `cross` says key and value came from their
    own input; `biases` names the biases given (b_q ... b_o)."""

    backend: str = "scratch"
    dtype: str = "float64"
    kernel: str = "explicit"
    mask: str = "none"
    cross: bool = False
    biases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One named matrix of the computation: `name`, `formula`, `value`, `note`, `axes`.

    Attributes:
        name: the step's name (x, q, k, v, scores, scaled, masked, weights, output, ...).
        formula: how it is computed, in symbols.
        value: nested lists for the ground truth; a backend may store its own array.
        note: a line on what it is.
        axes: one name per axis, e.g. ("head", "query", "key").
    """

    name: str
    formula: str
    value: object  # nested lists for the ground truth; a backend may store its own array
    note: str
    axes: tuple[str, ...]

    def tolist(self) -> list:
        """The value as nested lists of floats, whatever array type holds it."""
        tolist = getattr(self.value, "tolist", None)
        return tolist() if callable(tolist) else self.value

    def rows(self) -> object:
        """The value read as nested lists, an array's rows read only when asked.

        Nested lists as they are, an array or tensor one row at a time as it is read (`Rows`:
        one cell of a 4096-token step reads a few rows).
        """
        is_array = hasattr(self.value, "shape") and callable(getattr(self.value, "tolist", None))
        return Rows(self.value) if is_array else self.value

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the value, one entry per axis."""
        shape = getattr(self.value, "shape", None)
        if shape is not None:
            return tuple(int(n) for n in shape)
        dims, level = [], self.value
        for _ in self.axes:
            dims.append(len(level))
            level = level[0]
        return tuple(dims)


@dataclass(frozen=True)
class Trace:
    """The ordered steps of one attention computation plus the labels needed to show them.

    Attributes:
        steps: the Steps in order; `trace[name]` finds one.
        tokens: the query-side labels, L of them.
        key_tokens: the key-side labels, S of them.
        scale: the scale the scores were multiplied by.
        num_heads: H.
        num_kv_heads: Hkv.
        allowed: the (L, S) "may attend" grid; None: no mask.
        options: the Options the call used.
        source: the backend, dtype, kernel and mask kind that made it.
    """

    steps: tuple[Step, ...]
    tokens: tuple[str, ...]  # query-side labels, len L
    key_tokens: tuple[str, ...]  # key-side labels, len S
    scale: float
    num_heads: int = 1
    num_kv_heads: int = 1
    allowed: Sequence | None = None  # (L, S) "may attend" grid (tuples or MayAttend); None: no mask
    options: Options = field(default_factory=Options)  # the Options the call used
    source: Source = field(default_factory=Source)  # backend, dtype, kernel, mask kind, ...

    def __getitem__(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step {name!r} in this trace; steps: {', '.join(self.names())}")

    def __contains__(self, name: object) -> bool:
        return any(step.name == name for step in self.steps)

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def names(self) -> list[str]:
        """Step names in order."""
        return [step.name for step in self.steps]

    def axis_labels(self, axis: str, n: int, prefix: str = "") -> list[str]:
        """Labels of n entries along one axis: the tokens, or prefix + index.

        Args:
            axis: the axis's name ("query" and "key" take the tokens when there are n of them).
            n: the axis's length.
            prefix: what goes before each index otherwise (the terminal's c0.., the notebook's 0..).
        """
        if axis == "query" and len(self.tokens) == n:
            return list(self.tokens)
        if axis == "key" and len(self.key_tokens) == n:
            return list(self.key_tokens)
        return [f"{prefix}{i}" for i in range(n)]

    def described(self) -> dict:
        """The options as words and numbers (the trace JSON's "options", format version 1).

        A variant's rule in words is under "variant" when the call had one.
        """
        source, options = self.source, self.options
        variant = {} if options.variant is None else {"variant": options.variant.rule()}
        return variant | {
            "is_causal": options.is_causal,
            "mask": source.mask,
            "masked_rows": options.masked_rows,
            "scale_given": options.scale is not None,
            "backend": source.backend,
            "dtype": source.dtype,
            "kernel": source.kernel,
            "cross": source.cross,
            "dropout_p": options.dropout_p,
        }

    def _repr_html_(self) -> str:
        """Jupyter shows a trace as coloured tables, one per step (scratch.trace.html_view)."""
        from scratch.trace.html_view import trace_html

        return trace_html(self)

    def head_average(self, name: str) -> object:
        """Step `name` averaged over its head axis, in float64 (NaN where a head has NaN).

        Args:
            name: the step's name, one with a head axis first, e.g. "weights" (H, L, S).

        Returns:
            The mean (L, S) as the step's type holds it (a tensor, an array or nested lists).
        """
        step = self[name]
        if not step.axes or step.axes[0] != "head":
            raise ValueError(f"name: step {name!r} has no head axis (its axes: {step.axes})")
        value = step.value
        if hasattr(value, "detach"):  # a torch tensor: averaged where it lives
            return value.detach().double().mean(dim=0)
        if hasattr(value, "astype"):  # a NumPy array: (H, ...) -> (...)
            return value.astype("float64", copy=False).mean(axis=0)
        return _mean_over_heads(value)


def _mean_over_heads(heads: list) -> object:
    """The elementwise mean of equally shaped nested lists (mean([inf, -inf]) is NaN)."""
    if isinstance(heads[0], (list, tuple)):
        return [_mean_over_heads([h[i] for h in heads]) for i in range(len(heads[0]))]
    values = [float(v) for v in heads]
    if any(math.isnan(v) for v in values) or {math.inf, -math.inf} <= set(values):
        return math.nan
    if any(math.isinf(v) for v in values):
        return math.copysign(math.inf, sum(values))
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # finite values whose exact sum passes float64's largest: +-inf
        return sum(values) / len(values)


class Rows(Sequence):
    """An array read as nested lists one row at a time: `rows[i]` is a list of floats for a
    matrix, another Rows for a higher-dimensional array (turning a 4096 x 4096 step into lists
    took seconds per hover)."""

    __slots__ = ("_array",)

    def __init__(self, array: object):
        self._array = array  # a NumPy array or a torch tensor

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        part = self._array[i]
        if getattr(part, "ndim", 0) >= 2:
            return Rows(part)
        return part.tolist()  # a row: a list of floats; one entry: a float

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class MayAttend(Rows):
    """An (L, S) may-attend grid kept as the backend's bool array or tensor, read as nested
    tuples of bools (a row is made when it is read).

    4096 x 4096 tuples of bools were 16.7 M references in 4096 new tuples per recompute: making
    them held the GIL in long calls, and the cyclic collector's first pass over them (when the
    window turns it back on after a job) stalled the event loop 100-140 ms after every masked
    recompute at 4096 tokens. Equal to a tuple grid with the same cells."""

    __slots__ = ()

    def __getitem__(self, i):
        row = super().__getitem__(i)
        return row if isinstance(i, slice) else tuple(row)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MayAttend):
            same_shape = tuple(self._array.shape) == tuple(other._array.shape)
            return same_shape and bool((self._array == other._array).all())
        if isinstance(other, tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # equal to tuples, whose hash it cannot share cheaply

    def __repr__(self) -> str:
        rows, cols = tuple(self._array.shape)
        return f"MayAttend({rows} x {cols} bools)"


@dataclass(frozen=True)
class Explanation:
    """The text shown on hover and the input rows/columns to highlight.

    Attributes:
        text: the entry's arithmetic in words.
        sources: (step, row, column) of each input cell it reads.
    """

    text: str
    sources: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class Cell:
    """One entry of a step: its value, where it sits (h, i, j), and what the step reads."""

    trace: object  # a scratch.Trace
    step: str
    value: float
    h: int  # head (0 for a step with no head axis)
    i: int  # row
    j: int  # column
    heads: bool  # whether the step has a head axis
    reads: tuple[str, ...]  # the steps this one reads, from the registry
    bias: str  # the bias the call added to this step (b_q, b_o), or ''
    index: tuple[int, ...] = ()  # the whole index (steps with one axis besides the head)

    @property
    def hs(self) -> str:
        """'[h]' for a step with a head axis, else ''."""
        return f"[{self.h}]" if self.heads else ""

    @property
    def label(self) -> str:
        """'scores[0][1]' or 'scores[1][0][1]' (or 'row_dot[2]': the index as given)."""
        if self.index:
            return self.step + "".join(f"[{n}]" for n in self.index)
        return f"{self.step}{self.hs}[{self.i}][{self.j}]"

    @property
    def kv_head(self) -> int:
        """The key/value head that query head h reads."""
        return self.kv_of(self.h)

    def kv_of(self, h: int) -> int:
        """The key/value head that query head `h` reads (GQA: h // group)."""
        t = self.trace
        return h // (t.num_heads // t.num_kv_heads)

    def group(self, g: int) -> list[int]:
        """The query heads that read key/value head g."""
        return [h for h in range(self.trace.num_heads) if self.kv_of(h) == g]

    def rows(self, name: str) -> list:
        """Step `name` of the trace as nested lists (an array's rows read as they are asked)."""
        return self.trace[name].rows()

    def head(self, name: str, h: int | None = None) -> list:
        """Step `name` in head h (this cell's by default) when it has a head axis, else whole."""
        value = self.rows(name)
        has_heads = self.trace[name].axes[:1] == ("head",)
        return value[self.h if h is None else h] if has_heads else value

    def row(self, name: str, i: int | None = None, h: int | None = None) -> list:
        """Row i of step `name` (this cell's row and head by default)."""
        return self.head(name, h)[self.i if i is None else i]

    @property
    def pieces(self) -> object:
        """The trace's variant taken apart (scratch.core.variant_steps.Pieces: RoPE, sinks, rule),
        or
        None for a trace without one."""
        from scratch.core.variant_steps import (
            pieces,  # here: variant_steps reads the head kernel's modules
        )

        options = self.trace.options
        return None if options.variant is None else pieces(options)


__all__ = ["Cell", "Explanation", "MayAttend", "Rows", "Source", "Step", "Trace"]

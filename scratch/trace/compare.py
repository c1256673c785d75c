"""Compare a backend's trace with the ground truth's, step by step, each against its own bound.

Each step's bound is the rounding error of that step alone, with the differences already
measured on the steps it reads PROPAGATED through it (the choice the issue leaves open): the
scores of a backend are judged from the backend's own rounded q and k, plus how far those q and k
already are from the ground truth's. So one wrong step fails by itself, and the first failing
step is where the mistake is. Which steps a step reads and how its bound propagates come from
its entry in the registry of steps (`scratch.trace.steps`, functions in
`scratch.bounds.step_bounds`).
numpy is used when installed; otherwise plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratch.bounds.tolerance import (
    ACCUMULATE,
    EXP_ULPS,
    SMALLEST_SUBNORMAL,
    UNIT_ROUNDOFF,
    as_float64,
    check_dtype,
    gamma,
)
from scratch.ops.nested import flat, map_leaves
from scratch.trace.forward import Trace
from scratch.trace.steps import call_of, spec_for

LARGEST = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38,
           "float16": 65504.0, "bfloat16": 3.3895313892515355e38}  # fmt: skip


@dataclass(frozen=True)
class StepCheck:
    """One step compared: max |difference|, the bound where it binds most, verdict, |diff| grid.

    Attributes:
        name: the step's name.
        max_abs_diff: the largest |difference|.
        bound: the per-element bound at the largest |difference| when the step passes, and at
            the worst ratio when it fails, so `max_abs_diff` vs `bound` reads like the verdict.
        ok: the verdict (ratio <= 1).
        diff: the |difference| grid, the step's shape, or None.
        ratio: the largest |difference| / bound over elements.
        bounds: the per-element bound grid, or None.
        message: the verdict in words.
    """

    name: str
    max_abs_diff: float
    bound: float
    ok: bool
    diff: list | None
    ratio: float = 0.0
    bounds: list | None = None
    message: str = ""


def compare_traces(trace: object, reference: object, *, dtype: object = None) -> list:
    """StepCheck for every step both traces have, in the trace's order (shapes, then values).

    Args:
        trace: a backend's Trace.
        reference: the ground truth's Trace of the same call.
        dtype: the dtype the bounds are for; None: the trace's own.

    Returns:
        One StepCheck per step.
    """
    for name, t in (("trace", trace), ("reference", reference)):
        if not isinstance(t, Trace):
            raise TypeError(f"{name}: expected a scratch.Trace, found {type(t).__name__}")
    dtype = check_dtype(dtype if dtype is not None else trace.source.dtype)
    ops = _ops()
    run = _Comparison(ops, trace, reference, dtype)
    return [run.check(step.name) for step in trace if step.name in reference]


def _ops() -> object:
    """numpy-backed array operations when numpy imports, else nested-list ones."""
    try:
        import numpy as np
    except ImportError:
        return _ListOps()
    return _NumpyOps(np)


class _Comparison:
    """The values, differences and bounds of one trace comparison, filled in step order."""

    def __init__(self, ops, trace, reference, dtype: str):
        self.ops, self.trace, self.reference, self.dtype = ops, trace, reference, dtype
        self.u_acc = UNIT_ROUNDOFF[ACCUMULATE[dtype]]
        self.u_store = UNIT_ROUNDOFF[dtype]  # every stored step may be rounded to dtype
        self.floor = SMALLEST_SUBNORMAL[dtype] + SMALLEST_SUBNORMAL[ACCUMULATE[dtype]]
        self.H, self.Hkv = trace.num_heads, trace.num_kv_heads
        self.call = call_of(trace)
        self.scale = abs(float(trace.scale))
        self.got, self.want, self.diff = {}, {}, {}
        self.scores_cache = {}

    # -- bookkeeping

    def values(self, name: str) -> tuple[object, object, object]:
        """(trace value, reference value, |difference|) of a step already checked."""
        if name not in self.diff:
            raise KeyError(f"step {name!r} could not be compared")
        return self.got[name], self.want[name], self.diff[name]

    def chain(self, b0, want, roundings: int, n_truth: float, size):
        """b0 plus `roundings` roundings to storage plus the ground truth's own error."""
        ops, us = self.ops, (1 + self.u_store) ** roundings - 1
        truth = gamma(n_truth, UNIT_ROUNDOFF["float64"])
        return ops.ew(
            lambda b, w, s: b + us * (abs(w) + b) + truth * s + self.floor, b0, want, size
        )

    def check(self, name: str) -> StepCheck:
        """Compare one step: shapes first, then values against the step's bound."""
        step, ref = self.trace[name], self.reference[name]
        if tuple(step.shape) != tuple(ref.shape):
            message = f"{name}: shape {tuple(step.shape)}, expected {tuple(ref.shape)}"
            return StepCheck(name, math.inf, 0.0, False, None, math.inf, message=message)
        ops = self.ops
        got, want = ops.array(step.value), ops.array(ref.value)
        self.got[name], self.want[name] = got, want
        diff = ops.absdiff(got, want)
        self.diff[name] = diff
        try:
            bounds = self.bound(name)
        except KeyError as exc:  # a step it reads is missing or had the wrong shape, or no entry
            message = f"{name}: no bound, {exc.args[0]}"
            return StepCheck(name, ops.maxabs(diff), 0.0, False, ops.tolist(diff), math.inf,
                             message=message)  # fmt: skip
        return _judge(ops, name, got, want, diff, bounds, self.dtype)

    def bound(self, name: str):
        """Per-element bound of one step: its registry entry's bound, head by head."""
        spec = spec_for(self.call, name)
        reads = spec.reads(self.call)
        if spec.axes_for(self.call)[0] == "head":
            return self.ops.stack([spec.bound(self, name, reads, h) for h in range(self.H)])
        return spec.bound(self, name, reads, 0)

    def head_slices(self, h: int, name: str) -> tuple[object, object, object]:
        """Columns of q (query head h) or k/v (its kv head) for head h: (got, want, diff)."""
        ops = self.ops
        got, want, diff = self.values(name)
        query = name in ("q", "q_rotated")  # a query head's columns, else its kv head's
        width = ops.shape(got)[-1] // (self.H if query else self.Hkv)
        g = h if query else h // (self.H // self.Hkv)
        return tuple(ops.cols(m, g * width, (g + 1) * width) for m in (got, want, diff))

    def head(self, name: str, h: int) -> tuple[object, object, object]:
        """Head h of a step with an optional leading head axis: (got, want, diff)."""
        got, want, diff = self.values(name)
        if len(self.ops.shape(got)) == 3:
            return got[h], want[h], diff[h]
        return got, want, diff


def step_check(name: str, found: object, truth: object, bound: object, dtype: str) -> StepCheck:
    """One step's StepCheck: the verdict, numbers and message compare_traces gives a step.

    Args:
        name: the step's name, for the message.
        found: the step's values (nested lists or an array).
        truth: the ground truth's, the same shape.
        bound: the per-element bound, the same shape.
        dtype: the dtype's name, for the message.

    Returns:
        The StepCheck.
    """
    ops = _ops()
    got, want = ops.array(found), ops.array(truth)
    return _judge(ops, name, got, want, ops.absdiff(got, want), ops.array(bound), dtype)


def _judge(ops, name: str, got, want, diff, bounds, dtype: str) -> StepCheck:
    """The StepCheck of |got - want| = `diff` against `bounds` (none where the truth is not
    finite: there only equality passes)."""
    bounds = ops.where(ops.finite(want), bounds, 0.0)
    ratio, worst_bound = ops.worst(diff, bounds)
    biggest = ops.maxabs(diff)
    ok = ratio <= 1.0
    message = (
        ""
        if ok
        else (
            f"{name}: max |difference| {biggest:.3g} exceeds the bound "
            f"({ratio:.3g} x the bound at its worst element)"
        )
    )
    lost = ops.ew(lambda g, w: (1.0 - g) * w, ops.finite(got), ops.finite(want))
    if not ok and ops.maxabs(lost) > 0:  # inf/NaN where the truth is finite: out of range
        message += (
            f"; {dtype} gives inf or NaN where the ground truth is finite: the values "
            f"outgrew {dtype} (largest {LARGEST[dtype]:.6g})"
        )
    return StepCheck(
        name, biggest, worst_bound, ok, ops.tolist(diff), ratio, ops.tolist(bounds), message
    )


class _NumpyOps:
    """Array operations on numpy float64 arrays."""

    def __init__(self, np):
        self.np = np

    def array(self, value):
        """A step value (nested lists, numpy array or tensor) as float64 numpy."""
        return as_float64(self.np, value)

    def absdiff(self, a, b):
        """|a - b|, 0 where both are the same inf or both NaN, inf where only one is special."""
        np = self.np
        with np.errstate(invalid="ignore"):
            d = np.abs(a - b)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        return np.where(same, 0.0, np.where(np.isnan(d), np.inf, d))

    def ew(self, f, *arrays):
        """Apply an arithmetic f elementwise."""
        with self.np.errstate(all="ignore"):
            return f(*arrays)

    def where(self, cond, a, b):
        """a where cond is nonzero, else b."""
        return self.np.where(self.np.asarray(cond) != 0, a, b)

    def finite(self, a):
        return self.np.isfinite(a).astype(float)

    def positive(self, a):
        return (a > 0).astype(float)

    def finite_abs(self, a):
        return self.np.where(self.np.isfinite(a), self.np.abs(a), 0.0)

    def nan_to_zero(self, a):
        return self.np.where(self.np.isnan(a), 0.0, a)

    def maximum(self, a, b):
        return self.np.maximum(a, b)

    def abs(self, a):
        return self.np.abs(a)

    def add(self, a, b):
        return a + b

    def mm(self, a, b):
        with self.np.errstate(all="ignore"):
            return a @ b

    def T(self, a):
        return a.T

    def cols(self, a, start, stop):
        return a[..., start:stop]

    def shape(self, a):
        return a.shape

    def rowmax(self, a):
        return [float(x) for x in self.np.max(a, axis=-1)]

    def rows(self, column, width):
        """A (len(column), width) matrix whose row i is column[i] everywhere."""
        return self.np.repeat(self.np.asarray(column, dtype=float)[:, None], width, axis=1)

    def stack(self, blocks):
        return self.np.stack(blocks)

    def concat_heads(self, a):
        """(H, L, dv) -> (L, H * dv), heads side by side."""
        return self.np.concatenate(list(a), axis=-1)

    def maxabs(self, a):
        return float(self.np.max(self.np.abs(a))) if a.size else 0.0

    def worst(self, diff, bounds):
        """(max diff / bound, the bound shown: at the worst ratio on failure, else at max diff)."""
        np = self.np
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(diff == 0, 0.0, diff / bounds)
        i = np.unravel_index(int(np.argmax(r)), r.shape)
        j = np.unravel_index(int(np.argmax(diff)), diff.shape)
        return float(r[i]), float(bounds[i] if r[i] > 1.0 else bounds[j])

    def tolist(self, a):
        return a.tolist()


class _ListOps:
    """The same operations on nested lists of floats (2-D and 3-D), for installs without numpy."""

    def array(self, value):
        value = value.tolist() if hasattr(value, "tolist") else value
        return map_leaves(float, value)

    def absdiff(self, a, b):
        def one(x, y):
            if x == y or (math.isnan(x) and math.isnan(y)):
                return 0.0
            d = abs(x - y)
            return math.inf if math.isnan(d) else d

        return self.ew(one, a, b)

    def ew(self, f, *arrays):
        first = arrays[0]
        if isinstance(first, list):
            return [self.ew(f, *parts) for parts in zip(*arrays, strict=True)]
        return f(*arrays)

    def where(self, cond, a, b):
        full = map_leaves(lambda _: b, cond) if not isinstance(b, list) else b
        return self.ew(lambda c, x, y: x if c else y, cond, a, full)

    def finite(self, a):
        return map_leaves(lambda x: float(math.isfinite(x)), a)

    def positive(self, a):
        return map_leaves(lambda x: float(x > 0), a)

    def finite_abs(self, a):
        return map_leaves(lambda x: abs(x) if math.isfinite(x) else 0.0, a)

    def nan_to_zero(self, a):
        return map_leaves(lambda x: 0.0 if math.isnan(x) else x, a)

    def maximum(self, a, b):
        return self.ew(max, a, b)

    def abs(self, a):
        return map_leaves(abs, a)

    def add(self, a, b):
        return self.ew(lambda x, y: x + y, a, b)

    def mm(self, a, b):
        bt = list(zip(*b))
        return [[math.fsum(x * y for x, y in zip(row, col)) for col in bt] for row in a]

    def T(self, a):
        return [list(col) for col in zip(*a)]

    def cols(self, a, start, stop):
        return [row[start:stop] for row in a]

    def shape(self, a):
        dims = []
        while isinstance(a, list):
            dims.append(len(a))
            a = a[0]
        return tuple(dims)

    def rowmax(self, a):
        return [max(row) for row in a]

    def rows(self, column, width):
        return [[x] * width for x in column]

    def stack(self, blocks):
        return list(blocks)

    def concat_heads(self, a):
        return [[x for head in a for x in head[i]] for i in range(len(a[0]))]

    def maxabs(self, a):
        return max((abs(x) for x in flat(a)), default=0.0)

    def worst(self, diff, bounds):
        pairs = list(zip(flat(diff), flat(bounds), strict=True))
        ratios = [0.0 if d == 0 else (d / b if b > 0 else math.inf) for d, b in pairs]
        i = max(range(len(pairs)), key=ratios.__getitem__)
        j = max(range(len(pairs)), key=lambda n: pairs[n][0])
        return ratios[i], pairs[i][1] if ratios[i] > 1.0 else pairs[j][1]

    def tolist(self, a):
        return a


__all__ = ["StepCheck", "compare_traces", "step_check", "EXP_ULPS"]

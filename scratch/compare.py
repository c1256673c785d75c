"""Compare a backend's trace with the ground truth's, step by step, each against its own bound.

Each step's bound is the rounding error of that step alone, with the differences already
measured on the steps it reads PROPAGATED through it (the choice the issue leaves open): the
scores of a backend are judged from the backend's own rounded q and k, plus how far those q and k
already are from the ground truth's. So one wrong step fails by itself, and the first failing
step is where the mistake is. numpy is used when installed; otherwise plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .nested import flat, map_leaves
from .tolerance import (
    ACCUMULATE,
    EXP_ULPS,
    SMALLEST_SUBNORMAL,
    UNIT_ROUNDOFF,
    Rounding,
    check_dtype,
    gamma,
)
from .trace import Trace

LARGEST = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38,
           "float16": 65504.0, "bfloat16": 3.3895313892515355e38}  # fmt: skip

INPUTS = ("x", "key_input", "value_input", "w_q", "w_k", "w_v", "w_o")


@dataclass(frozen=True)
class StepCheck:
    """One step compared: max |difference|, the bound where it binds most, verdict, |diff| grid.

    `ratio` is the largest |difference| / bound over elements (ok means ratio <= 1); `bound` is
    the per-element bound at the largest |difference| when the step passes, and at the worst
    ratio when it fails, so `max_abs_diff` vs `bound` always reads like the verdict. `bounds` is
    the per-element bound grid.
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
    """StepCheck for every step both traces have, in the trace's order (shapes, then values)."""
    for name, t in (("trace", trace), ("reference", reference)):
        if not isinstance(t, Trace):
            raise TypeError(f"{name}: expected a scratch.Trace, found {type(t).__name__}")
    dtype = check_dtype(dtype if dtype is not None else trace.options.get("dtype", "float64"))
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
        self.scale = abs(float(trace.scale))
        self.got, self.want, self.diff = {}, {}, {}
        self.scores_cache = {}

    # -- bookkeeping

    def values(self, name: str) -> tuple[object, object, object]:
        """(trace value, reference value, |difference|) of a step already checked."""
        if name not in self.diff:
            raise KeyError(name)
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
            return StepCheck(
                name,
                math.inf,
                0.0,
                False,
                None,
                math.inf,
                None,
                f"{name}: shape {tuple(step.shape)}, expected {tuple(ref.shape)}",
            )
        ops = self.ops
        got, want = ops.array(step.value), ops.array(ref.value)
        self.got[name], self.want[name] = got, want
        diff = ops.absdiff(got, want)
        self.diff[name] = diff
        try:
            bounds = self.bound(name, len(step.shape))
        except KeyError as exc:  # a step it reads is missing or had the wrong shape
            return StepCheck(
                name,
                ops.maxabs(diff),
                0.0,
                False,
                ops.tolist(diff),
                math.inf,
                None,
                f"{name}: no bound, step {exc} could not be compared",
            )
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
                f"; {self.dtype} gives inf or NaN where the ground truth is finite: the values "
                f"outgrew {self.dtype} (largest {LARGEST[self.dtype]:.6g})"
            )
        return StepCheck(
            name, biggest, worst_bound, ok, ops.tolist(diff), ratio, ops.tolist(bounds), message
        )

    def bound(self, name: str, ndim: int):
        """Per-element bound of one step (each step's own rounding + propagated differences)."""
        if name in INPUTS:  # the backend stored the input in its dtype: one rounding
            return self.ops.ew(lambda w: self.u_store * abs(w) + self.floor, self.want[name])
        if name in ("q", "k", "v"):
            return self.projection(name)
        if name in ("scores", "scaled", "masked", "weights", "head_outputs"):
            per_head = [self.head_bound(name, h) for h in range(self.H)]
            return self.ops.stack(per_head) if ndim == 3 else per_head[0]
        if name == "output" and "head_outputs" not in self.trace:
            return self.head_bound("output", 0)
        if name == "concat" or (name == "output" and "w_o" not in self.trace):
            return self.ops.concat_heads(self.diff["head_outputs"])  # an exact rearrangement
        if name == "output":
            return self.dense("concat", "w_o", self.want["output"])
        return self.ops.ew(lambda w: 4 * self.u_store * abs(w) + self.floor, self.want[name])

    def projection(self, name: str):
        """q/k/v: a dense layer of its input, or the input itself when there is no w."""
        src = {"q": "x", "k": "key_input", "v": "value_input"}[name]
        if src not in self.trace:  # self-attention: keys and values come from x
            src = "key_input" if name == "v" and "key_input" in self.trace else "x"
        if f"w_{name}" not in self.trace:
            return self.ops.ew(
                lambda d, w: d + self.u_store * abs(w) + self.floor, self.diff[src], self.want[name]
            )
        return self.dense(src, f"w_{name}", self.want[name])

    def dense(self, src: str, w: str, want):
        """src @ w (+ bias): propagated differences + rounding of n products (bias unknown)."""
        ops = self.ops
        (a, a_ref, da), (b, _, db) = self.values(src), self.values(w)
        n = ops.shape(a)[-1]
        # (L, n) @ (n, m) -> (L, m): how far the inputs' differences can move the product
        prop = ops.add(ops.mm(da, ops.abs(b)), ops.mm(ops.abs(a_ref), db))
        size = ops.mm(ops.abs(a), ops.abs(b))  # sum_l |a_il b_lc|
        g = gamma(n + 2, self.u_acc)
        # an unknown bias b_c is at most |want| + size, so rounding sees at most 2 size + |want|;
        # a 16-bit trace also stores the bias itself rounded to 16 bits: u_store |b_c| more
        # (the trace does not record whether a bias was given, so this slack is always there)
        us = self.u_store
        b0 = ops.ew(lambda p, s, w: p + (g + us) * (2 * s + abs(w)), prop, size, want)
        full = ops.ew(lambda s, w: 2 * s + abs(w), size, want)
        return self.chain(b0, want, 2, n + 2, full)

    def head_slices(self, h: int, name: str) -> tuple[object, object, object]:
        """Columns of q (query head h) or k/v (its kv head) for head h: (got, want, diff)."""
        ops = self.ops
        got, want, diff = self.values(name)
        width = ops.shape(got)[-1] // (self.H if name == "q" else self.Hkv)
        g = h if name == "q" else h // (self.H // self.Hkv)
        return tuple(ops.cols(m, g * width, (g + 1) * width) for m in (got, want, diff))

    def head(self, name: str, h: int) -> tuple[object, object, object]:
        """Head h of a step with an optional leading head axis: (got, want, diff)."""
        got, want, diff = self.values(name)
        if len(self.ops.shape(got)) == 3:
            return got[h], want[h], diff[h]
        return got, want, diff

    def score_parts(self, h: int):
        """For head h: (propagated |scores difference|, sum_l |q_il k_jl|, E); cached."""
        if h not in self.scores_cache:
            self.scores_cache[h] = self._score_parts(h)
        return self.scores_cache[h]

    def _score_parts(self, h: int):
        """score_parts, computed."""
        ops = self.ops
        (q, q_ref, dq), (k, _, dk) = self.head_slices(h, "q"), self.head_slices(h, "k")
        # (L, E) @ (E, S) -> (L, S)
        prop = ops.add(ops.mm(dq, ops.T(ops.abs(k))), ops.mm(ops.abs(q_ref), ops.T(dk)))
        size = ops.mm(ops.abs(q), ops.T(ops.abs(k)))
        return prop, size, ops.shape(q)[-1]

    def head_bound(self, name: str, h: int):
        """Bound of one head of scores, scaled, masked, weights or the output."""
        ops = self.ops
        if name in ("scores", "scaled"):
            prop, size, E = self.score_parts(h)
            c = 1.0 if name == "scores" else self.scale
            g = gamma(E + 2, self.u_acc)
            b0 = ops.ew(lambda p, s: c * (p + g * s), prop, size)
            return self.chain(b0, self.head(name, h)[1], 2, E + 2, ops.ew(lambda s: c * s, size))
        if name == "masked":
            bound = self.head_bound("scaled", h)
            want = self.head("masked", h)[1]
            u_store = Rounding(self.dtype, 0, 1).u_store  # 16-bit traces store a rounded copy
            return ops.ew(lambda b, w: b + (2 * self.u_acc + u_store) * (abs(w) + b), bound, want)
        if name == "weights":
            return self.weights_bound(h)
        return self.output_bound(name, h)

    def weights_bound(self, h: int):
        """softmax of the backend's masked row vs the truth's: exponents moved by delta_i."""
        ops = self.ops
        masked, _, d_masked = self.head("masked", h)
        _, p_ref, _ = self.head("weights", h)
        S = ops.shape(p_ref)[-1]
        live = ops.positive(p_ref)
        # 16-bit traces store rounded copies of float32 scores: the exponents used may sit u_s|m|
        # away from the stored masked values
        slack = Rounding(self.dtype, 0, S).u_store
        moved = ops.ew(lambda d, m: d + slack * m, d_masked, ops.finite_abs(masked))
        moved = ops.rowmax(ops.where(live, moved, 0.0))
        top = ops.rowmax(ops.where(live, ops.finite_abs(masked), 0.0))
        kernel, truth = Rounding(self.dtype, 0, S), Rounding("float64", 0, S)
        factors = [
            kernel.factor(d + gamma(4, self.u_acc) * t) + truth.factor(gamma(4, truth.u_acc) * t)
            for d, t in zip(moved, top)
        ]
        floor = kernel.weight_floor + truth.weight_floor
        return ops.where(live, ops.ew(lambda f, p: f * p + floor, ops.rows(factors, S), p_ref), 0.0)

    def output_bound(self, name: str, h: int):
        """weights @ v: the larger of a propagated bound (from the trace's weights) and an
        end-to-end one (from its q, k, v, as `tolerance` does)."""
        ops = self.ops
        p, p_ref, dp = self.head("weights", h)
        v, v_ref, dv = self.head_slices(h, "v")
        S = ops.shape(p_ref)[-1]
        clean = ops.nan_to_zero(p_ref)
        dp = ops.nan_to_zero(dp)
        absv = ops.abs(v)
        # (L, S) @ (S, Ev) -> (L, Ev): propagated from the trace's own weights and v
        p_abs = ops.abs(ops.nan_to_zero(p))
        acc = ops.mm(p_abs, absv)
        prop = ops.add(ops.mm(dp, absv), ops.mm(clean, dv))
        g = gamma(S + 1, self.u_acc)
        out_ref = self.head(name, h)[1]
        via_weights = self.chain(ops.ew(lambda a, b: a + g * b, prop, acc), out_ref, 2, S + 1, acc)
        # end to end: exponents moved by the q/k differences, the scores' rounding and the mask
        s_prop, size, E = self.score_parts(h)
        masked_ref, scaled_ref = self.head("masked", h)[1], self.head("scaled", h)[1]
        live = ops.positive(clean)
        kernel, truth = Rounding(self.dtype, E, S), Rounding("float64", E, S)
        added = ops.finite_abs(ops.ew(lambda m, sc: m - sc, masked_ref, scaled_ref))  # |mask|
        g = kernel.score_gamma
        moved = ops.ew(
            lambda pr, s, a: self.scale * pr + g * (self.scale * s + a), s_prop, size, added
        )
        delta = ops.rowmax(ops.where(live, moved, 0.0))
        top = ops.rowmax(ops.where(live, ops.ew(lambda s: self.scale * s, size), 0.0))
        factors = [
            kernel.factor(d) + truth.factor(truth.score_gamma * t) for d, t in zip(delta, top)
        ]
        Ev = ops.shape(v)[-1]
        weighted = ops.mm(clean, ops.abs(v_ref))
        floor = (kernel.weight_floor + truth.weight_floor) * ops.maxabs(v_ref) * S
        floor += kernel.output_floor + truth.output_floor
        end_to_end = ops.ew(
            lambda f, w, pd: f * w + pd + floor, ops.rows(factors, Ev), weighted, ops.mm(clean, dv)
        )
        both = ops.maximum(via_weights, end_to_end)
        nonzero = ops.rows([float(x > 0) for x in ops.rowmax(clean)], Ev)  # zero and NaN rows: 0
        return ops.where(nonzero, both, 0.0)


class _NumpyOps:
    """Array operations on numpy float64 arrays."""

    def __init__(self, np):
        self.np = np

    def array(self, value):
        """A step value (nested lists, numpy array or tensor) as float64 numpy."""
        from .tolerance import as_float64

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
        """(max diff / bound, the bound to show); see _shown_bound."""
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


__all__ = ["StepCheck", "compare_traces", "EXP_ULPS"]

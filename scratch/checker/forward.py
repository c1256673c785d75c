"""The forward kind of case: one output compared with the ground truth under the bound and the
reference rule, the returned weights checked, a failure named (diagnosis.py)."""

from __future__ import annotations

import math

from scratch.bounds.tolerance import UNIT_ROUNDOFF, RuleResult
from scratch.checker.arrays import Arrays, shape
from scratch.checker.blas import own_work
from scratch.checker.cases import Case
from scratch.checker.prepare import Prepared
from scratch.checker.report import CaseResult
from scratch.checker.run import RULE_FACTOR, BadResult, Kind, allowed_error, call, changed_in_place
from scratch.ops.nested import flat
from scratch.ops.validate import as_tensor

BOUND_SHARE = 16.0  # an element within 1/16 of its worst-case bound never fails the rule


class Forward(Kind):
    """fn(q, k, v, attn_mask=..., is_causal=..., scale=..., enable_gqa=...) -> output."""

    def needs(self, case: Case) -> dict[str, bool]:
        """The keyword fn must take before the case is made at all."""
        return {"enable_gqa": case.gqa}

    def call(self, args: tuple, kwargs: dict) -> tuple:
        """(output, weights or None)."""
        return call(self.fn, args, kwargs)

    def judge(self, result, prep: Prepared, args, kwargs, found) -> CaseResult:
        """Compare the output with the ground truth; diagnose a failure."""
        out, weights = found
        arrays, case, cdtype = self.arrays, prep.case, result.dtype
        expected = case.q[:-2] + (case.q[-2], case.v[-1])
        changed = prep.mutated(arrays, args, kwargs)
        full = _shape_of(out)
        if full is not None and full != expected:
            result.message = f"output shape {full}, expected {expected} (..., L, Ev)"
            result.diagnosis = _diagnose_shape(case, full, out, prep, arrays)
            return result
        if prep.rows is not None:
            out = arrays.take_rows(out, prep.rows)
        try:
            got, found_shape = read_output(out)
        except BadResult as exc:  # None, a string, ragged lists...: a wrong answer, not a refusal
            result.message = str(exc)
            return result
        if found_shape != shape(prep.truth):
            result.message = f"output shape {found_shape}, expected {expected} (..., L, Ev)"
            result.diagnosis = _diagnose_shape(case, found_shape, out, prep, arrays)
            return result
        result.max_error, result.ratio, result.bound = worst(got, prep.truth, prep.bound)
        got_np = None
        if prep.np_ready:
            import numpy as np

            got_np = np.asarray(got, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                result.diff = np.abs(got_np - prep.truth_np).tolist()
            with own_work():  # the reference kernels
                result.rule = rule(got_np, prep)
        within = result.ratio <= 1.0
        if within and (result.rule is None or result.rule.ok) and not changed:
            result.message = _weights_problem(weights, prep, arrays)
            result.status = "pass" if result.message is None else "fail"
            return result
        if changed:
            return changed_in_place(result, changed)
        result.message = _failure(result, cdtype)
        result.diagnosis = _behaviour(self.fn, prep, arrays, got, weights)
        if result.diagnosis is None and got_np is not None:
            from scratch.checker.diagnosis import diagnose

            with own_work():  # the known mistakes' outputs
                result.diagnosis = diagnose(prep, got_np, self.masked_rows, cdtype)
        return result


def _failure(result: CaseResult, dtype: str) -> str:
    """Why a read output fails: over the bound, or over the reference rule."""
    if result.ratio > 1.0:
        if math.isinf(result.max_error):
            return "NaN or inf where the ground truth has a number (or the reverse)"
        if math.isinf(result.ratio):
            return (
                f"max error {result.max_error:.3g} where the bound is 0 (an exact answer, e.g. a "
                f"fully masked row)"
            )
        return (
            f"max error {result.max_error:.3g} is {result.ratio:.3g}x the bound at the worst "
            f"element"
        )
    r = result.rule
    return (
        f"within the bound, but error {r.error:.3g} > {RULE_FACTOR:g}x the largest error of "
        f"the correct reference {dtype} kernels {r.reference_error:.3g} + floor "
        f"(allowed {r.allowed:.3g})"
    )


def read_output(out: object) -> tuple[list, tuple[int, ...]]:
    """fn's output (array, tensor or nested lists) as nested floats and its shape."""
    try:
        return as_tensor(out, "output")
    except (TypeError, ValueError) as exc:
        raise BadResult(f"fn's result is not an array of numbers: {exc}") from None


def rule(got_np, prep: Prepared) -> RuleResult:
    """The reference rule: every element's error <= 2 x the largest reference kernel's error +
    4 ulps, or <= 1/BOUND_SHARE of its own bound (errors that small are never called wrong)."""
    import numpy as np

    from scratch.checker.reference import max_error

    err = max_error(got_np, prep.truth_np, prep.live_np)
    ref = prep.reference_error()
    live = prep.truth_np[prep.live_np]
    top = float(abs(live).max()) if live.size else 0.0
    allowed = allowed_error(ref, top, prep.dtype)
    if err <= allowed:
        return RuleResult(True, err, ref, allowed)
    with np.errstate(invalid="ignore"):
        diff = np.abs(got_np - prep.truth_np)[prep.live_np]
        share = prep.bound_np[prep.live_np] / BOUND_SHARE
    ok = bool(np.all(np.isfinite(diff)) and np.all((diff <= allowed) | (diff <= share)))
    return RuleResult(ok, err, ref, allowed)


def _shape_of(out: object) -> tuple[int, ...] | None:
    """An array's shape without reading its values (None for lists and the like)."""
    found = getattr(out, "shape", None)
    if found is None or isinstance(out, (list, tuple)):
        return shape(out) if isinstance(out, list) else None
    try:
        return tuple(int(n) for n in found)
    except (TypeError, ValueError):
        return None


def _diagnose_shape(case: Case, found: tuple, out: object, prep: Prepared, arrays: Arrays):
    """Name a mistake from a wrong output shape, checking the values where it can."""
    L, S, E, Ev = case.q[-2], case.k[-2], case.q[-1], case.v[-1]
    if found[-2:] == (S, Ev) and L != S:
        return "softmax over the wrong axis (queries instead of keys): output has S rows"
    if len(case.q) == 4 and found == (case.q[0], L, case.q[1], Ev):
        return (
            "output in (B, L, H, Ev) layout: the transpose back to (B, H, L, Ev) is missing "
            "(output.transpose(1, 2))"
        )
    if found[-2:] not in ((L, S), (L, E)) or prep.rows is not None or not prep.np_ready:
        return None
    import numpy as np

    try:
        got = np.asarray(arrays.floats(out), dtype=np.float64)
    except Exception:
        return None
    from scratch.checker import variants

    candidates = []
    if found[-2:] == (L, S):
        candidates.append(
            ("returned the weights instead of the output (weights @ v missing)", prep.weights)
        )
    if found[-2:] == (L, E):
        candidates.append(
            (
                "k read where v belongs (weights @ k)",
                variants.attend(prep.problem, read_k_as_v=True),
            )
        )
    u = UNIT_ROUNDOFF[prep.dtype]
    for name, want in candidates:
        want = np.asarray(want, dtype=np.float64)
        if want.shape == got.shape and np.nanmax(np.abs(got - want)) <= 64 * u * max(
            1.0, float(np.nanmax(np.abs(want)))
        ):
            return name
    return None


def _weights_problem(weights: object, prep: Prepared, arrays: Arrays) -> str | None:
    """Why the weights fn returned beside a right output are wrong (None: right, or none
    returned): not numbers, another shape, or an error over `weights_tolerance`'s bound."""
    if weights is None:
        return None
    if prep.rows is not None:
        weights = arrays.take_rows(weights, prep.rows)
    try:
        got, found = read_output(weights)
    except BadResult as exc:
        return f"the output is right, but the returned weights are not: {exc}"
    want = shape(prep.weights)
    if found != want:
        lead = want[:-2]
        return (
            f"the output is right, but the returned weights have shape {found}, expected "
            f"{lead + (prep.case.q[-2], want[-1])} (..., L, S)"
        )
    error, ratio, _ = worst(got, prep.weights, prep.weights_bound())
    if ratio <= 1.0:
        return None
    return (
        f"the output is right, but the returned weights are not: max error {error:.3g} is "
        f"{ratio:.3g}x their bound at the worst element"
    )


def _behaviour(fn, prep: Prepared, arrays: Arrays, got: list, weights: object):
    """Dropout left on: a second call on fresh copies differs by more than rounding, or the
    returned weights are the truth's zeroed and rescaled."""
    args, kwargs = prep.call_args(arrays)
    try:
        out = call(fn, args, kwargs)[0]
        if prep.rows is not None:
            out = arrays.take_rows(out, prep.rows)
        again = read_output(out)[0]
    except Exception:
        again = got
    if worst(again, got, prep.bound)[1] > 4.0:
        return "dropout left on (two identical calls differ by more than rounding)"
    if weights is None or prep.rows is not None:
        return None
    try:
        w, found = read_output(weights)
    except BadResult:
        return None
    if found != shape(prep.weights):
        return None
    pairs = [(a, b) for a, b in zip(flat(w), flat(prep.weights)) if b > 1e-6]
    ratios = [a / b for a, b in pairs if a != 0.0]
    zeros = sum(1 for a, _ in pairs if a == 0.0)
    if zeros and ratios and max(ratios) - min(ratios) < 1e-2 * max(ratios) and min(ratios) > 1.0:
        return (
            f"dropout left on (weights zeroed or rescaled by {ratios[0]:.3g} = "
            f"1/(1-{1 - 1 / ratios[0]:.2g}))"
        )
    return None


def worst(got: list, want: list, bound: list) -> tuple[float, float, float]:
    """(max |got - want|, max |got - want| / bound, the bound to show).

    NaN must match NaN; an exact-zero bound needs an exact match. The bound shown is the one at
    the largest error when every element passes, else the one at the worst ratio, so "max
    error vs bound" in the table always reads like the verdict."""
    worst_err, worst_ratio, at_err, at_ratio = 0.0, 0.0, 0.0, 0.0
    for g, w, b in zip(flat(got), flat(want), flat(bound), strict=True):
        if math.isnan(g) or math.isnan(w):
            err = 0.0 if math.isnan(g) and math.isnan(w) else math.inf
        else:
            err = 0.0 if g == w else abs(g - w)
            err = math.inf if math.isnan(err) else err
        ratio = 0.0 if err == 0 else (err / b if b > 0 else math.inf)
        if err > worst_err or (err == worst_err and at_err == 0.0):
            worst_err, at_err = err, b
        if ratio > worst_ratio:
            worst_ratio, at_ratio = ratio, b
    return worst_err, worst_ratio, at_ratio if worst_ratio > 1.0 else at_err


__all__ = ["Forward", "read_output", "rule", "worst"]

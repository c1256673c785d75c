"""scratch.check: run a kernel on the cases, compare with the ground truth, diagnose failures."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable

from ..tolerance import UNIT_ROUNDOFF, RuleResult, check_dtype, ulp
from ..validate import as_tensor, check_masked_rows
from .arrays import ARRAYS, Arrays, flat, shape
from .blas import own_work
from .cases import CASE_SETS, FEATURES, Case, cases_for
from .ignored import settle_ignored
from .prepare import Prepared, prepare
from .raised import array_mismatch, describe, refused_keyword
from .report import CaseResult, CheckReport, shape_text

RULE_FACTOR = 2.0  # a kernel may have twice the largest error of the correct reference kernels
FLOOR_ULPS = 4.0  # plus this many units in the last place of max |truth|
BOUND_SHARE = 16.0  # an element within 1/16 of its worst-case bound never fails the rule


class BadResult(Exception):
    """fn returned something that is not an output."""


def check(
    fn: Callable,
    *,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    cases: str = "standard",
    seed: int = 0,
    masked_rows: str = "zero",
    require: object = (),
    progress: Callable[[int, int, str], None] | None = None,
) -> CheckReport:
    """Run fn on seeded cases and compare each output with the float64 ground truth (sampled
    rows of 4096-token cases in 16/32-bit dtypes: its float64 NumPy stand-in, float64_rows.py).

    fn(q, k, v, attn_mask=..., is_causal=..., scale=..., enable_gqa=...) gets only the keywords a
    case needs and returns the output or (output, weights). `require` (e.g. ("mask", "causal"))
    turns cases fn refuses for those features into failures. See the README's checker section.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, found {type(fn).__name__}")
    dtype, masked_rows = check_settings(
        array, ARRAYS, cases, CASE_SETS, seed, device, dtype, masked_rows
    )
    required = check_require(require)
    if cases == "large" and array == "list":
        raise ValueError(
            "cases: 'large' needs array='numpy' or 'torch' (4096-token lists are slow)"
        )
    arrays = Arrays(array, device)
    arrays.check_device()
    todo = cases_for(cases, dtype)
    settings = f"array={array}, dtype={dtype}, device={device or 'default'}, cases={cases}"
    report = CheckReport(target_name(fn), settings_line(settings, seed, masked_rows, required))
    accepts = accepted_keywords(fn)
    run_all(
        report, todo, progress, lambda c: run_case(fn, c, arrays, dtype, seed, masked_rows, accepts)
    )
    return finish(report, required)


def settings_line(settings: str, seed: int, masked_rows: str, required: tuple[str, ...]) -> str:
    """The report's settings line: what was checked, the seed, the policy, required features."""
    return f"{settings}, seed={seed}, masked_rows={masked_rows}" + (
        f", require={','.join(required)}" if required else ""
    )


def run_all(report: CheckReport, todo: list, progress, run_one: Callable) -> None:
    """run_one(case) for every case into the report, telling `progress` before each."""
    for n, case in enumerate(todo):
        if progress is not None:
            progress(n + 1, len(todo), case.name)
        report.cases.append(run_one(case))


def check_settings(
    array: str,
    arrays: tuple,
    cases: str,
    case_sets: tuple,
    seed: int,
    device: object,
    dtype: object,
    masked_rows: str,
) -> tuple[str, str]:
    """ValueError/TypeError for a bad setting; the dtype and masked_rows policy, normalised."""
    if array not in arrays:
        raise ValueError(f"array: expected one of {', '.join(arrays)}, found {array!r}")
    if cases not in case_sets:
        raise ValueError(f"cases: expected one of {', '.join(case_sets)}, found {cases!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, found {type(seed).__name__} {seed!r}")
    if device is not None and array != "torch":
        raise ValueError(f"device: only meaningful with array='torch', found array={array!r}")
    dtype = check_dtype(dtype)
    if dtype == "bfloat16" and array == "numpy":
        raise ValueError("dtype: numpy has no bfloat16; use array='torch' for bfloat16")
    return dtype, check_masked_rows(masked_rows)


def target_name(fn: Callable) -> str:
    """module:qualname of a function, for the report."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}:{name}" if module else name


def finish(report: CheckReport, required: tuple[str, ...]) -> CheckReport:
    """Fail required features, and put the most frequent diagnosis first."""
    for r in report.cases:
        needed = [f for f in r.features if f in required]
        if r.status == "unsupported" and needed:
            r.status = "fail"
            r.message += f"; {', '.join(needed)} required"
    weigh_overflow(report.failed)
    settle_ignored(report.cases)
    found = [c.diagnosis for c in report.failed if c.diagnosis]
    if found:  # one entry per mistake: texts that differ only in numbers (a case's sizes)
        names = [re.sub(r"\d+", "#", d) for d in found]
        ranked = sorted(set(names), key=lambda n: (-names.count(n), names.index(n)))
        parts = []
        for name in ranked:
            texts = list(dict.fromkeys(d for d, n in zip(found, names) if n == name))
            more = len(texts) - 1
            alike = f" (and {more} more case{'s' * (more > 1)} alike)" if more else ""
            parts.append(texts[0] + alike)
        report.diagnosis = "; ".join(parts)
    return report


def weigh_overflow(failed: list[CaseResult]) -> None:
    """Overflow on large logits is weak evidence: any exp that blows up there shows it.

    A name found in another case wins over it; where it stands alone it also explains NaN in
    fully masked rows (exp(-1e10 - 0) = 0 in every key: 0/0), so that policy name goes."""
    names = {c.diagnosis for c in failed if c.diagnosis}
    overflow = {d for d in names if d.startswith("exp overflows")}
    if not overflow:
        return
    policy = {d for d in names if d.startswith("fully masked rows give masked_rows='nan'")}
    drop = overflow if names - overflow - policy else policy
    for c in failed:
        if c.diagnosis in drop:
            c.diagnosis = None


def check_require(require: object, known: tuple[str, ...] = tuple(FEATURES)) -> tuple[str, ...]:
    """'mask,causal' or ('mask', 'causal') -> a tuple of `known` names; ValueError if unknown."""
    if isinstance(require, str):
        require = [w.strip() for w in require.split(",") if w.strip()]
    if not isinstance(require, (list, tuple, set, frozenset)):
        raise TypeError(f"require: expected feature names, found {type(require).__name__}")
    for word in require:
        if word not in known:
            raise ValueError(f"require: expected names from {', '.join(known)}, found {word!r}")
    return tuple(require)


def accepted_keywords(fn: Callable) -> set[str] | None:
    """The keyword names fn accepts, or None when it takes **kwargs or has no signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def call(fn: Callable, args: tuple, kwargs: dict) -> tuple[object, object]:
    """fn on the case's arrays: (output, weights or None)."""
    result = fn(*args, **kwargs)
    if isinstance(result, tuple):
        if len(result) != 2:
            raise BadResult(
                f"fn returned a tuple of {len(result)} items; expected output or (output, weights)"
            )
        return result[0], result[1]
    return result, None


def read_output(out: object) -> tuple[list, tuple[int, ...]]:
    """fn's output (array, tensor or nested lists) as nested floats and its shape."""
    try:
        return as_tensor(out, "output")
    except (TypeError, ValueError) as exc:
        raise BadResult(f"fn's result is not an array of numbers: {exc}") from None


def mutated(arrays: Arrays, prep: Prepared, args: tuple, kwargs: dict) -> list[str]:
    """The inputs fn changed in place (compared with the masters they were copied from)."""
    names = []
    *masters, mask_master = prep.masters(arrays)
    for name, got, master in zip(("query", "key", "value"), args, masters):
        if not arrays.same(got, master):
            names.append(name)
    if mask_master is not None and not arrays.same(kwargs["attn_mask"], mask_master):
        names.append("attn_mask")
    return names


def start_case(case, dtype: str, needs: dict[str, bool], accepts) -> CaseResult:
    """A case's result, 'unsupported' already when fn lacks a keyword the case needs."""
    result = CaseResult(
        case.name, shape_text(case.q, case.k, case.v), case.options(), case.dtype or dtype, "fail"
    )
    result.features = case.features(dtype)
    missing = [w for w, on in needs.items() if on and accepts is not None and w not in accepts]
    if missing:
        result.status, result.message = "unsupported", f"fn takes no {missing[0]} keyword"
    return result


def not_taken(result: CaseResult, kwargs: dict, accepts: set[str] | None) -> bool:
    """Whether fn's signature lacks a keyword the case passes (the case is then unsupported)."""
    missing = [w for w in kwargs if accepts is not None and w not in accepts]
    if missing:
        result.status, result.message = "unsupported", f"fn takes no {missing[0]} keyword"
    return bool(missing)


def made_inputs(result: CaseResult, make: Callable, arrays: Arrays) -> tuple | None:
    """(prep, args, kwargs) from `make()`; None (the case unsupported) when inputs fail."""
    try:
        prep = make()
        return (prep, *prep.call_args(arrays))
    except (ValueError, TypeError) as exc:  # e.g. float64 on a device without it
        result.status = "unsupported"
        result.message = f"cannot make {result.dtype} inputs: {exc}"
        return None


def changed_in_place(result: CaseResult, changed: list[str]) -> CaseResult:
    """A failure: fn wrote into the inputs it was given."""
    names = ", ".join(changed)
    result.message = f"fn changed its {names} input in place"
    result.diagnosis = f"fn modifies its inputs in place ({names}): the caller's tensors change"
    return result


def kernel_raised(
    result: CaseResult, exc: Exception, array: str, fn: object, keywords: object = ()
) -> CaseResult:
    """fn's own error: a failure, or a refusal (unsupported) in a case that uses an optional
    feature when it is NotImplementedError or fn's signature refused one of `keywords`
    (raised.py: the rule, and torch.compile's wrappers taken off)."""
    word = refused_keyword(exc, keywords)
    if word is not None and result.features:
        result.status, result.message = "unsupported", f"fn takes no {word} keyword"
        return result
    found = describe(exc)
    result.raised, result.trace = found.kind, found.frames
    if found.refusal and result.features:
        result.status = "unsupported"
        result.message = f"raised {found.words} (uses {', '.join(result.features)})"
        return result
    result.status = "fail"
    result.message = f"raised {found.words}" + (
        " in a case with no optional feature to decline" if found.refusal else ""
    )
    result.diagnosis = array_mismatch(found, array, fn)  # the only name a raise gets
    return result


def run_case(fn, case: Case, arrays: Arrays, dtype: str, seed: int, masked_rows: str, accepts):
    """Run one case: call fn, compare with the ground truth, diagnose a failure."""
    result = start_case(case, dtype, {"enable_gqa": case.gqa}, accepts)
    if result.status == "unsupported":
        return result
    cdtype = result.dtype
    lead, L, Ev = case.q[:-2], case.q[-2], case.v[-1]
    expected = lead + (L, Ev)
    with own_work():  # the inputs, the ground truth and its bound
        made = made_inputs(result, lambda: prepare(case, arrays, cdtype, seed, masked_rows), arrays)
    if made is None:
        return result
    prep, args, kwargs = made
    if not_taken(result, kwargs, accepts):
        return result
    try:
        out, weights = call(fn, args, kwargs)
    except BadResult as exc:
        result.message = str(exc)
        return result
    except Exception as exc:  # the kernel's own error: a failure, or NotImplementedError
        return kernel_raised(result, exc, arrays.array, fn, kwargs)
    changed = mutated(arrays, prep, args, kwargs)
    full = _shape_of(out)
    if full is not None and full != expected:
        result.message = f"output shape {full}, expected {expected} (..., L, Ev)"
        result.diagnosis = _diagnose_shape(case, full, out, prep, arrays)
        return result
    if prep.rows is not None:
        out = arrays.take_rows(out, prep.rows)
    try:
        got, found = read_output(out)
    except BadResult as exc:  # None, a string, ragged lists...: a wrong answer, not a refusal
        result.message = str(exc)
        return result
    want = shape(prep.truth)
    if found != want:
        result.message = f"output shape {found}, expected {expected} (..., L, Ev)"
        result.diagnosis = _diagnose_shape(case, found, out, prep, arrays)
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
    if not within:
        if math.isinf(result.max_error):
            result.message = "NaN or inf where the ground truth has a number (or the reverse)"
        elif math.isinf(result.ratio):
            result.message = (
                f"max error {result.max_error:.3g} where the bound is 0 (an exact answer, e.g. a "
                f"fully masked row)"
            )
        else:
            result.message = (
                f"max error {result.max_error:.3g} is {result.ratio:.3g}x the bound at the worst "
                f"element"
            )
    else:
        r = result.rule
        result.message = (
            f"within the bound, but error {r.error:.3g} > {RULE_FACTOR:g}x the largest error of "
            f"the correct reference {cdtype} kernels {r.reference_error:.3g} + floor "
            f"(allowed {r.allowed:.3g})"
        )
    result.diagnosis = _behaviour(fn, prep, arrays, got, weights, cdtype)
    if result.diagnosis is None and got_np is not None:
        from .diagnosis import diagnose

        with own_work():  # the known mistakes' outputs
            result.diagnosis = diagnose(prep, got_np, masked_rows, cdtype)
    return result


def rule(got_np, prep: Prepared) -> RuleResult:
    """The reference rule: every element's error <= 2 x the largest reference kernel's error +
    4 ulps, or <= 1/BOUND_SHARE of its own bound (errors that small are never called wrong)."""
    import numpy as np

    from .reference import max_error

    err = max_error(got_np, prep.truth_np, prep.live_np)
    ref = prep.reference_error()
    live = prep.truth_np[prep.live_np]
    top = float(abs(live).max()) if live.size else 0.0
    allowed = RULE_FACTOR * (ref if math.isfinite(ref) else 0.0) + FLOOR_ULPS * ulp(top, prep.dtype)
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
    from . import variants

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


def _behaviour(fn, prep: Prepared, arrays: Arrays, got: list, weights: object, dtype: str):
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

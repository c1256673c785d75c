"""The one runner: every check (doors.py: scratch.check and its backward and variant forms) runs
a kernel on seeded cases the same way (make the inputs, call, catch a raise, judge) into one
CheckReport, and allows errors by one rule (`allowed_error`).

What differs between the kinds of case (forward.py, backward_run.py, variant_run.py: how the
inputs are made, how fn is called, how its answer is compared and named) is a `Kind`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable

from scratch.bounds.tolerance import ulp
from scratch.checker.arrays import Arrays
from scratch.checker.blas import own_work
from scratch.checker.ignored import settle_ignored
from scratch.checker.interpreter import interpreter_notes
from scratch.checker.prepare import prepare
from scratch.checker.raised import array_mismatch, describe, refused_keyword
from scratch.checker.report import CaseResult, CheckReport, shape_text

RULE_FACTOR = 2.0  # a kernel may have twice the largest error of the correct reference kernels
FLOOR_ULPS = 4.0  # plus this many units in the last place of max |truth|
Progress = Callable[[int, int, str], None] | None


class BadResult(Exception):
    """fn returned something that is not an output (or not gradients)."""


class Kind:
    """What one kind of case adds to the runner: the inputs, the call, the judgement."""

    def __init__(self, fn: Callable, arrays: Arrays, dtype: str, seed: int, **settings):
        self.fn, self.arrays, self.dtype, self.seed = fn, arrays, dtype, seed
        self.masked_rows = settings.get("masked_rows", "zero")
        self.style = settings.get("style")
        self.accepts = accepted_keywords(fn)

    def needs(self, case) -> dict[str, bool]:
        """Keywords fn must take (when on) before the case's inputs are made."""
        return {}

    def inputs(self, case, result: CaseResult) -> tuple | None:
        """(prep, args, kwargs); None when the case cannot run (result says why). Here: a
        forward or backward case's seeded inputs and ground truth (prepare.py)."""
        try:
            with own_work():  # the inputs and the ground truth
                prep = prepare(case, self.arrays, result.dtype, self.seed, self.masked_rows)
                return (prep, *prep.call_args(self.arrays))
        except (ValueError, TypeError) as exc:  # e.g. float64 on a device without it
            result.status = "unsupported"
            result.message = f"cannot make {result.dtype} inputs: {exc}"
            return None

    def call(self, args: tuple, kwargs: dict) -> object:
        """fn's answer on the inputs; BadResult when it is not an answer."""
        return self.fn(*args, **kwargs)

    def judge(self, result: CaseResult, prep, args: tuple, kwargs: dict, found) -> CaseResult:
        """Compare fn's answer with the ground truth; pass, or fail with a message and a name."""
        raise NotImplementedError


def run_case(kind: Kind, case) -> CaseResult:
    """One case: fn must take its keywords, the inputs, the call (a raise fails or declines
    the case, raised.py), then the kind's judgement."""
    result = start_case(case, kind.dtype, kind.needs(case), kind.accepts)
    if result.status == "unsupported":
        return result
    made = kind.inputs(case, result)
    if made is None:
        return result
    prep, args, kwargs = made
    if not_taken(result, kwargs, kind.accepts):
        return result
    try:
        found = kind.call(args, kwargs)
    except BadResult as exc:
        result.message = str(exc)
        return result
    except Exception as exc:  # the kernel's own error: a failure, or NotImplementedError
        return kernel_raised(result, exc, kind.arrays.array, kind.fn, kwargs)
    return kind.judge(result, prep, args, kwargs, found)


def run_checks(
    kind: Kind, target: str, settings: str, cases: list, progress: Progress, required: tuple
) -> CheckReport:
    """Every case into one report, telling `progress` before each; then `finish`."""
    report = CheckReport(target, settings, notes=interpreter_notes(kind.fn, kind.dtype))
    for n, case in enumerate(cases):
        if progress is not None:
            progress(n + 1, len(cases), case.name)
        report.cases.append(run_case(kind, case))
    return finish(report, required)


def allowed_error(reference: float, top: float, dtype: str, floor: float = 0.0) -> float:
    """The rule's allowed max error: RULE_FACTOR x the largest error of the correct reference
    kernels (0 where not finite) + FLOOR_ULPS units in the last place of `top` (or `floor`)."""
    reference = reference if math.isfinite(reference) else 0.0
    return RULE_FACTOR * reference + max(FLOOR_ULPS * ulp(top, dtype), floor)


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


def start_case(case, dtype: str, needs: dict[str, bool], accepts) -> CaseResult:
    """A case's result, 'unsupported' already when fn lacks a keyword the case needs."""
    result = CaseResult(
        case.name, shape_text(case.q, case.k, case.v), case.options(), case.dtype or dtype, "fail"
    )
    result.features = case.features(dtype)
    not_taken(result, [word for word, on in needs.items() if on], accepts)
    return result


def not_taken(result: CaseResult, words: object, accepts: set[str] | None) -> bool:
    """Whether fn's signature lacks a keyword of `words` (the case is then unsupported)."""
    missing = [w for w in words if accepts is not None and w not in accepts]
    if missing:
        result.status, result.message = "unsupported", f"fn takes no {missing[0]} keyword"
    return bool(missing)


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


__all__ = ["Kind", "allowed_error", "finish", "run_checks"]

"""The checker's cases as test parameters, and one case run as an assertion.

    @pytest.mark.parametrize("case", attention_cases())   # ids: the case names
    def test_my_kernel(case):
        assert_attention_close(my_attention, case)

Each call runs one case through the checker's one runner (doors.Plan.run_one): the same
inputs, bounds and diagnosis as `scratch.check`, one case at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from scratch.bounds.tolerance import check_dtype
from scratch.checker.cases import CASE_SETS, Case
from scratch.checker.doors import (
    check,
    check_backward,
    check_variants,
    check_variants_backward,
    checked_cases,
)
from scratch.checker.report import CaseResult, CheckReport
from scratch.ops.validate import check_choice

# the kinds of case (doors.checked_cases) and the check that runs each
DOORS = {
    "forward": check,
    "backward": check_backward,
    "variants": check_variants,
    "variants-backward": check_variants_backward,
}


class AttentionMismatch(AssertionError):
    """A case failed: the message is the checker's report of it."""


@dataclass(frozen=True)
class AttentionCase:
    """A checker case in the dtype it was made for; pytest names a parameter by its __name__
    (the case's name), so `parametrize("case", attention_cases())` needs no ids."""

    case: Case
    dtype: str

    @property
    def __name__(self) -> str:  # pytest reads it for the test's id
        return self.case.name

    @property
    def name(self) -> str:
        """The case's name: 'causal-square', 'window-decode', ..."""
        return self.case.name


def attention_cases(
    *, dtype: str = "float32", cases: str = "standard", variants: bool = False,
    backward: bool = False,
) -> list[AttentionCase]:  # fmt: skip
    """The cases `scratch.check` runs (check_backward's with backward, check_variants' with
    variants, both: check_variants_backward's) for a kernel in `dtype`."""
    dtype = check_dtype(dtype)
    kind = kind_of(variants, backward)
    if kind != "forward" and cases != "standard":
        raise ValueError(f"cases: {kind} checks have the standard cases only, found {cases!r}")
    check_choice(cases, "cases", CASE_SETS)
    return [AttentionCase(c, dtype) for c in checked_cases(kind, dtype, cases)]


def kind_of(variants: bool, backward: bool) -> str:
    """'forward', 'backward', 'variants' or 'variants-backward'."""
    if variants:
        return "variants-backward" if backward else "variants"
    return "backward" if backward else "forward"


def case_kind(case: Case) -> str:
    """The kind of a case: a variant case has masks and scores' changes, a backward case a
    grad_output."""
    from scratch.checker.variant_cases import VariantCase

    return kind_of(isinstance(case, VariantCase), case.grad_output)


def assert_attention_close(
    kernel: Callable, case: AttentionCase | Case, *, seed: int = 0, dtype: str | None = None,
    **settings: object,
) -> CaseResult:  # fmt: skip
    """Run kernel on one case as `scratch.check` would (check_backward, check_variants or
    check_variants_backward for such a case); AssertionError with the case's report, its
    diagnosis and worst element when it fails.

    `settings` are the check's own (array, device, masked_rows, require, variant_style, ...);
    dtype is the AttentionCase's (a bare Case: float32 unless given). Returns the case's
    result: status 'pass', or 'unsupported' when the kernel declined it (NotImplementedError,
    or a keyword it does not take)."""
    if isinstance(case, AttentionCase):
        case, dtype = case.case, dtype or case.dtype
    if not isinstance(case, Case):
        raise TypeError(
            f"case: expected an AttentionCase (attention_cases()) or a checker Case, found "
            f"{type(case).__name__}"
        )
    plan = DOORS[case_kind(case)].plan(kernel, seed=seed, dtype=dtype or "float32", **settings)
    return outcome(plan.run_one(case), case, seed)


def outcome(report: CheckReport, case: Case, seed: int) -> CaseResult:
    """The one case's result in `report` (Plan.run_one); AttentionMismatch (an AssertionError)
    with the report when it fails."""
    result = report.cases[0]
    if result.status == "fail":
        raise AttentionMismatch(failure_text(report, case, seed))
    return result


def failure_text(report: CheckReport, case: Case, seed: int) -> str:
    """What failed first (the diagnosis, else the case's message), the worst element, then the
    checker's report of the one case."""
    result = report.cases[0]
    found = worst_element(result, case, seed)
    lines = [
        f"{case.name} ({result.dtype}, seed {seed}): {report.diagnosis or result.message}",
        *([f"worst element: {found}"] if found else []),
        str(report).rstrip("\n"),
    ]
    return "\n".join(lines)


def worst_element(result: CaseResult, case: Case, seed: int) -> str | None:
    """'output[0, 3, 1] off by 0.42': the largest |output - truth| (NaN counts as largest); a
    backward case's dq where dq holds the largest error; None where not measured."""
    if result.diff is None or math.isnan(result.max_error):
        return None
    at, err = largest(result.diff)
    if at is None:
        return None
    name = "output"
    if case.grad_output:  # Backward keeps dq's differences only
        if not (err == result.max_error or math.isinf(result.max_error) and math.isinf(err)):
            return None
        name = "dq"
    if case.rows and not case.grad_output:  # the sampled rows: index back to the query row
        from scratch.core.rows import sample_rows

        at = (*at[:-2], sample_rows(case.q[-2], case.rows, seed)[at[-2]], at[-1])
    where = f"{name}[{', '.join(map(str, at))}]"
    off = "NaN or inf where the truth is a number" if math.isinf(err) else f"off by {err:.3g}"
    return f"{where} {off}"


def largest(nested: list, at: tuple[int, ...] = ()) -> tuple[tuple[int, ...] | None, float]:
    """The index and value of the largest entry of nested lists (NaN as inf)."""
    best_at, best = None, -1.0
    for n, x in enumerate(nested):
        if isinstance(x, list):
            found_at, found = largest(x, (*at, n))
        else:
            found_at, found = (*at, n), math.inf if math.isnan(x) else x
        if found_at is not None and found > best:
            best_at, best = found_at, found
    return best_at, best


__all__ = [
    "DOORS",
    "AttentionCase",
    "AttentionMismatch",
    "assert_attention_close",
    "attention_cases",
    "case_kind",
    "outcome",
    "kind_of",
]

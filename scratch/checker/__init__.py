"""Point the checker at your own attention kernel: seeded cases, error bounds, a diagnosis.

    report = scratch.check(my_attention, array="torch", dtype="float16")
    print(report)            # one row per case: shapes, options, max error, bound, verdict
    report.diagnosis         # e.g. "missing scale: scores not multiplied by 1/sqrt(d)"

Modules: cases (the seeded cases: one Case type; a backward case is a case with a grad_output,
a variant case one with a variant's registered masks and parameters, variant_cases), arrays
(the caller's array types; the inputs made in them once per case), doors (check,
check_backward, check_variants, check_variants_backward: settings and the kind of case, a Plan
run whole or case by case, as scratch.testing runs it), run
(the one runner), the kinds of case it runs (forward, backward_run, variant_run: inputs, call,
judgement; the last two need numpy and are imported on first use), prepare / variant_prepare
(inputs, ground truth and bound per case, a backward case's gradients too), reference /
backward_reference (correct kernels in the checked dtype: the rule's yardstick), mistake (one
Mistake record, one diagnosis engine), variants (the planted forward kernel) and the
*diagnosis modules (the catalogues of known mistakes), raised (what a kernel raised: a
failure, or NotImplementedError declining a case), ignored, report (one CheckReport for every
kind), cli.
"""

from scratch.checker.cases import FEATURES, Case, full_cases, large_cases, standard_cases
from scratch.checker.cli import load, main
from scratch.checker.doors import check, check_backward, check_variants, check_variants_backward
from scratch.checker.report import CaseResult, CheckReport

__all__ = [
    "check_backward",
    "check_variants",
    "check_variants_backward",
    "FEATURES",
    "Case",
    "CaseResult",
    "CheckReport",
    "check",
    "full_cases",
    "large_cases",
    "load",
    "main",
    "standard_cases",
]

"""Point the checker at your own attention kernel: seeded cases, error bounds, a diagnosis.

    report = scratch.check(my_attention, array="torch", dtype="float16")
    print(report)            # one row per case: shapes, options, max error, bound, verdict
    report.diagnosis         # e.g. "missing scale: scores not multiplied by 1/sqrt(d)"

Modules: cases (the seeded cases), arrays (the caller's array types), prepare (inputs, ground
truth and bound per case), reference (correct kernels in the checked dtype: the rule's
yardstick), variants and diagnosis (known mistakes), run (check itself), raised (what a
kernel raised: a failure, or NotImplementedError declining a case), report, cli.
The backward checker (`check_backward`, needs numpy): backward_cases, backward_reference,
backward_diagnosis, backward_run; imported on first use so the forward checker runs without numpy.
The variant checker (`check_variants`, needs numpy): variant_cases, variant_numpy,
variant_prepare, variant_keywords, variant_diagnosis, variant_run, and for gradients
variant_numpy_backward, variant_backward_run (`check_variants_backward`); imported on first use.
"""

from .cases import FEATURES, Case, full_cases, large_cases, standard_cases
from .cli import load, main
from .report import CaseResult, CheckReport
from .run import check


def __getattr__(name: str) -> object:
    """check_backward, imported on first use (it needs numpy)."""
    if name == "check_backward":
        from .backward_run import check_backward

        return check_backward
    if name == "check_variants":
        from .variant_run import check_variants

        return check_variants
    if name == "check_variants_backward":
        from .variant_backward_run import check_variants_backward

        return check_variants_backward
    raise AttributeError(f"module 'scratch.checker' has no attribute {name!r}")


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

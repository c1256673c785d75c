"""Point the checker at your own attention kernel: seeded cases, error bounds, a diagnosis.

    report = scratch.check(my_attention, array="torch", dtype="float16")
    print(report)            # one row per case: shapes, options, max error, bound, verdict
    report.diagnosis         # e.g. "missing scale: scores not multiplied by 1/sqrt(d)"

Modules: cases (the seeded cases), arrays (the caller's array types), prepare (inputs, ground
truth and bound per case), reference (correct kernels in the checked dtype: the rule's
yardstick), variants and diagnosis (known mistakes), run (check itself), report, cli.
"""

from .cases import Case, full_cases, large_cases, standard_cases
from .cli import main
from .report import CaseResult, CheckReport
from .run import check

__all__ = [
    "Case",
    "CaseResult",
    "CheckReport",
    "check",
    "full_cases",
    "large_cases",
    "main",
    "standard_cases",
]

"""Sweep FlashAttention-interface kernels over many seeds: false alarms of the correct kernels,
and how each planted mistake is caught and named (named / unnamed / misnamed / not caught).

    python tests/checker_flash_attn_sweep.py FIRST END   # seeds FIRST .. END - 1

The suite (tests/test_checker_flash_attn_interface.py) runs seeds 0-1 of the same kernels.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch.checker import check_variants  # noqa: E402
from tests.flash_attn_kernels import make_reference, make_tiled, make_varlen  # noqa: E402
from tests.test_checker_flash_attn_interface import MISTAKES, correct_kernels  # noqa: E402

MAKERS = {
    "reference": lambda bug: make_reference(bug),
    "tiled": lambda bug: make_tiled(bug),
    "varlen": lambda bug: make_varlen(make_reference(), bug),
}


def sweep(first: int, end: int) -> None:
    """Print the false alarms and the mistakes' table for seeds first .. end - 1."""
    checks, alarms = 0, []
    outcome = {m[:2]: Counter() for m in MISTAKES}
    for seed in range(first, end):
        for dtype in ("float32", "float64"):
            for name, (fn, array) in correct_kernels().items():
                checks += 1
                if not check_variants(fn, array=array, dtype=dtype, seed=seed):
                    alarms.append((name, dtype, seed))
            for kernel, bug, _, words in MISTAKES:
                report = check_variants(MAKERS[kernel](bug), dtype=dtype, seed=seed)
                if report:
                    said = "not caught"
                elif report.diagnosis is None:
                    said = "unnamed"
                else:
                    said = "named" if report.diagnosis.startswith(words) else "misnamed"
                outcome[kernel, bug][said] += 1
                if said == "misnamed":
                    print(f"misnamed {kernel} {bug} {dtype} seed {seed}: {report.diagnosis}")
    print(f"seeds {first}-{end - 1}: {checks} correct checks, {len(alarms)} false alarms {alarms}")
    for (kernel, bug), counts in outcome.items():
        print(f"  {kernel:9} {bug:15} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    sweep(int(sys.argv[1]), int(sys.argv[2]))

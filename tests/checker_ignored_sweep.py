"""Kernels that ignore a keyword, over many seeds (not run by pytest): named / unnamed / misnamed.

    PYTHONPATH=. python tests/checker_ignored_sweep.py [first_seed] [end_seed]

Every kernel of tests/ignored_kernels.py on seeds first..end-1: named when the failing cases'
names are exactly the expected ones (none, where none is expected), unnamed when there are
none, misnamed otherwise; and the correct kernels, which must pass.
"""

from __future__ import annotations

import sys

from scratch.checker import check, check_variants
from tests.ignored_kernels import CORRECT, FORWARD, VARIANTS


def outcome(report, want: tuple[str, ...]) -> str:
    """'passed', 'named', 'unnamed' or 'misnamed'."""
    if report:
        return "passed"
    found = {c.diagnosis for c in report.failed if c.diagnosis}
    if found == set(want):
        return "named"
    return "unnamed" if not found else "misnamed"


def main(first: int = 0, end: int = 10) -> int:
    """Print a row per kernel; 0 when every kernel is named on every seed and none passes."""
    seeds = range(first, end)
    total = {"passed": 0, "named": 0, "unnamed": 0, "misnamed": 0}
    rows = [(n, fn, array, None, want) for n, (fn, array, want) in FORWARD.items()]
    rows += [(n, fn, array, style, want) for n, (fn, style, array, want) in VARIANTS.items()]
    for name, fn, array, style, want in rows:
        counts = dict.fromkeys(total, 0)
        for seed in seeds:
            if style is None:
                report = check(fn, array=array, seed=seed)
            else:
                report = check_variants(fn, variant_style=style, array=array, seed=seed)
            counts[outcome(report, want)] += 1
        print(f"{name:<40} " + " ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
        total = {k: total[k] + counts[k] for k in total}
    alarms = 0
    for name, (fn, how) in CORRECT.items():
        for seed in seeds:
            if how in ("flash", "flex"):
                report = check_variants(fn, variant_style=how, seed=seed)
            else:
                report = check(fn, array=how, seed=seed)
            if not report:
                alarms += 1
                print(f"false alarm: {name}, seed {seed}: {report.verdict}")
    print("total " + " ".join(f"{k} {v}" for k, v in total.items()) + f"; false alarms {alarms}")
    return int(total["named"] != sum(total.values()) or alarms > 0)


if __name__ == "__main__":
    raise SystemExit(main(*(int(a) for a in sys.argv[1:3])))

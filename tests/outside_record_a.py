"""Outside slips in RoPE, softcap, ALiBi, chunks and documents over many seeds (not run by pytest).

    PYTHONPATH=. python tests/outside_record_a.py [mistake_seeds] [correct_seeds]

Runs every planted slip of tests/outside_kernels_a.py (float32) on seeds 0..mistake_seeds-1
(default 50) and every correct kernel there (float32 and float64) on seeds 0..correct_seeds-1
(default 200) through check_variants; prints one row per slip (caught, named, unnamed,
misnamed) and the false alarms. Exit status 0 when nothing passed, nothing was misnamed and no
correct kernel failed.

Recorded (at 78687e5, nice -n 5 on a 2-core host shared with another record and a CI run,
1684 s): 38 slips x seeds 0-49, 1900 of 1900 named, 0 unnamed, 0 misnamed, 0 passed; 0 false
alarms in 2800 checks (7 correct kernels x float32 and float64 x seeds 0-199).
"""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter

import torch

from scratch.checker import check_variants
from tests.checker_outside import outcome, print_mistake_rows
from tests.outside_kernels_a import CORRECT_KERNELS, PLANTED

DTYPES = ("float32", "float64")


def planted(fn, bug: str):
    """fn with `bug` fixed, its signature (the keywords the checker passes) kept."""
    part = functools.wraps(fn)(functools.partial(fn, bug=bug))
    part.__name__ = part.__qualname__ = f"{fn.__name__}_{bug}"
    return part


def mistakes() -> dict[str, tuple]:
    """name -> (kernel, words) for every planted slip."""
    return {f"{fn.__name__} {bug}": (planted(fn, bug), words) for fn, bug, words in PLANTED}


def run_mistake(fn, words: str, seed: int) -> tuple[str, object]:
    """(outcome, report) of one planted slip on one seed (float32, torch arrays)."""
    report = check_variants(fn, array="torch", dtype="float32", seed=seed)
    return outcome(report, words), report


def run_correct(fn, dtype: str, seed: int) -> object:
    """The report of one correct kernel on one seed."""
    return check_variants(fn, array="torch", dtype=dtype, seed=seed)


def main(mistake_seeds: int = 50, correct_seeds: int = 200) -> int:
    """Print the table; 0 when nothing passed or was misnamed and no false alarm."""
    torch.set_num_threads(1)  # tiny tensors: one thread is 3-5x faster on a shared machine
    start = time.time()
    rows: dict[str, Counter] = {}
    names: dict[str, Counter] = {}
    alarms: Counter = Counter()
    for seed in range(max(mistake_seeds, correct_seeds)):
        if seed < mistake_seeds:
            for name, (fn, words) in mistakes().items():
                found, report = run_mistake(fn, words, seed)
                rows.setdefault(name, Counter())[found] += 1
                if found == "misnamed":
                    names.setdefault(name, Counter())[report.diagnosis] += 1
                if found != "named":
                    print(f"seed {seed} {name}: {found}: {report.diagnosis}", flush=True)
        if seed < correct_seeds:
            for fn in CORRECT_KERNELS:
                for dtype in DTYPES:
                    report = run_correct(fn, dtype, seed)
                    if not report:
                        alarms[f"{fn.__name__} {dtype}"] += 1
                        print(f"seed {seed} {fn.__name__} {dtype}: {report.verdict}", flush=True)
        print(f"seed {seed} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    print(
        f"planted slips: seeds 0..{mistake_seeds - 1}; "
        f"correct kernels: seeds 0..{correct_seeds - 1}"
    )
    print(f"{'planted mistake':<42} caught named unnamed misnamed")
    print_mistake_rows(rows, names, mistake_seeds)
    total = Counter()
    for c in rows.values():
        total.update(c)
    runs = len(rows) * mistake_seeds
    print(
        f"total: {runs} runs, {runs - total['passed']} caught, {total['named']} named "
        f"({100 * total['named'] / max(runs, 1):.1f}%), {total['unnamed']} unnamed, "
        f"{total['misnamed']} misnamed, {total['passed']} passed"
    )
    checks = len(CORRECT_KERNELS) * len(DTYPES) * correct_seeds
    print(f"false alarms: {sum(alarms.values())} of {checks} checks {dict(alarms) or ''}")
    bad = total["passed"] or total["misnamed"] or alarms
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(*map(int, sys.argv[1:3])))

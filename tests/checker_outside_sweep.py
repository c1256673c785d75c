"""Outside kernels over many seeds (not run by pytest): caught / named / unnamed / misnamed.

    PYTHONPATH=. python tests/checker_outside_sweep.py [first_seed] [end_seed] [cases] [only]

only: 'mistakes' or 'correct' runs just that half (two processes share the work).

Every planted mistake of tests/checker_outside.py (forward and backward) and every correct
outside kernel on seeds first..end-1; prints one row per mistake and the false alarms. The
numbers are quoted in the README's checker section.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from scratch.checker import check, check_backward
from tests.checker_outside import (
    BACKWARD,
    CORRECT,
    CORRECT_BACKWARD,
    FORWARD,
    outcome,
    print_mistake_rows,
)


def main(first: int = 0, end: int = 50, cases: str = "standard", only: str = "") -> int:
    """Print the table; 0 when no false alarm, nothing passed and nothing misnamed."""
    start = time.time()
    rows: dict[str, Counter] = {}
    names: dict[str, Counter] = {}
    alarms: Counter = Counter()
    for seed in range(first, end):
        for name, (fn, dtype, policy, words) in {} if only == "correct" else FORWARD.items():
            r = check(fn, array="numpy", dtype=dtype, seed=seed, masked_rows=policy, cases=cases)
            found = outcome(r, words)
            rows.setdefault(name, Counter())[found] += 1
            if found == "misnamed":
                names.setdefault(name, Counter())[r.diagnosis] += 1
            if found != "named":
                print(f"seed {seed} {name}: {found}: {r.diagnosis}", flush=True)
        for name, (fn, dtype, words) in {} if only == "correct" else BACKWARD.items():
            r = check_backward(None, backward=fn, array="numpy", dtype=dtype, seed=seed)
            found = outcome(r, words)
            rows.setdefault("backward " + name, Counter())[found] += 1
            if found == "misnamed":
                names.setdefault("backward " + name, Counter())[r.diagnosis] += 1
        for name, (fn, array, dtype, policy) in {} if only == "mistakes" else CORRECT.items():
            r = check(fn, array=array, dtype=dtype, seed=seed, masked_rows=policy, cases=cases)
            if not r:
                alarms[name] += 1
                print(f"seed {seed} {name}: {[c.name for c in r.failed]}", flush=True)
        for name, (fn, dtype) in {} if only == "mistakes" else CORRECT_BACKWARD.items():
            if not check_backward(None, backward=fn, array="numpy", dtype=dtype, seed=seed):
                alarms[name] += 1
                print(f"seed {seed} {name}: false alarm", flush=True)
        print(f"seed {seed} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    n = end - first
    print(f"seeds {first}..{end - 1} ({n}), cases={cases}")
    print(f"{'mistake':<42} caught named unnamed misnamed")
    print_mistake_rows(rows, names, n)
    kernels = len(CORRECT) + len(CORRECT_BACKWARD)
    print(f"false alarms: {dict(alarms) or 'none'} over {kernels} correct kernels")
    bad = any(c["passed"] or c["misnamed"] for c in rows.values()) or alarms
    return 1 if bad else 0


if __name__ == "__main__":
    args = sys.argv[1:5]
    raise SystemExit(main(*map(int, args[:2]), *args[2:]))

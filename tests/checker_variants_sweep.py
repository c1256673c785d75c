"""Variant kernels over many seeds (not run by pytest): caught / named / unnamed / misnamed.

    PYTHONPATH=. python tests/checker_variants_sweep.py [first_seed] [end_seed] [only]

only: 'mistakes' or 'correct' runs just that half of the forward (two processes share the
work); 'backward' runs the backward catalogue and correct backward kernels instead;
'backward-correct' only the correct backward kernels (the false-alarm sweep).

Every planted mistake of tests/checker_variants.py and every correct kernel there on seeds
first..end-1; prints one row per mistake and the false alarms. The numbers are quoted in the
README's checker section (Variants).
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from scratch.checker import check_variants, check_variants_backward
from tests.checker_outside import outcome, print_mistake_rows
from tests.checker_variants import BACKWARD_CORRECT, BACKWARD_MISTAKES, CORRECT, MISTAKES


def main(first: int = 0, end: int = 200, only: str = "") -> int:
    """Print the table; 0 when no false alarm, nothing passed and nothing misnamed."""
    start = time.time()
    rows: dict[str, Counter] = {}
    names: dict[str, Counter] = {}
    alarms: Counter = Counter()
    mistakes, correct, check = MISTAKES, CORRECT, check_variants
    if only.startswith("backward"):
        mistakes, correct, check = BACKWARD_MISTAKES, BACKWARD_CORRECT, check_variants_backward
    if only == "backward-correct":
        mistakes = {}
    for seed in range(first, end):
        for name, (fn, array, dtype, words) in {} if only == "correct" else mistakes.items():
            r = check(fn, array=array, dtype=dtype, seed=seed)
            found = outcome(r, words)
            rows.setdefault(name, Counter())[found] += 1
            if found == "misnamed":
                names.setdefault(name, Counter())[r.diagnosis] += 1
            if found not in ("named", "unnamed" if words is None else "named"):
                print(f"seed {seed} {name}: {found}: {r.diagnosis}", flush=True)
        for name, (fn, array, dtype) in {} if only == "mistakes" else correct.items():
            r = check(fn, array=array, dtype=dtype, seed=seed)
            if not r:
                alarms[name] += 1
                print(f"seed {seed} {name}: {[c.name for c in r.failed]}", flush=True)
        print(f"seed {seed} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    n = end - first
    print(f"seeds {first}..{end - 1} ({n})")
    if rows:
        print(f"{'planted mistake':<42} caught named unnamed misnamed")
    print_mistake_rows(rows, names, n)
    if only != "mistakes":
        print(f"false alarms: {dict(alarms) or 'none'} over {len(correct)} correct kernels")
    bad = any(c["passed"] or c["misnamed"] for c in rows.values()) or alarms
    return 1 if bad else 0


if __name__ == "__main__":
    args = sys.argv[1:4]
    raise SystemExit(main(*map(int, args[:2]), *args[2:]))

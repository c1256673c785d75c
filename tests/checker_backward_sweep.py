"""The backward checker's false-alarm sweep (not run by pytest): correct kernels, seeds 0-199.

    PYTHONPATH=. python tests/checker_backward_sweep.py [first_seed] [end_seed]

Also runs every planted mistake on the same seeds and counts named, unnamed and misnamed
diagnoses. The result is quoted in the README's "Checking a backward kernel" section.
"""

from __future__ import annotations

import sys
import time

from scratch.checker import check_backward
from tests.checker_backward_catalogue import CORRECT, PLANTED


def verdict(report, words: str) -> str:
    """'named', 'unnamed', 'misnamed' or 'passed' (a planted mistake no case caught)."""
    if report:
        return "passed"
    first = (report.diagnosis or "").split("; ")[0]
    return "named" if words in first else ("misnamed" if first else "unnamed")


def main(first: int = 0, end: int = 200) -> int:
    """Check every catalogue kernel on seeds first..end-1; 0 when no false alarm, none misnamed."""
    start = time.time()
    alarms: dict[str, list[int]] = {name: [] for name in CORRECT}
    counts = {"named": 0, "unnamed": 0, "misnamed": 0, "passed": 0}
    for seed in range(first, end):
        for name, (fn, backward, array, dtype) in CORRECT.items():
            report = check_backward(fn, backward=backward, array=array, dtype=dtype, seed=seed)
            if not report:
                alarms[name].append(seed)
                failed = ", ".join(f"{c.name}: {c.message}" for c in report.failed)
                print(f"seed {seed} {name}: {failed}", flush=True)
        for name, (fn, backward, array, dtype, words) in PLANTED.items():
            report = check_backward(fn, backward=backward, array=array, dtype=dtype, seed=seed)
            found = verdict(report, words)
            counts[found] += 1
            if found != "named":
                print(f"seed {seed} planted {name}: {found}: {report.diagnosis}", flush=True)
        print(f"seed {seed} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    print(f"{len(CORRECT)} correct backward kernels x seeds {first}..{end - 1}:")
    for name, seeds in alarms.items():
        print(f"  {name:<28} {len(seeds)} false alarms {seeds if seeds else ''}")
    print(f"{len(PLANTED)} planted mistakes x {end - first} seeds: {counts}")
    return 1 if any(alarms.values()) or counts["misnamed"] or counts["passed"] else 0


if __name__ == "__main__":
    raise SystemExit(main(*map(int, sys.argv[1:3])))

"""The false-alarm sweep (not run by pytest): every correct kernel, seeds 0-199, cases='full'.

    PYTHONPATH=. python tests/checker_sweep.py [first_seed] [end_seed]

'full' holds every 'standard' case, so a kernel that passes 'full' on a seed passes 'standard'
too; failing cases are printed by name so standard and full-only failures can be told apart.
The result is quoted in the README's checker section.
"""

from __future__ import annotations

import sys
import time

from scratch.checker import check
from tests.checker_catalogue import CORRECT


def main(first: int = 0, end: int = 200) -> int:
    """Check every correct kernel on seeds first..end-1; print false alarms; 0 when none."""
    start = time.time()
    alarms: dict[str, list[int]] = {name: [] for name in CORRECT}
    for seed in range(first, end):
        for name, (fn, array, dtype) in CORRECT.items():
            report = check(fn, array=array, dtype=dtype, seed=seed, cases="full")
            if not report:
                alarms[name].append(seed)
                failed = ", ".join(f"{c.name}: {c.message}" for c in report.failed)
                print(f"seed {seed} {name}: {failed}", flush=True)
        print(f"seed {seed} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    print(f"{len(CORRECT)} correct kernels x seeds {first}..{end - 1}, cases='full':")
    for name, seeds in alarms.items():
        print(f"  {name:<32} {len(seeds)} false alarms {seeds if seeds else ''}")
    return 1 if any(alarms.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(*map(int, sys.argv[1:3])))

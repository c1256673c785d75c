"""Every checker catalogue over seeds, recorded (not run by pytest): (kernel, seed) -> verdict.

    PYTHONPATH=. python tests/checker_record.py OUT.json [first_seed] [end_seed] [part]

part: 'forward-planted', 'other-planted' (backward and variant mistakes) or 'correct' (every
correct kernel); none: all.
    PYTHONPATH=. python tests/checker_record.py --compare BEFORE.json AFTER.json

Runs the planted mistakes and correct kernels of tests/checker_catalogue.py,
checker_backward_catalogue.py, checker_variants.py, checker_outside.py, ignored_kernels.py and
scratch/learn/mistakes.py, and records for each (catalogue kernel, seed) the verdict (PASS/FAIL),
the report's diagnosis (its name) and each failing case with its own diagnosis. --compare prints
the PASS/FAIL counts per name of both files, the rows whose verdict or name differ grouped by
(row, before, after), and the rows that differ only in their failing cases. Used to show a checker
refactor changed nothing: copy this file into a worktree of the older commit and run it there
from the worktree's root (a commit before the regroup has scratch/mistakes.py, and one without
tests/ignored_kernels.py records no 'ignored' rows).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter


def _jobs(part: str) -> list[tuple[str, object]]:
    """(row name, a function seed -> report) for every catalogue kernel; part selects some."""
    from scratch.checker import check, check_backward, check_variants, check_variants_backward
    from tests import checker_backward_catalogue as bc
    from tests import checker_catalogue as fc
    from tests import checker_outside as oc
    from tests import checker_variants as vc

    try:
        from scratch.learn import mistakes
    except ImportError:  # a commit before the folders were regrouped
        from scratch import mistakes  # type: ignore[no-redef]
    try:
        from tests import ignored_kernels as ik
    except ImportError:  # a commit before the ignored-keyword names
        ik = None

    jobs: list[tuple[str, object]] = []

    def add(group: str, name: str, call) -> None:
        jobs.append((f"{group}: {name}", call))

    for name, (fn, array, dtype, _w) in fc.PLANTED.items():
        add("forward planted", name, lambda s, f=fn, a=array, d=dtype: check(
            f, array=a, dtype=d, seed=s))  # fmt: skip
    for name, (fn, array, dtype) in fc.CORRECT.items():
        add("forward correct", name, lambda s, f=fn, a=array, d=dtype: check(
            f, array=a, dtype=d, seed=s))  # fmt: skip
    for name in mistakes.NAMES:
        planted = mistakes.kernel(name)
        add("mistakes", name, lambda s, f=planted: check(f, array="numpy", seed=s))
    for name, (fn, bw, array, dtype, _w) in bc.PLANTED.items():
        add("backward planted", name, lambda s, f=fn, b=bw, a=array, d=dtype: check_backward(
            f, backward=b, array=a, dtype=d, seed=s))  # fmt: skip
    for name, (fn, bw, array, dtype) in bc.CORRECT.items():
        add("backward correct", name, lambda s, f=fn, b=bw, a=array, d=dtype: check_backward(
            f, backward=b, array=a, dtype=d, seed=s))  # fmt: skip
    for name, (fn, array, dtype, _w) in vc.MISTAKES.items():
        add("variant planted", name, lambda s, f=fn, a=array, d=dtype: check_variants(
            f, array=a, dtype=d, seed=s))  # fmt: skip
    for name, (fn, array, dtype) in vc.CORRECT.items():
        add("variant correct", name, lambda s, f=fn, a=array, d=dtype: check_variants(
            f, array=a, dtype=d, seed=s))  # fmt: skip
    for name, (fn, array, dtype, _w) in vc.BACKWARD_MISTAKES.items():
        add("variant backward planted", name, lambda s, f=fn, a=array, d=dtype: (
            check_variants_backward(f, array=a, dtype=d, seed=s)))  # fmt: skip
    for name, (fn, array, dtype) in vc.BACKWARD_CORRECT.items():
        add("variant backward correct", name, lambda s, f=fn, a=array, d=dtype: (
            check_variants_backward(f, array=a, dtype=d, seed=s)))  # fmt: skip
    for name, (fn, dtype, policy, _w) in oc.FORWARD.items():
        add("outside planted", name, lambda s, f=fn, d=dtype, p=policy: check(
            f, array="numpy", dtype=d, seed=s, masked_rows=p))  # fmt: skip
    for name, (fn, array, dtype, policy) in oc.CORRECT.items():
        add("outside correct", name, lambda s, f=fn, a=array, d=dtype, p=policy: check(
            f, array=a, dtype=d, seed=s, masked_rows=p))  # fmt: skip
    for name, (fn, dtype, _w) in oc.BACKWARD.items():
        add("outside backward planted", name, lambda s, f=fn, d=dtype: check_backward(
            None, backward=f, array="numpy", dtype=d, seed=s))  # fmt: skip
    for name, (fn, dtype) in oc.CORRECT_BACKWARD.items():
        add("outside backward correct", name, lambda s, f=fn, d=dtype: check_backward(
            None, backward=f, array="numpy", dtype=d, seed=s))  # fmt: skip
    for name, (fn, array, _want) in (ik.FORWARD if ik else {}).items():
        add("ignored", name, lambda s, f=fn, a=array: check(f, array=a, seed=s))
    for name, (fn, style, array, _want) in (ik.VARIANTS if ik else {}).items():
        add("ignored variant", name, lambda s, f=fn, st=style, a=array: check_variants(
            f, variant_style=st, array=a, seed=s))  # fmt: skip
    for name, (fn, how) in (ik.CORRECT if ik else {}).items():
        if how in ("flash", "flex"):
            call = lambda s, f=fn, h=how: check_variants(f, variant_style=h, seed=s)  # noqa: E731
        else:
            call = lambda s, f=fn, h=how: check(f, array=h, seed=s)  # noqa: E731
        add("ignored correct", name, call)
    correct = ("forward correct", "backward correct", "variant correct", "variant backward correct",
               "outside correct", "outside backward correct", "ignored correct")  # fmt: skip
    forward = ("forward planted", "mistakes", "outside planted", "ignored:")
    if part == "correct":
        jobs = [(n, c) for n, c in jobs if n.startswith(correct)]
    elif part == "forward-planted":
        jobs = [(n, c) for n, c in jobs if n.startswith(forward)]
    elif part == "other-planted":
        jobs = [(n, c) for n, c in jobs if not n.startswith(correct + forward)]
    return jobs


def record(report) -> dict:
    """The verdict, the name and the failing cases (name, own diagnosis) of one report."""
    return {
        "verdict": "PASS" if report else "FAIL",
        "name": report.diagnosis or "",
        "failed": [[c.name, c.diagnosis or ""] for c in report.failed],
    }


def main(out: str, first: int = 0, end: int = 50, part: str = "") -> int:
    """Record every job on seeds first..end-1 into `out` (JSON, key 'row | seed')."""
    start = time.time()
    rows: dict[str, dict] = {}
    jobs = _jobs(part)
    for seed in range(first, end):
        for name, call in jobs:
            rows[f"{name} | {seed}"] = record(call(seed))
        print(f"seed {seed} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
        with open(out, "w") as f:
            json.dump(rows, f, indent=0, sort_keys=True)
    return 0


def _counts(rows: dict) -> Counter:
    return Counter((r["name"] or "(none)", r["verdict"]) for r in rows.values())


def compare(before_path: str, after_path: str) -> int:
    """Print PASS/FAIL per name before and after, then what differs; 0 when nothing does.

    Only the rows both files hold are compared (a record still running has fewer seeds). Rows
    whose verdict or name differ are grouped by (row, before, after) with their seed count; rows
    alike in both but for their failing cases are counted per row."""
    before, after = (json.load(open(p)) for p in (before_path, after_path))
    keys = sorted(set(before) & set(after))
    before, after = ({k: rows[k] for k in keys} for rows in (before, after))
    cb, ca = _counts(before), _counts(after)
    print(f"{'name':<70} {'PASS before/after':>18} {'FAIL before/after':>18}")
    for name in sorted({n for n, _ in cb} | {n for n, _ in ca}):
        p = f"{cb[(name, 'PASS')]}/{ca[(name, 'PASS')]}"
        f = f"{cb[(name, 'FAIL')]}/{ca[(name, 'FAIL')]}"
        print(f"{name[:70]:<70} {p:>18} {f:>18}")
    differ = [k for k in keys if before[k] != after[k]]
    names = [k for k in keys if _short(before[k]) != _short(after[k])]
    grouped = Counter((_row(k), *_short(before[k]), *_short(after[k])) for k in names)
    for (row, v0, n0, v1, n1), count in sorted(grouped.items()):
        print(f"DIFFERS {row} ({count} seeds):\n  before {v0} {n0!r}\n  after  {v1} {n1!r}")
    named = set(names)
    cases_only = Counter(_row(k) for k in differ if k not in named)
    for row, count in sorted(cases_only.items()):
        print(f"FAILING CASES DIFFER {row} ({count} seeds): verdict and name alike")
    seeds = sorted({int(k.rsplit(" | ", 1)[1]) for k in keys})
    verdicts = sum(before[k]["verdict"] != after[k]["verdict"] for k in keys)
    print(f"rows compared {len(keys)} (seeds {seeds[0]}..{seeds[-1]}, {len(seeds)} seeds); "
          f"verdict differs: {verdicts}; verdict or name differ: {len(names)}; any field "
          f"(failing cases too) differs: {len(differ)}")  # fmt: skip
    return 1 if differ else 0


def _row(key: str) -> str:
    return key.rsplit(" | ", 1)[0]


def _short(row: dict) -> tuple:
    return row["verdict"], row["name"]


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        raise SystemExit(compare(sys.argv[2], sys.argv[3]))
    args = sys.argv[1:5]
    raise SystemExit(main(args[0], *map(int, args[1:3]), *args[3:]))

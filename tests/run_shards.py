"""Run the suite as two pytest processes at once, split by file; fail if either fails or is lost.

`make test` runs `python tests/run_shards.py`. The test files are split into shards of about equal
time (longest first, each to the shard with the least time so far) by `tests/shard_times.json`,
seconds per file measured on this 2-core machine; a file missing from it counts as 1 s. Each
shard is `python -m pytest FILES` in its own process (its lines printed as they come, prefixed
with the shard's number); each writes a JUnit XML file that the runner reads to count its tests.
The run fails when a shard's exit status is not 0, its XML is missing or unreadable, it ran no
test, or (without extra arguments) one of its files ran no test: a lost shard or file cannot
pass silently. A file skipped whole with a reason (an optional extra not installed) has run.
Extra options go to both shards, e.g. `python tests/run_shards.py -x` (a path is refused: the
runner always runs the whole suite).
`--shards N` sets the number of processes; `--record` rewrites the times table from this run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMES = Path(__file__).resolve().parent / "shard_times.json"
UNKNOWN_FILE_S = 1.0  # a file missing from the times table (a new test file)


@dataclass
class Shard:
    """One pytest process: its files, and what its run reported."""

    number: int
    files: list[str]
    expected_s: float = 0.0
    returncode: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    seconds_per_file: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # "test id: first line of its message"


def test_files(root: Path = ROOT) -> list[str]:
    """The suite's test files (pytest's default pattern under tests/), relative to root."""
    return sorted(p.relative_to(root).as_posix() for p in (root / "tests").glob("test_*.py"))


def split(files: list[str], times: dict[str, float], n: int) -> list[Shard]:
    """Longest file first, each to the shard with the least expected time so far."""
    if n < 1:
        raise ValueError(f"shards must be at least 1, got {n}")
    shards = [Shard(i + 1, []) for i in range(min(n, len(files)) or 1)]
    for name in sorted(files, key=lambda f: (-times.get(f, UNKNOWN_FILE_S), f)):
        least = min(shards, key=lambda s: (s.expected_s, s.number))
        least.files.append(name)
        least.expected_s += times.get(name, UNKNOWN_FILE_S)
    return shards


def _relay(shard: Shard, stream, lock: threading.Lock) -> None:
    """Print a shard's output line by line as it comes, each line prefixed with its number."""
    for line in iter(stream.readline, ""):
        with lock:
            sys.stdout.write(f"[{shard.number}] {line.rstrip(chr(10))}\n")  # even a cut-off line
            sys.stdout.flush()
    stream.close()


def _read_report(shard: Shard, xml_path: Path) -> None:
    """Count the shard's tests from its JUnit XML and sum its seconds per file."""
    try:
        tree = ElementTree.parse(xml_path)
    except (OSError, ElementTree.ParseError) as exc:
        shard.problems.append(f"no readable test report ({type(exc).__name__}: {exc})")
        return
    counts = dict.fromkeys(("tests", "passed", "failed", "errors", "skipped"), 0)
    for case in tree.iter("testcase"):
        counts["tests"] += 1
        tags = {child.tag for child in case}
        outcome = next((t for t in ("failure", "error", "skipped") if t in tags), None)
        key = {"failure": "failed", "error": "errors", "skipped": "skipped", None: "passed"}
        counts[key[outcome]] += 1
        if outcome in ("failure", "error"):
            said = next(child for child in case if child.tag == outcome).get("message", "")
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
            shard.failures.append(f"{test_id}: {said.splitlines()[0][:300] if said else outcome}")
        # a file skipped whole at collection (pytest.importorskip of a missing extra) has no
        # classname: its name is the file's dotted path, and its one skip (with the reason) counts
        module = (case.get("classname") or case.get("name", "")).split(".")
        for name in shard.files:
            parts = Path(name).with_suffix("").parts
            if tuple(module[: len(parts)]) == parts:
                spent = shard.seconds_per_file.get(name, 0.0) + float(case.get("time", 0))
                shard.seconds_per_file[name] = spent
    shard.counts = counts


def run(shards: list[Shard], pytest_args: list[str], root: Path = ROOT) -> int:
    """Run the shards at once; print each one's summary; 0 only if every shard passed in full."""
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="shards-") as tmp:
        procs = []
        for shard in shards:
            xml_path = Path(tmp) / f"shard-{shard.number}.xml"
            command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
            command += [f"--junitxml={xml_path}", *pytest_args, *shard.files]
            proc = subprocess.Popen(
                command,
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            relay = threading.Thread(target=_relay, args=(shard, proc.stdout, lock))
            relay.start()
            procs.append((shard, proc, relay, xml_path))
        try:
            for shard, proc, relay, xml_path in procs:
                shard.returncode = proc.wait()
                relay.join()
                _read_report(shard, xml_path)
        finally:  # interrupted: end the shards this run started
            for _, proc, relay, _ in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                relay.join()
    return _summarise(shards, check_files=not pytest_args)


def _summarise(shards: list[Shard], check_files: bool) -> int:
    """Print a line per shard and the verdict; 1 if a shard failed, ran nothing or lost a file."""
    print("\n==== shards ====")
    for shard in shards:
        if shard.returncode != 0:
            shard.problems.append(f"pytest exited with status {shard.returncode}")
        if shard.counts and shard.counts["tests"] == 0:
            shard.problems.append("it ran no test")
        if check_files and shard.counts:
            lost = [f for f in shard.files if f not in shard.seconds_per_file]
            if lost:
                shard.problems.append(f"no test ran from {', '.join(lost)}")
        c = shard.counts
        told = (
            f"{c['tests']} tests: {c['passed']} passed, {c['failed']} failed, "
            f"{c['errors']} errors, {c['skipped']} skipped"
            if c
            else "no report"
        )
        state = "FAILED: " + "; ".join(shard.problems) if shard.problems else "ok"
        print(f"shard {shard.number} ({len(shard.files)} files): {told} -- {state}")
        for failure in shard.failures:  # repeated here: a CI log's tail shows only its last lines
            print(f"  failed {failure}")
    failed = any(s.problems for s in shards)
    total = sum(s.counts.get("tests", 0) for s in shards)
    print(f"{'FAILED' if failed else 'passed'}: {len(shards)} shards, {total} tests in all")
    return 1 if failed else 0


def _is_test_path(arg: str) -> bool:
    """A file or folder of tests (not an option, nor a -k word that happens to name a folder)."""
    path = arg.split("::")[0]
    return (path.endswith(".py") or "/" in path) and (ROOT / path).exists()


def main(argv: list[str]) -> int:
    """Parse --shards N and --record; pass every other argument to pytest."""
    n, record, pytest_args = 2, False, []
    args = iter(argv)
    for arg in args:
        if arg == "--shards":
            n = int(next(args, "0"))
        elif arg == "--record":
            record = True
        elif _is_test_path(arg):
            print(f"run_shards.py: {arg!r} is a path; it runs the whole suite, give options only")
            print(f"(one file or test: python -m pytest {arg})")
            return 2
        else:
            pytest_args.append(arg)
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    shards = split(test_files(), times, n)
    for shard in shards:
        print(f"shard {shard.number}: {len(shard.files)} files, about {shard.expected_s:.0f} s")
    start = time.monotonic()
    status = run(shards, pytest_args)
    print(f"wall time {time.monotonic() - start:.0f} s, load average {os.getloadavg()[0]:.2f}")
    if record:
        measured = {f: round(s, 1) for sh in shards for f, s in sh.seconds_per_file.items()}
        TIMES.write_text(json.dumps(dict(sorted(measured.items())), indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The command line: parse options, run the table, print it with every goal."""

from __future__ import annotations

import argparse
import sys

from scratch.bench import host, plugins
from scratch.bench.checker_goal import checker_timing
from scratch.bench.host import LOAD_WAIT_S
from scratch.bench.model_goal import model_timing
from scratch.bench.report import format_table, load_average
from scratch.bench.table import run_table

SIZES = (64, 256, 1024, 4096, 16384, 32768)
QUICK_SIZES = (16, 64)


def progress_enabled() -> bool:
    """Progress lines go to stderr when it is a terminal."""
    return sys.stderr.isatty()


def _parser() -> argparse.ArgumentParser:
    """The bench's options."""
    parser = argparse.ArgumentParser(
        prog="python -m scratch.bench",
        description="Benchmark: every attention kernel here on the same inputs, one table from "
        "one run.",  # the package's first line (cli must not import its own package: a cycle)
    )
    parser.add_argument("--sizes", help="comma-separated L values (default 64,...,32768)")
    parser.add_argument("--repeats", type=int, help="timed runs per row (default: adaptive, >= 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke test)")
    parser.add_argument("--markdown", action="store_true", help="print a README-ready table")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE for more goals (its BENCH_GOALS; repeatable): gui.app.bench_window "
        "adds the window's recompute at 4096 tokens, as `make bench` does",
    )
    parser.add_argument(
        "--only",
        metavar="NAME",
        help="only a plugin's goals, no table (window: the window's recompute goals at 4096 "
        "tokens, with --plugin gui.app.bench_window)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda adds torch rows on the GPU (when CUDA is present)",
    )
    return parser


def _sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[int, ...]:
    """--sizes as positive integers (each once, in the order given), or the default sizes
    (QUICK_SIZES with --quick)."""
    if not args.sizes:
        return QUICK_SIZES if args.quick else SIZES
    try:
        sizes = tuple(dict.fromkeys(int(s) for s in args.sizes.split(",") if s.strip()))
    except ValueError:
        parser.error(f"--sizes: expected comma-separated integers, found {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        parser.error(f"--sizes: expected positive integers, found {args.sizes!r}")
    return sizes


def _device(device: str) -> str:
    """cuda where torch finds a device, else cpu (said so on stderr)."""
    if device == "cuda":
        from scratch import backends

        if "torch-cuda" not in backends.available():
            print(
                "[bench] --device cuda: no CUDA device here; measuring the CPU only",
                file=sys.stderr,
            )
            return "cpu"
    return device


def _print_goals(goals: list[plugins.Goal], markdown: bool) -> None:
    """One line per goal: status, goal, numbers."""
    for goal, status, detail in goals:
        print(f"{'- ' if markdown else ''}{status}: {goal} ({detail})")


def main(argv: list[str] | None = None) -> int:
    """Parse options, run the table, print it."""
    parser = _parser()
    args = parser.parse_args(argv)
    sizes = _sizes(parser, args)
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats: expected a positive integer, found {args.repeats}")
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else None)
    sets: tuple[plugins.GoalSet, ...] = ()
    for module in args.plugin:
        try:
            sets += plugins.load(module)
        except ValueError as exc:
            parser.error(str(exc))
    device = _device(args.device)
    if args.only is not None:
        only = tuple(s for s in sets if s.name == args.only)
        if not only:
            loaded = ", ".join(s.name for s in sets) or "none"
            parser.error(
                f"--only {args.only}: no plugin's goals of that name (loaded: {loaded}); load "
                f"them with --plugin MODULE (window: --plugin gui.app.bench_window)"
            )
        if args.sizes or args.quick:
            parser.error(
                f"--only {args.only}: measures {only[0].what}; leave out --sizes and --quick"
            )
        _print_goals(plugins.goal_lines(only, True, progress_enabled()), args.markdown)
        print(host.host_line(), load_average())
        return 0
    rows = run_table(
        sizes, repeats, device, progress_enabled(), load_wait_s=0.0 if args.quick else LOAD_WAIT_S
    )
    print(format_table(rows, args.markdown, repeats))
    print(("- " if args.markdown else "") + model_timing(1 if args.quick else 3))
    full = not args.quick and not args.sizes
    if full:  # the checker's own speed (issue 24): about 10 s idle
        _print_goals(checker_timing(), args.markdown)
    _print_goals(plugins.goal_lines(sets, full, progress_enabled()), args.markdown)
    return 0

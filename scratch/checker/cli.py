"""`python -m scratch.check package.module:function [options]`: 0 pass, 1 fail, 2 usage error.

`--backward package.module:function` checks a backward function's (dq, dk, dv) instead, and
`--autograd package.module:function` the gradients torch.autograd takes through a forward.
`--variants` runs the variant cases instead (check_variants, with --backward
check_variants_backward; `--variant-style flash|flex|flash_attn|flash_attn_varlen`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from scratch.checker.arrays import ARRAYS
from scratch.checker.cases import CASE_SETS, FEATURES
from scratch.checker.doors import check, check_backward, check_variants, check_variants_backward
from scratch.checker.variant_layout import INTERFACE


def load(target: str) -> Callable:
    """'package.module:function' (or module:Class.method) -> the function; ValueError if not.

    Args:
        target: "package.module:function" or "package.module:Class.method".

    Returns:
        The function, imported.

    Examples:
        >>> from scratch.checker import load
        >>> load("math:sqrt")(4.0)
        2.0
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"function: expected 'package.module:function', found {target!r}")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"function: cannot import module {module_name!r} ({exc})") from exc
    except SyntaxError as exc:
        raise ValueError(
            f"function: module {module_name!r} has a syntax error: {exc.msg} "
            f"({exc.filename}, line {exc.lineno})"
        ) from exc
    except Exception as exc:  # the module's own code raised while it was imported
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(
            f"function: importing module {module_name!r} raised {type(exc).__name__}: {first}"
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"function: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"function: {target!r} is a {type(obj).__name__}, not a function")
    return obj


def main(argv: list[str] | None = None) -> int:
    """`python -m scratch.check module:function [options]`: 0 pass, 1 fail, 2 bad arguments.

    Args:
        argv: the command line's arguments; None: sys.argv[1:].

    Returns:
        The exit status: 0 pass, 1 fail, 2 bad arguments.
    """
    parser = argparse.ArgumentParser(
        prog="python -m scratch.check",
        description="Check an attention function against the float64 ground truth.",
    )
    parser.add_argument(
        "function", nargs="?", help="the function to check, as package.module:function"
    )
    parser.add_argument(
        "--backward",
        metavar="MODULE:FUNCTION",
        help="check this backward function (q, k, v, grad_output, ...) -> (dq, dk, dv)",
    )
    parser.add_argument(
        "--autograd",
        metavar="MODULE:FUNCTION",
        help="check the gradients torch.autograd takes through this forward (--array torch)",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="check the variant cases (window, softcap, ALiBi, sinks, documents, RoPE, ...)",
    )
    parser.add_argument(
        "--variant-style",
        choices=("flash", "flex", *INTERFACE),
        default=None,
        help="with --variants",
    )
    parser.add_argument(
        "--lse-base",
        choices=("e", "2"),
        default="e",
        help="with --variants: the base of an lse fn returns beside its output (default e)",
    )
    parser.add_argument("--array", choices=ARRAYS, default="numpy")
    parser.add_argument(
        "--dtype", default="float32", help="float32 (default), float64, float16 or bfloat16"
    )
    parser.add_argument("--device", default=None, help="torch device, e.g. cuda")
    parser.add_argument("--cases", choices=CASE_SETS, default="standard")
    parser.add_argument("--masked-rows", choices=("zero", "nan", "uniform"), default="zero")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--require",
        default="",
        help=f"features fn must support, comma-separated: {','.join(FEATURES)} "
        "(and dropout with --backward)",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the current folder can be found

    def progress(n: int, total: int, name: str) -> None:
        end = "\n" if n == total else ""
        print(f"\rchecking case {n}/{total}: {name:<20}", end=end, file=sys.stderr, flush=True)

    settings = dict(
        array=args.array,
        dtype=args.dtype,
        device=args.device,
        cases=args.cases,
        seed=args.seed,
        masked_rows=args.masked_rows,
        require=args.require,
        progress=progress,
    )
    try:
        if args.lse_base != "e" and not (args.variants and not args.backward):
            raise ValueError("--lse-base: only with --variants (a forward's reported lse)")
        if args.variants:
            report = _check_variants(args, settings)
        elif args.backward or args.autograd:
            report = _check_backward(args, settings)
        elif args.function is None:
            raise ValueError("function: expected package.module:function (or --backward)")
        else:
            report = check(load(args.function), **settings)
    except (ValueError, TypeError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report, end="")
    return 0 if report else 1


def _check_backward(args: argparse.Namespace, settings: dict) -> object:
    """check_backward for --backward or --autograd; ValueError for a clash of options."""
    if args.backward and args.autograd:
        raise ValueError("--backward and --autograd: give one of them")
    if args.autograd and args.array != "torch":
        raise ValueError(f"--autograd: needs --array torch, found --array {args.array}")
    forward = load(args.autograd or args.function) if (args.autograd or args.function) else None
    backward = load(args.backward) if args.backward else None
    return check_backward(forward, backward=backward, **settings)


def _check_variants(args: argparse.Namespace, settings: dict) -> object:
    """check_variants on the function, or check_variants_backward with --backward."""
    del settings["cases"], settings["masked_rows"]
    if args.backward:
        return check_variants_backward(
            load(args.backward), variant_style=args.variant_style, **settings
        )
    if args.function is None:
        raise ValueError("function: expected package.module:function (or --backward)")
    return check_variants(
        load(args.function), variant_style=args.variant_style, lse_base=args.lse_base, **settings
    )

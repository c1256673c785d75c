"""The command line of `python main.py`: its options, their ranges, and the refusals that name
them (ValueError, printed by main as a usage error)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

TABS = ("pipeline", "backward", "overview", "check", "kernel", "model", "learn", "train")
MAX_GENERATE = 256  # --generate's most tokens (each step is one token through 30 layers)
MAX_SIDE = 8192  # --size's largest side: an 8192 x 8192 picture is 256 MiB while it is drawn
DEFAULT_SIZE = (1400, 900)
PAGES = {"learn": ("why", "mistakes", "tiles"), "model": ("heads", "block")}  # --page, in order


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer from lo to hi, else a usage error naming the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected {lo} to {hi}, found {value}")
        return value

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; out-of-range numbers are usage errors (exit status 2)."""
    from gui.state.session import GRAD_OUTPUTS, MAX_HEADS, MAX_SEED, MAX_TOKENS  # the window's

    p = argparse.ArgumentParser(
        description="Transformer attention, every step on screen. The options open the window "
        "on screen as they open a --screenshot; only --hover and --size need --screenshot."
    )
    p.add_argument("--preset", help="preset name, or 'random' (see --list-presets)")
    p.add_argument("--list-presets", action="store_true", help="print the preset names and exit")
    p.add_argument("--step", help="step to open, e.g. weights")
    p.add_argument("--head", default=None, help="head number, 'all' or 'average'")
    p.add_argument(
        "--tab", choices=TABS, default=None, help="which view to open (default: pipeline)"
    )
    p.add_argument(
        "--page",
        help="a page inside the tab: the Learn tab's why, mistakes or tiles; the Model tab's "
        "heads or block",
    )
    p.add_argument(
        "--mistake",
        metavar="NAME",
        help="with --page mistakes: the gallery's mistake to show, e.g. 'causal off by one'",
    )
    p.add_argument(
        "--kernel",
        metavar="MODULE:FUNCTION",
        help="with --tab kernel: check this kernel (package.module:function, or FILE.py:FUNCTION)",
    )
    p.add_argument("--backend", help="backend name (default: scratch)")
    p.add_argument("--dtype", help="dtype name for the backend")
    seed, tokens, heads = int_in(0, MAX_SEED), int_in(1, MAX_TOKENS), int_in(1, MAX_HEADS)
    # None when not given: they describe --preset random and are refused with anything else
    p.add_argument("--seed", type=seed, help=f"random example's seed (0-{MAX_SEED}; default 0)")
    p.add_argument("--tokens", type=tokens, help=f"its tokens (1-{MAX_TOKENS}; default 6)")
    p.add_argument("--heads", type=heads, help=f"its heads (1-{MAX_HEADS}; default 1)")
    p.add_argument(
        "--mask",
        default=None,
        help="none, causal-top-left, causal-bottom-right, or a variant mask with its defaults "
        "(window, chunked, prefix, sink_tokens, dilated, ...: the Variant box's names)",
    )
    p.add_argument(
        "--decode",
        type=int_in(1, 10**6),
        metavar="N",
        help="decode step N (the Variant box's decode): the cache holds tokens 0 .. N-1 and "
        "token N-1 is the one query; N at most the example's tokens",
    )
    given = [kind for kind in GRAD_OUTPUTS if kind != "training"]  # "training": from a run
    p.add_argument("--grad-output", choices=given, help="dO of the backward view (default: ones)")
    p.add_argument("--grad-seed", type=seed, help="seed of a random dO or target (default 0)")
    p.add_argument("--hover", metavar="ROW,COL", help="only with --screenshot: hover this cell")
    p.add_argument("--screenshot", metavar="FILE.png", help="render offscreen to FILE and exit")
    p.add_argument(
        "--size", help="only with --screenshot: the window's size (WxH, default 1400x900)"
    )
    p.add_argument(
        "--model",
        help="a real model: 'default' (all-MiniLM-L6-v2), 'smollm2' (SmolLM2-135M-Instruct, a "
        "decoder: next-token bars and Generate), a model directory or a .gguf file",
    )
    p.add_argument("--text", help="the text to run the model on (implies --model default)")
    p.add_argument(
        "--layer", type=int, help="with --model: open this layer's --head in the pipeline"
    )
    p.add_argument(
        "--run",
        metavar="FILE.npz",
        help="a training run (python -m scratch.train ... --out FILE.npz) to open in the Train "
        "tab (the tab shown unless --tab names another)",
    )
    p.add_argument(
        "--snapshot",
        type=int_in(0, 10**9),
        metavar="STEP",
        help="with --run: scrub the Train tab to the run's snapshot at STEP (the last one at or "
        "before it)",
    )
    p.add_argument(
        "--generate",
        type=int_in(1, MAX_GENERATE),
        metavar="N",
        help="with a decoder (--model smollm2): add N greedy tokens, one per step with the key/"
        "value cache, and open the Model tab on the last step",
    )
    return p.parse_args(argv)


def check_options(args: argparse.Namespace) -> None:
    """Refuse options that cannot work or would be ignored, naming them (ValueError); sets
    args.size to (width, height) and args.hover to (row, col)."""
    if args.screenshot is not None:
        check_screenshot_path(args.screenshot)
    for flag, value in (("--hover", args.hover), ("--size", args.size)):
        if value is not None and args.screenshot is None:
            raise ValueError(f"{flag}: only with --screenshot (it sets up the picture)")
    args.size = parse_size(args.size) if args.size is not None else DEFAULT_SIZE
    if args.hover is not None:
        args.hover = parse_cell(args.hover)  # (row, col)
    given = [flag for flag in ("seed", "tokens", "heads") if getattr(args, flag) is not None]
    if given and args.preset != "random":
        flags = ", ".join(f"--{flag}" for flag in given)
        raise ValueError(f"{flags}: set the random example's inputs; add --preset random")
    args.seed, args.tokens, args.heads = args.seed or 0, args.tokens or 6, args.heads or 1
    if args.grad_seed is not None and args.grad_output not in ("random", "target"):
        raise ValueError("--grad-seed: read only with --grad-output random or target")
    args.grad_seed = args.grad_seed or 0
    if args.page is not None and args.page not in PAGES.get(args.tab, ()):
        pages = "; ".join(f"--tab {tab}: {', '.join(names)}" for tab, names in PAGES.items())
        raise ValueError(f"--page: expected a page of the tab ({pages}), found {args.page!r}")
    if args.mistake is not None:
        from scratch.learn.mistakes import NAMES

        if args.page != "mistakes":
            raise ValueError("--mistake: read only with --tab learn --page mistakes")
        if args.mistake not in NAMES:
            raise ValueError(
                f"--mistake: expected one of {', '.join(NAMES)}; found {args.mistake!r}"
            )
    if args.snapshot is not None and args.run is None:
        raise ValueError("--snapshot: read only with --run")
    if args.kernel is not None and args.tab != "kernel":
        raise ValueError("--kernel: read only with --tab kernel")


def check_screenshot_path(path: str) -> None:
    """A .png file name whose folder exists (the picture is written there atomically)."""
    if not path.strip():
        raise ValueError("--screenshot: expected a file name like view.png, found ''")
    if not path.lower().endswith(".png"):
        raise ValueError(
            f"--screenshot: expected a .png file (the picture is a PNG), found {path!r}"
        )
    if os.path.isdir(path):
        raise ValueError(f"--screenshot: {path} is a folder; expected a file name like view.png")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--screenshot: the folder {folder} does not exist")


def parse_size(text: str) -> tuple[int, int]:
    """'1400x900' -> (1400, 900); each side 1 to MAX_SIDE, else ValueError naming --size."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size: expected WxH like 1400x900, found {text!r}") from None
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ValueError(f"--size: expected each side 1 to {MAX_SIDE}, found {text!r}")
    return width, height


def parse_cell(text: str) -> tuple[int, int]:
    """'1,2' -> (1, 2), both >= 0, else ValueError naming --hover."""
    try:
        row, col = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--hover: expected ROW,COL like 1,2, found {text!r}") from None
    if row < 0 or col < 0:
        raise ValueError(f"--hover: expected a row and column >= 0, found {text!r}")
    return row, col


def check_head(head: str | None, num_heads: int) -> None:
    """--head must name a head of the session: 0..H-1, or 'all'/'average' with several heads."""
    if head is None:
        return
    if head in ("all", "average"):
        if num_heads == 1:
            raise ValueError(f"--head {head}: the session has one head; use --heads 2 or more")
        return
    if not head.isdigit() or int(head) >= num_heads:
        choices = f"0 to {num_heads - 1}, all or average" if num_heads > 1 else "0"
        raise ValueError(
            f"--head: expected {choices} (the session has {num_heads} "
            f"head{'s' if num_heads > 1 else ''}), found {head!r}"
        )

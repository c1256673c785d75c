"""python -m scratch.models smollm2 "text": a decoder's likeliest next tokens after a text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ..progress import Cancelled, Line, Progress, reporting
from .files import ModelError
from .model import load

CANCELLED = 130  # the exit status of a run stopped by Ctrl+C (128 + SIGINT), as shells report


def main(argv: Sequence[str] | None = None, cancelled: Callable[[], bool] | None = None) -> int:
    """Print the model's name and its k likeliest next tokens with their probabilities; a first
    load and the run draw their stages on stderr; Ctrl+C (or `cancelled()` True) stops them."""
    parser = argparse.ArgumentParser(
        prog="python -m scratch.models",
        description="The likeliest next tokens after a text (NumPy float64 forward).",
        epilog="A first load shows its stages (hash check, read, dequantize) on stderr; "
        f"Ctrl+C cancels it (exit status {CANCELLED}).",
    )
    parser.add_argument("model", help='"smollm2" or a local .gguf file (Llama family)')
    parser.add_argument("text", help="the text to continue")
    parser.add_argument("-k", type=int, default=10, help="how many tokens (default 10)")
    args = parser.parse_args(argv)
    line = Line(sys.stderr)
    try:
        with reporting(Progress(line, cancelled)):  # the load's stages, then the forward's
            run = load(args.model).run(args.text)
        top = run.next_tokens(k=args.k)
    except (ModelError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Cancelled, KeyboardInterrupt):  # Ctrl+C: the pool's threads stop at their next tensor
        line.interrupted()
        print("cancelled: stopped before any result", file=sys.stderr)
        return CANCELLED
    print(f"{run.model.name}: {len(run.ids)} tokens; next token, probability")
    for token, p in top:
        print(f"  {token!r:20} {p:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m scratch.models smollm2 "text": a decoder's likeliest next tokens after a text, or
--generate N tokens after it; a .gguf file of any decoder family (scratch.models.family) too."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from scratch.models.family import decoders
from scratch.models.files import ModelError
from scratch.models.model import load
from scratch.ops.progress import Cancelled, Line, Progress, reporting

CANCELLED = 130  # the exit status of a run stopped by Ctrl+C (128 + SIGINT), as shells report


def main(argv: Sequence[str] | None = None, cancelled: Callable[[], bool] | None = None) -> int:
    """Print the model's name and its k likeliest next tokens with their probabilities, or with
    --generate N the N tokens Model.generate adds; a first load and the run draw their stages on
    stderr; Ctrl+C (or `cancelled()` True) stops them."""
    parser = argparse.ArgumentParser(
        prog="python -m scratch.models",
        description="The likeliest next tokens after a text, or --generate N tokens after it "
        "(NumPy float64 forward).",
        epilog="A first load shows its stages (hash check, read, dequantize) on stderr; "
        f"Ctrl+C cancels it (exit status {CANCELLED}).",
    )
    families = ", ".join(decoders())
    parser.add_argument(
        "model", help=f'"smollm2" or a local .gguf file of a decoder family ({families})'
    )
    parser.add_argument("text", help="the text to continue")
    parser.add_argument("-k", type=int, default=10, help="how many tokens (default 10)")
    parser.add_argument(
        "--generate", type=int, metavar="N", help="add N tokens instead (Model.generate)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="with --generate: 0 greedy (default), above 0 a draw from softmax(logits / t)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="with --generate: new token n draws with a generator seeded (seed, n)",
    )
    args = parser.parse_args(argv)
    if args.generate is None and (args.temperature != 0.0 or args.seed is not None):
        parser.error("--temperature and --seed: read only with --generate N")
    line = Line(sys.stderr)
    try:
        with reporting(Progress(line, cancelled)):  # the load's stages, then the forward's
            model = load(args.model)
            if args.generate is not None:
                made = model.generate(args.text, args.generate, args.temperature, args.seed)
            else:
                run = model.run(args.text)
        top = None if args.generate is not None else run.next_tokens(k=args.k)
    except (ModelError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Cancelled, KeyboardInterrupt):  # Ctrl+C: the pool's threads stop at their next tensor
        line.interrupted()
        print("cancelled: stopped before any result", file=sys.stderr)
        return CANCELLED
    if top is None:
        print(f"{model.name}: {len(made.prompt.ids)} tokens; {len(made.ids)} new tokens")
        print(f"  text {made.text!r}")
        print(f"  ids  {' '.join(str(i) for i in made.ids)}")
        return 0
    print(f"{run.model.name}: {len(run.ids)} tokens; next token, probability")
    for token, p in top:
        print(f"  {token!r:20} {p:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

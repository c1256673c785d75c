"""python -m scratch.models smollm2 "text": a decoder's likeliest next tokens after a text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .files import ModelError
from .model import load


def main(argv: Sequence[str] | None = None) -> int:
    """Print the model's name and its k likeliest next tokens with their probabilities."""
    parser = argparse.ArgumentParser(
        prog="python -m scratch.models",
        description="The likeliest next tokens after a text (NumPy float64 forward).",
    )
    parser.add_argument("model", help='"smollm2" or a local .gguf file (Llama family)')
    parser.add_argument("text", help="the text to continue")
    parser.add_argument("-k", type=int, default=10, help="how many tokens (default 10)")
    args = parser.parse_args(argv)
    try:
        run = load(args.model).run(args.text)
        top = run.next_tokens(k=args.k)
    except (ModelError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{run.model.name}: {len(run.ids)} tokens; next token, probability")
    for token, p in top:
        print(f"  {token!r:20} {p:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m scratch.train induction --steps 3000 --seed 0 [--out run.npz]: train, then say what
happened; the window opens the file (Train tab)."""

from __future__ import annotations

import argparse
import sys

from scratch.ops.progress import Cancelled, Line, Progress, reporting
from scratch.train.config import BACKENDS, DTYPES, ModelConfig, TrainConfig
from scratch.train.tasks import TASKS


def parser() -> argparse.ArgumentParser:
    """The command line's arguments, with TrainConfig's and ModelConfig's defaults."""
    t, m = TrainConfig(), ModelConfig()
    p = argparse.ArgumentParser(
        prog="python -m scratch.train",
        description="Train a tiny transformer from scratch (NumPy) and watch its heads form.",
    )
    p.add_argument("task", choices=TASKS, help="what to learn")
    p.add_argument("--steps", type=int, default=t.steps, help=f"steps (default {t.steps})")
    p.add_argument("--seed", type=int, default=t.seed, help="seed of weights and batches")
    p.add_argument("--batch", type=int, default=t.batch, help=f"sequences per step ({t.batch})")
    p.add_argument("--lr", type=float, default=t.lr, help=f"Adam's learning rate ({t.lr})")
    p.add_argument("--dtype", choices=DTYPES, default=t.dtype)
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=t.backend,
        help="attention kernels: numpy, or scratch (pure Python, tiny runs only)",
    )
    p.add_argument("--snapshot-every", type=int, default=t.snapshot_every)
    p.add_argument("--layers", type=int, default=m.n_layers)
    p.add_argument("--heads", type=int, default=m.n_heads)
    p.add_argument("--kv-heads", type=int, default=None, help="fewer than --heads: GQA")
    p.add_argument("--d-model", type=int, default=m.d_model)
    p.add_argument("--vocab", type=int, default=m.vocab)
    p.add_argument("--context", type=int, default=m.context)
    p.add_argument("--mlp", action="store_true", help="add a ReLU MLP to each layer")
    p.add_argument("--norm", action="store_true", help="add layer norms")
    p.add_argument("--text", help="the text task's file (UTF-8, character level)")
    p.add_argument("--out", help="write the run here (.npz) for the window's Train tab")
    return p  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Train as asked; 0 when done, 2 on bad arguments, 130 when interrupted."""
    args = parser().parse_args(argv)
    from scratch.train.run import Trainer
    from scratch.train.run_file import save
    from scratch.train.words import summary

    try:
        model = ModelConfig(
            vocab=args.vocab, context=args.context, d_model=args.d_model, n_layers=args.layers,
            n_heads=args.heads, n_kv_heads=args.kv_heads, mlp=args.mlp, norm=args.norm,
        )  # fmt: skip
        config = TrainConfig(
            task=args.task, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
            dtype=args.dtype, backend=args.backend, snapshot_every=args.snapshot_every,
            model=model,
        )  # fmt: skip
        trainer = Trainer(config, text_path=args.text)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    line = Line()
    try:
        with reporting(Progress(line)):
            run = trainer.advance()
    except (KeyboardInterrupt, Cancelled):
        line.interrupted()
        print(f"stopped after {trainer.run.steps_done} steps", file=sys.stderr)
        run = trainer.run
        if args.out:
            save(run, args.out)
            print(f"wrote {args.out} (the steps so far)")
        return 130
    print(summary(run))
    if args.out:
        save(run, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Issue 37's speed goals for scratch.train, measured beside torch on the same model and data.

    python -m scratch.bench --plugin scratch.bench.train_goal --only train

1. Steps per second: the NumPy trainer (attention by the NumPy backend's kernels, the rest by
   hand) against torch (autograd, torch.optim.Adam) training the same model from the same
   weights on the same batches, float32, STEPS steps a call, interleaved rounds: NumPy at least
   STEPS_GOAL x torch's speed.
2. Time to an induction head: the seeded induction run (TrainConfig's defaults) until some head's
   induction score on the probe reaches SCORE, checked every CHECK_EVERY steps: at most
   SECONDS_GOAL seconds on this host (wall time of the training alone, snapshots included).
"""

from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np

from scratch.bench.host import LOAD_WAIT_S, host_line
from scratch.bench.plugins import Goal, GoalSet
from scratch.bench.row import pair_ratio, verdict
from scratch.bench.timing import measure_alternating
from scratch.train.config import TrainConfig
from scratch.train.run import Trainer

STEPS = 20  # training steps per timed call
STEPS_GOAL = 0.8  # NumPy's steps per second over torch's
SCORE = 0.5  # the induction score that counts as "an induction head has formed"
SECONDS_GOAL = 30.0
CHECK_EVERY = 25  # steps between two looks at the probe
MAX_STEPS = 4000  # give up (FAIL) after this many steps
NUMPY_ROW = f"scratch.train NumPy, {STEPS} steps"
TORCH_ROW = f"torch autograd + Adam, {STEPS} steps"


class TorchTrainer:
    """The torch form of the model trained by autograd and torch.optim.Adam, STEPS steps a call,
    from the given weights, on batches drawn from rng."""

    def __init__(self, config: TrainConfig, params: dict, task, rng: np.random.Generator):
        import torch

        from scratch.train.torch_model import leaves

        self.config, self.task, self.rng = config, task, rng
        self.params = leaves(params, getattr(torch, config.dtype))
        self.opt = torch.optim.Adam(
            self.params.values(), lr=config.lr, betas=config.betas, eps=config.eps
        )

    def __call__(self) -> None:
        from scratch.train.torch_model import torch_loss

        for _ in range(STEPS):
            batch = self.task.batch(self.rng, self.config.batch)
            self.opt.zero_grad(set_to_none=True)
            torch_loss(self.config.model, self.params, batch.inputs, batch.targets).backward()
            self.opt.step()


def numpy_trainer(trainer: Trainer):
    """A callable that trains the NumPy model STEPS steps as the product does (Trainer.advance:
    BLAS on one thread; the config's snapshot_every is out of reach, so only steps are timed)."""

    def run() -> None:
        trainer.advance(STEPS)

    return run


def steps_goal(config: TrainConfig, load_wait_s: float | None) -> list[Goal]:
    """NumPy's steps per second over torch's, interleaved rounds, same weights and batches."""
    timed = dataclasses.replace(config, steps=10**9, snapshot_every=10**9)
    trainer = Trainer(timed)
    params = {k: v.copy() for k, v in trainer.params.items()}
    same_batches = copy.deepcopy(trainer.data_rng)  # torch draws what the NumPy trainer draws
    rivals = [
        (NUMPY_ROW, numpy_trainer(trainer), "n/a"),
        (TORCH_ROW, TorchTrainer(timed, params, trainer.run.task, same_batches), "n/a"),
    ]
    rows = measure_alternating(
        config.model.context, rivals, None, load_wait_s, budget_s=4.0, min_rounds=4,
        max_rounds=12,
    )  # fmt: skip
    found = {r.name: r for r in rows}
    ratio = pair_ratio(found[NUMPY_ROW], found[TORCH_ROW])
    goal = (
        f"scratch.train (NumPy) >= {STEPS_GOAL:g}x torch's training steps per second "
        f"(induction model, batch {config.batch}, float32)"
    )
    line = verdict(goal, ratio, lambda r: r >= STEPS_GOAL)
    per_step = found[NUMPY_ROW].p10 / STEPS * 1e3, found[TORCH_ROW].p10 / STEPS * 1e3
    return [(line[0], line[1], f"{line[2]}; {per_step[0]:.1f} vs {per_step[1]:.1f} ms a step")]


def time_to_score(config: TrainConfig) -> tuple[float | None, int]:
    """(seconds until some head's induction score reaches SCORE or None, steps run)."""
    trainer = Trainer(dataclasses.replace(config, steps=MAX_STEPS, snapshot_every=CHECK_EVERY))
    start = time.perf_counter()
    while not trainer.finished:
        trainer.advance(CHECK_EVERY)
        if trainer.run.first_step_with("induction", SCORE) is not None:
            return time.perf_counter() - start, trainer.run.steps_done
    return None, trainer.run.steps_done


def score_goal(config: TrainConfig) -> list[Goal]:
    """The seeded induction run's time to an induction score of SCORE."""
    seconds, steps = time_to_score(config)
    goal = (
        f"induction run (seed {config.seed}, float32) reaches an induction score of {SCORE:g} "
        f"in <= {SECONDS_GOAL:g} s"
    )
    if seconds is None:
        return [(goal, "FAIL", f"not reached in {steps} steps")]
    verdict_word = "PASS" if seconds <= SECONDS_GOAL else "FAIL"
    return [
        (
            goal,
            verdict_word,
            f"{seconds:.1f} s, {steps} steps ({1e3 * seconds / steps:.1f} ms a step)",
        )
    ]


def measure_train(load_wait_s: float | None = LOAD_WAIT_S) -> list[Goal]:
    """Both goals on TrainConfig's defaults (the issue's induction model), then the host."""
    config = TrainConfig()
    goals = steps_goal(config, load_wait_s) + score_goal(config)
    return goals + [("(reference) host", "info", host_line())]


BENCH_GOALS = (
    GoalSet(
        "train",
        "scratch.train against torch on the induction model (issue 37 item 3)",
        measure_train,
    ),
)

__all__ = ["BENCH_GOALS", "measure_train", "score_goal", "steps_goal", "time_to_score"]

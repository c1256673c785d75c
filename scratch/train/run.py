"""The training loop, nanoGPT's in NumPy: draw a batch, forward, backward, Adam; keep a record.

    trainer = Trainer(TrainConfig(task="induction", steps=3000, seed=0))
    trainer.advance(500)        # in pieces, so a window can pause, resume and cancel between
    run = trainer.run           # the record: losses per step, snapshots, the phase change

Every `snapshot_every` steps (and at step 0) the record keeps a Snapshot: the weights, and each
head's attention on the task's fixed probe sequence with its scores (scores.py). Seeded: the same
config on the same host gives the same record bit for bit (one rng for the weights, one for the
batches; the probe has its own fixed seed).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from scratch.backends import single_threaded_blas
from scratch.backends.numpy_threads import cores
from scratch.ops.progress import current
from scratch.train.adam import Adam
from scratch.train.config import TrainConfig
from scratch.train.memory import keep_freed_memory
from scratch.train.model import Model, init_params
from scratch.train.scores import head_scores
from scratch.train.tasks import Task, make_task


@dataclass
class Snapshot:
    """The model at one step: its weights, the probe's attention per layer and head scores."""

    step: int
    params: dict  # name -> array
    weights: list  # per layer (H, T, T): the probe's attention
    scores: dict  # name -> (layers, heads)


@dataclass
class Run:
    """A training run's record: settings, the loss at every step, the snapshots."""

    config: TrainConfig
    task: Task
    probe: np.ndarray  # (T,) the probe's input tokens
    probe_targets: np.ndarray | None = None  # (T,) its targets (None: a file written before)
    losses: list = field(default_factory=list)  # mean loss over every position, per step
    scored_losses: list = field(default_factory=list)  # over the predictable positions
    snapshots: list = field(default_factory=list)
    seconds: list = field(default_factory=list)  # wall time at the end of each step

    @property
    def steps_done(self) -> int:
        """How many steps have run."""
        return len(self.losses)

    def snapshot_at(self, step: int) -> Snapshot:
        """The last snapshot taken at or before `step`."""
        found = [s for s in self.snapshots if s.step <= step]
        if not found:
            raise ValueError(f"step: expected a step >= 0 that has run, found {step}")
        return found[-1]

    def first_step_with(self, score: str, value: float) -> int | None:
        """The first snapshot step where some head's `score` reaches `value` (None: never)."""
        for s in self.snapshots:
            if np.nanmax(s.scores[score]) >= value:
                return s.step
        return None

    def _repr_html_(self) -> str:
        """The loss curve and each head's scores, for a notebook."""
        from scratch.train.words import run_html

        return run_html(self)


class Trainer:
    """A model, its weights, Adam and the data stream: one training run, advanced in pieces."""

    def __init__(self, config: TrainConfig, *, text_path: str | None = None) -> None:
        model_config = config.model
        context = model_config.context  # induction's inputs are 2n - 1 long, the others' 2n
        half = (context + 1) // 2 if config.task == "induction" else context // 2
        task = make_task(
            config.task, vocab=model_config.vocab, half=half, text_path=text_path,
            context=model_config.context,
        )  # fmt: skip
        if task.vocab != model_config.vocab:  # a text file decides its own alphabet
            model_config = dataclasses.replace(model_config, vocab=task.vocab)
            config = dataclasses.replace(config, model=model_config)
        self.config, self.model = config, Model(model_config, config.backend)
        seeds = np.random.SeedSequence(config.seed).spawn(2)  # the weights', the batches'
        init_rng, data_rng = (np.random.default_rng(s) for s in seeds)
        self.params = init_params(model_config, init_rng, config.dtype)
        self.data_rng = data_rng
        self.adam = Adam(self.params, config.lr, config.betas, config.eps)
        self.shards = config.threads or cores()  # the batch split over this many threads
        probe = task.probe()
        self.probe = probe
        self.run = Run(config, task, probe.inputs[0].copy(), probe.targets[0].copy())
        self.started = time.perf_counter()
        self._snapshot()

    def _snapshot(self) -> None:
        """Keep the weights and the probe's attention at this step."""
        fwd = self.model.forward(self.params, self.probe.inputs, self.probe.targets, True)
        weights = [np.asarray(w[0], dtype=np.float32) for w in fwd.weights]  # per layer (H,T,T)
        scores = head_scores([w[None] for w in weights], self.run.task.period)
        params = {k: v.copy() for k, v in self.params.items()}
        self.run.snapshots.append(Snapshot(self.run.steps_done, params, weights, scores))

    def step(self) -> float:
        """One training step: batch, forward, backward, Adam. Returns the step's loss."""
        batch = self.run.task.batch(self.data_rng, self.config.batch)
        losses, grads = self.model.gradients(
            self.params, batch.inputs, batch.targets, self.shards
        )  # losses (B, T)
        self.adam.step(self.params, grads)
        run = self.run
        loss = float(losses.mean(dtype=np.float64))
        run.losses.append(loss)
        run.scored_losses.append(float(losses[:, batch.scored].mean(dtype=np.float64)))
        run.seconds.append(time.perf_counter() - self.started)
        if run.steps_done % self.config.snapshot_every == 0 or run.steps_done == self.config.steps:
            self._snapshot()
        return loss

    def advance(self, steps: int | None = None) -> Run:
        """Run `steps` more steps (None: up to config.steps), ticking the current Progress
        (scratch.ops.progress: a cancel raises Cancelled between two steps)."""
        end = self.config.steps
        if steps is not None:
            end = min(end, self.run.steps_done + steps)
        tick = current()
        keep_freed_memory()  # each step's arrays reuse the last step's pages (memory.py)
        # a training step's products are small ((B*T, D) by (D, H*dh)): BLAS threads cost more
        # than they save (this host, default model: 0.10 s of CPU a step on one thread, 0.68 s
        # on two, and 3.7x the wall time under load)
        with single_threaded_blas():
            while self.run.steps_done < end:
                tick("train", self.run.steps_done, self.config.steps)
                self.step()
        tick("train", self.run.steps_done, self.config.steps)
        return self.run

    @property
    def finished(self) -> bool:
        """Whether every configured step has run."""
        return self.run.steps_done >= self.config.steps


def train(config: TrainConfig | None = None, *, text_path: str | None = None, **settings) -> Run:
    """Train a tiny transformer from scratch and return its record.

    `train(task="induction", steps=3000, seed=0)`: keywords are TrainConfig's fields (model=
    takes a ModelConfig), or pass a whole TrainConfig. The text task reads `text_path`."""
    if config is None:
        config = TrainConfig(**settings)
    elif settings:
        config = dataclasses.replace(config, **settings)
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config: expected a TrainConfig, found {type(config).__name__}")
    return Trainer(config, text_path=text_path).advance()


__all__ = ["Run", "Snapshot", "Trainer", "train"]

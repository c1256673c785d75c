"""The training benchmark times what it claims: torch trains the same model on the same batches."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from scratch.bench import train_goal
from scratch.train import ModelConfig, TrainConfig, Trainer

TINY = TrainConfig(batch=3, dtype="float64", model=ModelConfig(context=7, d_model=8, n_heads=2))


def test_the_torch_rival_trains_the_same_model_on_the_same_batches(monkeypatch):
    monkeypatch.setattr(train_goal, "STEPS", 3)
    trainer = Trainer(TINY)
    start = {k: v.copy() for k, v in trainer.params.items()}
    rival = train_goal.TorchTrainer(TINY, start, trainer.run.task, copy.deepcopy(trainer.data_rng))
    train_goal.numpy_trainer(trainer)()
    rival()
    theirs = rival.params
    for name, mine in trainer.params.items():
        err = float(np.max(np.abs(mine - theirs[name].detach().numpy())))
        assert err <= 1e-10, f"{name}: {err:.3g}"


def test_the_steps_goal_states_its_numbers(monkeypatch):
    monkeypatch.setattr(train_goal, "STEPS", 2)
    ((goal, word, detail),) = train_goal.steps_goal(
        dataclasses.replace(TINY, dtype="float32"), None
    )
    assert word in ("PASS", "FAIL") and "ms a step" in detail and "0.8x torch" in goal


def test_a_run_that_never_forms_an_induction_head_fails_the_score_goal(monkeypatch):
    monkeypatch.setattr(train_goal, "MAX_STEPS", 4)
    monkeypatch.setattr(train_goal, "CHECK_EVERY", 2)
    ((goal, word, detail),) = train_goal.score_goal(TINY)
    assert (word, detail) == ("FAIL", "not reached in 4 steps")

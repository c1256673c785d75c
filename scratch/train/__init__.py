"""Train a tiny transformer from scratch and watch its attention heads form.

    from scratch.train import train
    run = train(task="induction", steps=3000, seed=0)   # NumPy; attention by the project's kernels
    run                                                # in a notebook: the loss curve and the heads

Modules: config (ModelConfig, TrainConfig), tasks (induction, copying, sorting, text), model (the
forward and the hand-written backward), adam, scores (previous-token, induction, first-token),
run (Trainer, the loop; Run, the record), words (the phase change and the sentences),
run_file (save / load a run, atomically), __main__ (python -m scratch.train).
Needs NumPy (`import scratch` itself does not).
"""

from scratch.train.config import ModelConfig, TrainConfig
from scratch.train.model import Forward, Model
from scratch.train.run import Run, Snapshot, Trainer, train
from scratch.train.run_file import load, save

__all__ = [
    "Forward",
    "Model",
    "ModelConfig",
    "Run",
    "Snapshot",
    "TrainConfig",
    "Trainer",
    "load",
    "save",
    "train",
]

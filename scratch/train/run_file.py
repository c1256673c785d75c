"""A training run on disk: one .npz the window opens, written atomically, read with checks.

The file holds the settings (JSON), the loss at every step and every snapshot (weights, the
probe's attention, the head scores). `save` writes it atomically (scratch.ops.atomic: a
temporary file beside the target, renamed over it), so a crash never leaves half a file;
`load` refuses a file that is not a run of this format with a ValueError naming the file and
what is wrong (nothing is pickled: arrays and JSON text only).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile

import numpy as np

from scratch.ops import atomic
from scratch.train.config import ModelConfig, TrainConfig
from scratch.train.run import Run, Snapshot
from scratch.train.tasks import Task

FORMAT = "scratch.train.run/1"


def _settings(run: Run) -> str:
    """The config and the task (without a text file's characters) as JSON."""
    task = run.task
    return json.dumps({
        "format": FORMAT,
        "config": dataclasses.asdict(run.config),
        "task": {"name": task.name, "vocab": task.vocab, "length": task.length,
                 "half": task.half, "alphabet": task.alphabet},
    })  # fmt: skip


def save(run: Run, path: str | os.PathLike) -> None:
    """Write `run` to `path` (.npz) atomically."""
    path = os.fspath(path)
    arrays = {
        "settings": np.array(_settings(run)),
        "probe": run.probe,
        "losses": np.asarray(run.losses, dtype=np.float64),
        "scored_losses": np.asarray(run.scored_losses, dtype=np.float64),
        "seconds": np.asarray(run.seconds, dtype=np.float64),
        "snap_steps": np.array([s.step for s in run.snapshots], dtype=np.int64),
        "snap_weights": np.stack([np.stack(s.weights) for s in run.snapshots]),
    }
    if run.probe_targets is not None:
        arrays["probe_targets"] = run.probe_targets
    for name in run.snapshots[0].params:
        arrays[f"param/{name}"] = np.stack([s.params[name] for s in run.snapshots])
    for name in run.snapshots[0].scores:
        arrays[f"score/{name}"] = np.stack([s.scores[name] for s in run.snapshots])
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic.write_bytes(path, buffer.getvalue())


def _refuse(path: str, why: str) -> ValueError:
    return ValueError(f"{path}: not a training run this version can open ({why})")


def load(path: str | os.PathLike) -> Run:
    """The run saved at `path` (ValueError when the file is not one, naming why)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise _refuse(path, "no such file")
    if not zipfile.is_zipfile(path):
        raise _refuse(path, "cannot read it as .npz: not a zip archive")
    try:
        with np.load(path, allow_pickle=False) as data:
            found = {name: data[name] for name in data.files}
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise _refuse(path, f"cannot read it as .npz: {exc}") from None
    except ValueError as exc:  # an object array would need pickle
        raise _refuse(path, str(exc)) from None
    try:
        settings = json.loads(str(found["settings"]))
        if settings.get("format") != FORMAT:
            raise _refuse(path, f"format {settings.get('format')!r}, expected {FORMAT!r}")
        config = dict(settings["config"])
        config["model"] = ModelConfig(**config["model"])
        config["betas"] = tuple(config["betas"])
        config = TrainConfig(**config)
        task = Task(**settings["task"])
        run = Run(config, task, found["probe"].astype(np.int64))
        if "probe_targets" in found:  # absent in files written before it was saved
            run.probe_targets = found["probe_targets"].astype(np.int64)
        run.losses = found["losses"].tolist()
        run.scored_losses = found["scored_losses"].tolist()
        run.seconds = found["seconds"].tolist()
        params = [n.split("/", 1)[1] for n in found if n.startswith("param/")]
        scores = [n.split("/", 1)[1] for n in found if n.startswith("score/")]
        for i, step in enumerate(found["snap_steps"].tolist()):
            run.snapshots.append(Snapshot(
                int(step),
                {n: found[f"param/{n}"][i] for n in params},
                list(found["snap_weights"][i]),
                {n: found[f"score/{n}"][i] for n in scores},
            ))  # fmt: skip
    except ValueError as exc:
        if str(exc).startswith(path):
            raise
        raise _refuse(path, str(exc)) from None
    except (KeyError, TypeError, json.JSONDecodeError, IndexError) as exc:
        raise _refuse(path, f"{type(exc).__name__}: {exc}") from None
    if len(run.losses) != len(run.scored_losses) or not run.snapshots:
        raise _refuse(path, "its losses and snapshots do not match")
    return run


__all__ = ["FORMAT", "load", "save"]

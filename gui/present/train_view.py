"""What the Train tab draws of a training run, and its words (numpy, no Qt).

The run's own sentences are scratch.train.words.summary; this module adds the window's: which
snapshot the scrubber shows, what the selected head does there, and the curves' data.
"""

from __future__ import annotations

import numpy as np

from gui.present import numbers
from gui.present.view_model import Panel, colour_weights
from scratch.train import Run, Snapshot
from scratch.train.words import (
    best_head,
    head_name,
    leading_score,
    part_name,
    phase_change,
    smoothed,
)
from scratch.variants import Causal

SCORE_TITLES = {
    "previous": "previous-token score",
    "induction": "induction score",
    "first": "first-token score",
}


def loss_curves(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps from 1, the loss on every position, on the scored part), each smoothed over
    words.SMOOTH steps as the phase change is found on."""
    steps = np.arange(1, run.steps_done + 1, dtype=np.float64)
    return steps, smoothed(run.losses), smoothed(run.scored_losses)


def score_lines(run: Run) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the snapshots' steps, {score: (layers, heads, snapshots)}) for the lines over time."""
    steps = np.array([s.step for s in run.snapshots], dtype=np.float64)
    lines = {
        name: np.stack([np.asarray(s.scores[name], np.float64) for s in run.snapshots], axis=-1)
        for name in SCORE_TITLES
    }
    return steps, lines


def default_head(run: Run) -> tuple[int, int]:
    """The head the tab shows first: the strongest induction head at the last snapshot (the
    strongest previous-token head when the task does not repeat)."""
    return best_head(run.snapshots[-1].scores[leading_score(run)])


def head_panel(run: Run, snapshot: Snapshot, layer: int, head: int) -> Panel:
    """One head's weights on the probe as a heatmap panel, the probe's tokens as labels and
    the keys a causal query cannot see grey."""
    w = np.asarray(snapshot.weights[layer][head], dtype=np.float64)  # (T, T)
    T = w.shape[0]
    masked = None
    if run.config.model.causal:
        masked = np.where(Causal(0).tile(range(T), range(T)), 0.0, -np.inf)  # unseen: -inf
    image, levels = colour_weights(w, masked, "fixed")
    labels = [run.task.label(int(t)) for t in run.probe]
    title = f"{head_name(layer, head)} at step {snapshot.step:,}"
    return Panel(
        title=title,
        image=image,
        row_labels=labels,
        col_labels=labels,
        row_axis="query",
        col_axis="key",
        kind="weights",
        levels=levels,
        step="weights",
        head=head,
        raw=w,
        colour_note="fixed: 0..1",
    )


def step_text(run: Run, index: int) -> str:
    """'step 1,000 of 2,000 (snapshot 21 of 41)'."""
    snapshot = run.snapshots[index]
    total = run.config.steps
    return f"step {snapshot.step:,} of {total:,} (snapshot {index + 1} of {len(run.snapshots)})"


def head_words(run: Run, snapshot: Snapshot, layer: int, head: int) -> str:
    """What head `layer`.`head` does at this snapshot, in numbers: its three scores."""
    parts = []
    for name in SCORE_TITLES:
        value = float(snapshot.scores[name][layer, head])
        if np.isfinite(value):
            parts.append(f"{SCORE_TITLES[name]} {value:.2f}")
    T = len(run.probe)
    uniform = float(np.mean(1.0 / np.arange(2, T + 1)))  # a uniform causal head's previous score
    return (
        f"{head_name(layer, head)} at step {snapshot.step:,}: {', '.join(parts)} "
        f"(spread evenly over the keys it sees, a head's previous-token score is {uniform:.2f})."
    )


def phase_words(run: Run) -> str:
    """Where the loss curve's red line is ('' when there is none: summary says why)."""
    change = phase_change(run.scored_losses)
    if change is None:
        return ""  # words.summary says there is none yet, and why
    return (
        f"Red line: the phase change at step {change.step:,} "
        f"(loss on the {part_name(run.config.task)} {change.loss_before:.2f} -> "
        f"{change.loss_after:.2f})."
    )


def progress_text(run: Run, seconds: float | None = None) -> str:
    """'500 / 2,000 steps' (and the steps per second when known)."""
    text = f"{run.steps_done:,} / {run.config.steps:,} steps"
    if seconds:
        text += f", {numbers.significant(run.steps_done / seconds, 2)} steps/s"
    return text


BACKWARD_NOTE = (
    "Open in Backward: this layer's attention on the probe at the scrubbed step, differentiated "
    "for dO 'from the training step': the gradient of the model's mean loss on the probe with "
    "respect to this layer's attention output (the model's own backward), so dQ, dK, dV are "
    "the model's gradients at this layer. Ones, random or a one-hot target can be picked there "
    "instead."
)


__all__ = [
    "BACKWARD_NOTE",
    "SCORE_TITLES",
    "default_head",
    "head_panel",
    "head_words",
    "loss_curves",
    "phase_words",
    "progress_text",
    "score_lines",
    "step_text",
]


def grid_weights(snapshot: Snapshot) -> np.ndarray:
    """(layers, heads, T, T): the snapshot's weights on the probe, as the model grid takes them."""
    return np.stack([np.asarray(w, dtype=np.float64) for w in snapshot.weights])


def kv_heads(model: object) -> list[int] | None:
    """The key/value head each query head reads (None: each its own, no GQA)."""
    if model.kv_heads == model.n_heads:
        return None
    group = model.n_heads // model.kv_heads
    return [h // group for h in range(model.n_heads)]


def colour_words(layers: int) -> str:
    """Which lines are which layer's heads (gui.widgets.score_plots' hues)."""
    names = ("blue", "red", "green", "purple", "orange")
    said = ", ".join(f"layer {n + 1} {names[n % len(names)]}" for n in range(layers))
    return f"One line per head: {said}; a later head is lighter."

"""A run in words and pictures: where the phase change is, what the heads did, as HTML too.

The phase change (Olsson et al. 2022: the loss on the predictable part falls suddenly while the
induction heads form) is found on the record, not assumed: the loss on the scored positions is
smoothed over SMOOTH steps, and the WINDOW-step stretch where it falls most is the change, if
it falls by at least DROP of its value at the stretch's start. Heads are named as the papers
name them, counting from 1: "head 2.1" is layer 2's first head.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

SMOOTH = 25  # steps of the moving average the change is found on
WINDOW = 200  # steps of the stretch whose fall is measured
DROP = 0.25  # a change is a fall of at least this share of the loss at its start


@dataclass(frozen=True)
class PhaseChange:
    """The stretch of steps where the predictable part's loss fell most."""

    start: int  # first step of the stretch
    end: int  # last step
    step: int  # the steepest step inside it (the mark on the curve)
    loss_before: float
    loss_after: float


def smoothed(values: list | np.ndarray, width: int = SMOOTH) -> np.ndarray:
    """The trailing moving average over `width` steps (shorter at the start)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return v
    total = np.cumsum(np.concatenate([[0.0], v]))
    lo = np.maximum(np.arange(v.size) + 1 - width, 0)
    return (total[1:] - total[lo]) / (np.arange(v.size) + 1 - lo)


def phase_change(scored_losses: list) -> PhaseChange | None:
    """The phase change in a run's scored loss (None when no stretch falls by DROP); steps
    count from 1 (scored_losses[0] is step 1's)."""
    s = smoothed(scored_losses)
    if s.size <= WINDOW:
        return None
    falls = s[:-WINDOW] - s[WINDOW:]  # fall over each stretch starting at step i
    i = int(np.argmax(falls))
    if falls[i] < DROP * s[i]:
        return None
    slope = s[i : i + WINDOW] - s[i + 1 : i + WINDOW + 1]  # one-step falls inside the stretch
    steepest = i + int(np.argmax(slope)) + 2  # the step after the fall (index + 1, 1-based)
    return PhaseChange(i + 1, i + WINDOW + 1, steepest, float(s[i]), float(s[i + WINDOW]))


def head_name(layer: int, head: int) -> str:
    """'head 2.1' for layer index 1, head index 0 (the papers count from 1)."""
    return f"head {layer + 1}.{head + 1}"


def best_head(scores: np.ndarray) -> tuple[int, int]:
    """(layer, head) of the largest score (NaN ignored)."""
    flat = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)
    layer, head = np.unravel_index(int(np.argmax(flat)), flat.shape)
    return int(layer), int(head)


def leading_score(run) -> str:
    """The score a run is told by: 'induction' when its task repeats, else 'previous'."""
    return "induction" if run.task.period is not None else "previous"


def part_name(task: str) -> str:
    """What the scored positions are, in the task's words."""
    return {"induction": "repeated half", "copying": "copy", "sorting": "sorted half"}.get(
        task, "text"
    )


def summary(run) -> str:
    """What the learner is seeing, with the run's numbers."""
    task = run.config.task
    done = run.steps_done
    if done == 0:
        return "No step has run yet."
    last = run.snapshots[-1]
    words = [f"{done:,} steps of {task}: loss {run.losses[-1]:.2f} overall, "
             f"{run.scored_losses[-1]:.2f} on the {part_name(task)}."]  # fmt: skip
    change = phase_change(run.scored_losses)
    score = leading_score(run)
    if change is None:
        words.append(f"No phase change yet: the loss on the {part_name(task)} has not fallen by "
                     f"{DROP:.0%} within {WINDOW} steps.")  # fmt: skip
    else:
        before, after = run.snapshot_at(change.start), run.snapshot_at(change.end)
        layer, head = best_head(after.scores[score])
        words.append(
            f"At step {change.step:,} the loss on the {part_name(task)} fell from "
            f"{change.loss_before:.1f} to {change.loss_after:.1f} (steps {change.start:,}-"
            f"{change.end:,}) while {head_name(layer, head)}'s {score} score rose from "
            f"{before.scores[score][layer, head]:.2f} to {after.scores[score][layer, head]:.2f}."
        )
    layer, head = best_head(last.scores["previous"])
    words.append(f"Now the strongest previous-token head is {head_name(layer, head)} "
                 f"({last.scores['previous'][layer, head]:.2f}).")  # fmt: skip
    if run.task.period is not None:
        layer, head = best_head(last.scores["induction"])
        words.append(f"The strongest induction head is {head_name(layer, head)} "
                     f"({last.scores['induction'][layer, head]:.2f}).")  # fmt: skip
    return " ".join(words)


def _polyline(values: np.ndarray, top: float, width: int, height: int) -> str:
    """SVG points of a curve over the whole width, 0 at the bottom and `top` at the top."""
    n = max(len(values) - 1, 1)
    return " ".join(
        f"{width * i / n:.1f},{height * (1 - min(max(v / top, 0), 1)):.1f}"
        for i, v in enumerate(values)
    )


def run_html(run, width: int = 480, height: int = 160) -> str:
    """The loss curves as SVG, the phase change marked, and the heads' scores as a table."""
    total, scored = smoothed(run.losses), smoothed(run.scored_losses)
    top = float(max(total.max(initial=0), scored.max(initial=0), 1e-9))
    parts = [f"<div><b>Training run</b>: {html.escape(summary(run))}</div>",
             f'<svg width="{width}" height="{height}" style="border:1px solid #ccc">']  # fmt: skip
    if len(total) > 1:
        for curve, colour in ((total, "#888"), (scored, "#1f4e9c")):
            points = _polyline(curve, top, width, height)
            parts.append(f'<polyline fill="none" stroke="{colour}" points="{points}"/>')
        change = phase_change(run.scored_losses)
        if change is not None:
            x = width * (change.step - 1) / max(len(total) - 1, 1)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height}" stroke="#b2182b"/>')
    parts.append("</svg><div>grey: loss on every position; blue: on the "
                 f"{part_name(run.config.task)}; red: the phase change</div>")  # fmt: skip
    last = run.snapshots[-1]
    rows = ["<tr><th>head</th>" + "".join(f"<th>{n}</th>" for n in last.scores) + "</tr>"]
    layers, heads = last.scores["previous"].shape
    for layer in range(layers):
        for head in range(heads):
            cells = "".join(f"<td>{last.scores[n][layer, head]:.2f}</td>" for n in last.scores)
            rows.append(f"<tr><td>{head_name(layer, head)}</td>{cells}</tr>")
    parts.append(f"<table><caption>scores at step {last.step:,}</caption>{''.join(rows)}</table>")
    return "".join(parts)


__all__ = [
    "PhaseChange",
    "best_head",
    "head_name",
    "leading_score",
    "part_name",
    "phase_change",
    "run_html",
    "smoothed",
    "summary",
]

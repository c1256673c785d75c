"""What each head does, as one number: scores read off its attention weights on the probe.

For a head's weights w (T, T) on a probe sequence (row i: query position i):
- previous-token score: mean over i >= 1 of w[i, i - 1] (the head looks one place back);
- induction score: for a probe that repeats with period n, mean over i >= n of w[i, i - n + 1]
  (the head looks at the token after this token's earlier copy: Olsson et al. 2022);
- first-token score: mean over i of w[i, 0] (a head with nothing to do often rests there).
Each is 1 for a head that does exactly that and about 1 / (i + 1) for a uniform causal head.
"""

from __future__ import annotations

import numpy as np

SCORES = ("previous", "induction", "first")


def previous_token_score(w: np.ndarray) -> np.ndarray:
    """Mean of w[..., i, i - 1] over i >= 1; w (..., T, T) -> (...)."""
    T = w.shape[-1]
    return w[..., np.arange(1, T), np.arange(0, T - 1)].mean(axis=-1)


def induction_score(w: np.ndarray, period: int | None) -> np.ndarray:
    """Mean of w[..., i, i - period + 1] over i >= period; NaN when the probe does not repeat."""
    T = w.shape[-1]
    if period is None or period >= T:
        return np.full(w.shape[:-2], np.nan)
    rows = np.arange(period, T)
    return w[..., rows, rows - period + 1].mean(axis=-1)


def first_token_score(w: np.ndarray) -> np.ndarray:
    """Mean of w[..., i, 0] over every row i."""
    return w[..., :, 0].mean(axis=-1)


def head_scores(weights: list, period: int | None) -> dict[str, np.ndarray]:
    """Each score for every head: {name: (layers, heads)} from per-layer (1, H, T, T) weights."""
    w = np.stack([np.asarray(layer[0], dtype=np.float64) for layer in weights])  # (n, H, T, T)
    return {
        "previous": previous_token_score(w),
        "induction": induction_score(w, period),
        "first": first_token_score(w),
    }


__all__ = ["SCORES", "first_token_score", "head_scores", "induction_score", "previous_token_score"]

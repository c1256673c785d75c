"""Why each step exists, computed on the learner's own numbers (pure Python).

- why_scale: q @ k^T's entries have a variance that grows with d_k; times 1/sqrt(d_k) it does
  not. Without the scale softmax sees larger gaps and its rows collapse onto one key (lower
  entropy, a largest weight near 1).
- why_max: softmax subtracts each row's max before exp. The same row shifted to large logits
  has the same weights (softmax ignores a constant added to a row), but without the subtraction
  exp overflows to inf in float32/float16 and the weights become inf/inf = nan.
- why_mask: a masked score becomes -inf before softmax (weight exactly 0, the row still sums
  to 1). Zeroing the weights after softmax leaves rows that sum to less than 1; a score of 0
  instead of -inf still gives the key a weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from math import fsum, inf

from scratch.ops.rounding import FORMATS, exp_in, round_to
from scratch.ops.softmax import softmax_row
from scratch.variants.causal import causal_cells


@dataclass(frozen=True)
class RowStats:
    """One row of weights and what softmax did to it."""

    weights: list  # (S,)
    entropy: float  # -sum w log w (nats): log(S) for uniform weights, 0 for one key
    largest: float  # the largest weight
    argmax: int  # the key that gets it


def row_stats(scores: list) -> RowStats:
    """softmax of one row of scores and its entropy and largest weight."""
    weights = softmax_row(list(scores))
    entropy = -fsum(w * math.log(w) for w in weights if w > 0)
    largest = max(weights)
    return RowStats(weights, entropy, largest, weights.index(largest))


def _variance(values: list) -> float:
    """Population variance (fsum twice)."""
    mean = fsum(values) / len(values)
    return fsum((x - mean) ** 2 for x in values) / len(values)


@dataclass(frozen=True)
class ScaleWhy:
    """The scores with and without 1/sqrt(d_k), over every visible cell and on one row."""

    d_k: int
    scale: float
    variance_unscaled: float  # of q @ k^T's visible entries
    variance_scaled: float  # of the same times scale
    row: int
    unscaled: RowStats  # softmax of the row without the scale
    scaled: RowStats  # softmax of the row with it


def why_scale(scores: list, scale: float, d_k: int, row: int, allowed: object = None) -> ScaleWhy:
    """scores: (L, S) q @ k^T before the scale; allowed: (L, S) bools or None (every key)."""
    _check_row(scores, row)
    seen = lambda i, j: allowed is None or allowed[i][j]  # noqa: E731
    visible = [s for i, r in enumerate(scores) for j, s in enumerate(r) if seen(i, j)]
    if not visible:
        raise ValueError("allowed: every cell is masked; nothing to compare")
    plain = [s if seen(row, j) else -inf for j, s in enumerate(scores[row])]
    scaled = [s * scale for s in plain]
    var = _variance(visible)
    return ScaleWhy(d_k, scale, var, var * scale * scale, row, row_stats(plain), row_stats(scaled))


@dataclass(frozen=True)
class Overflow:
    """Softmax of one large row in a narrow dtype, without and with the max subtracted."""

    dtype: str
    limit: float  # log of the largest finite value: exp overflows past it
    exps: list  # exp(s) rounded to dtype: inf past `limit`
    total: float  # their sum in dtype (inf once one is inf)
    naive: list  # exp(s) / total: nan where inf / inf, 0 elsewhere after an overflow
    stable: list  # exp(s - max) / sum: finite, the right weights


@dataclass(frozen=True)
class MaxWhy:
    """The max subtraction on the learner's row, then the same row grown to `large` logits."""

    row: int
    scores: list  # (S,) the scaled, masked scores of the row
    top: float  # their max
    shifted: list  # scores - max: every entry <= 0, so exp <= 1
    exps: list  # exp(scores - max)
    weights: list  # exps / their sum
    shift: float  # the row plus shift has max == large
    large: list  # the row plus shift: the same weights, exact arithmetic
    overflows: tuple[Overflow, ...]  # float32, float16


def _narrow_softmax(scores: list, dtype: str) -> Overflow:
    """Softmax of `scores` stored in `dtype`, naively and with the max subtracted."""
    scores = [round_to(s, dtype) for s in scores]  # the logits themselves are in dtype
    exps = [exp_in(s, dtype) if s > -inf else 0.0 for s in scores]
    total = 0.0
    for e in exps:
        total = round_to(total + e, dtype)
    naive = [math.nan if (e == inf and total == inf) else round_to(e / total, dtype) for e in exps]
    top = max(scores)
    shifted = [exp_in(round_to(s - top, dtype), dtype) if s > -inf else 0.0 for s in scores]
    denominator = 0.0
    for e in shifted:
        denominator = round_to(denominator + e, dtype)
    stable = [round_to(e / denominator, dtype) for e in shifted]
    limit = math.log(FORMATS[dtype][2])
    return Overflow(dtype, limit, exps, total, naive, stable)


def why_max(masked: list, row: int, large: float = 100.0) -> MaxWhy:
    """masked: (L, S) the scaled, masked scores; the row also shifted so that its max is `large`
    (logits of 100: the checker's large-logits case multiplies q by 100)."""
    _check_row(masked, row)
    scores = list(masked[row])
    finite = [s for s in scores if s > -inf]
    if not finite:
        raise ValueError(f"row: every key of row {row} is masked; pick a row that sees a key")
    top = max(finite)
    shifted = [s - top for s in scores]
    exps = [math.exp(s) for s in shifted]
    total = fsum(exps)
    shift = large - top
    grown = [s + shift for s in scores]  # -inf stays -inf
    overflows = tuple(_narrow_softmax(grown, d) for d in ("float32", "float16"))
    weights = [e / total for e in exps]
    return MaxWhy(row, scores, top, shifted, exps, weights, shift, grown, overflows)


@dataclass(frozen=True)
class MaskWhy:
    """One row three ways: -inf before softmax, 0 after softmax, 0 (not -inf) before it."""

    row: int
    allowed: list  # (S,) bools: True where the row may see the key
    assumed_causal: bool  # the example has no mask: the causal one is shown
    before: list  # weights with masked scores = -inf before softmax (right)
    after: list  # softmax of every score, masked weights set to 0 afterwards
    zero_score: list  # masked scores set to 0 (not -inf) before softmax
    sums: tuple[float, float, float]  # each row's sum: 1, < 1, 1


def why_mask(scaled: list, row: int, allowed: object = None) -> MaskWhy:
    """scaled: (L, S) scores after the scale, before any mask; allowed: (L, S) bools, or None
    (then the causal mask j <= i is shown)."""
    _check_row(scaled, row)
    S = len(scaled[row])
    assumed = allowed is None
    keep = (
        causal_cells(len(scaled), S, rows=[row])[0] if assumed else [bool(c) for c in allowed[row]]
    )
    if not any(keep):
        raise ValueError(f"row: every key of row {row} is masked; pick a row that sees a key")
    s = list(scaled[row])
    before = softmax_row([x if ok else -inf for x, ok in zip(s, keep)])
    after = [w if ok else 0.0 for w, ok in zip(softmax_row(s), keep)]
    zero = softmax_row([x if ok else 0.0 for x, ok in zip(s, keep)])
    sums = (fsum(before), fsum(after), fsum(zero))
    return MaskWhy(row, keep, assumed, before, after, zero, sums)


def _check_row(matrix: list, row: int) -> None:
    """ValueError unless `row` indexes a row of `matrix`."""
    if not isinstance(row, int) or not 0 <= row < len(matrix):
        raise ValueError(f"row: expected an int in [0, {len(matrix)}), found {row!r}")


__all__ = [
    "MaskWhy",
    "MaxWhy",
    "Overflow",
    "RowStats",
    "ScaleWhy",
    "row_stats",
    "why_mask",
    "why_max",
    "why_scale",
]

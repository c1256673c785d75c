"""Softmax along the last axis, with an explicit policy for rows where every key is masked."""

from __future__ import annotations

from math import exp, fsum, inf, log, nan

from scratch.ops.validate import as_tensor, check_masked_rows


def masked_row(n: int, masked_rows: str) -> list[float]:
    """Weights for a row whose keys are all masked, under the chosen policy."""
    if masked_rows == "zero":  # PyTorch >= 2.5 and FlashAttention: attend to nothing
        return [0.0] * n
    if masked_rows == "nan":  # the textbook softmax of all -inf: 0 / 0
        return [nan] * n
    return [1.0 / n] * n  # "uniform": what filling with a finite -1e9 gives


def softmax_row(row: list[float], masked_rows: str = "zero", fully_masked: bool | None = None):
    """exp(x - max) / sum, the sum taken with fsum; all -inf rows follow `masked_rows`."""
    if fully_masked is None:
        fully_masked = all(x == -inf for x in row)
    if fully_masked:
        return masked_row(len(row), masked_rows)
    top = max(row)  # subtract the row max so exp never overflows (logits of 1e4 are fine)
    e = [exp(x - top) for x in row]  # each in [0, 1]; NaN/inf in the row give NaN (IEEE)
    total = fsum(e)
    return [x / total for x in e]


def weights_with_sink(row: list[float], sink: float) -> tuple[list[float], float]:
    """Softmax of a row with one more term, the sink logit, in the denominator (no value)."""
    top = max(max(row, default=-inf), sink)  # subtract the max (sink included): exp <= 1
    e = [exp(x - top) for x in row]
    s = exp(sink - top)
    total = fsum(e + [s])
    return [x / total for x in e], s / total


def flex_weights(row: list[float], sink: float | None) -> tuple[list[float], float, float]:
    """(weights, sink weight, lse) of one row in FlexAttention's form: lse = log(sum of exp over
    the seen scores and the sink), weights exp(x - lse); nothing seen, no sink: 0s and -inf."""
    terms = [x for x in row if x != -inf] + ([] if sink is None else [sink])
    if not terms:
        return [0.0] * len(row), 0.0, -inf
    top = max(terms)  # subtract the row max so exp never overflows
    lse = top + log(fsum(exp(x - top) for x in terms))
    weights = [0.0 if x == -inf else exp(x - lse) for x in row]
    return weights, 0.0 if sink is None else exp(sink - lse), lse


def log_sum_exp_row(row: list[float]) -> float:
    """log sum_j exp(x_j) = max + log(fsum(exp(x - max))): softmax's log-denominator.

    -inf for a row whose entries are all -inf (the sum is 0, whatever masked_rows says the
    weights are); NaN and +inf in the row give NaN, as in softmax_row.
    """
    top = max(row)
    if top == -inf:
        return -inf
    # subtract the row max so exp never overflows; the largest term is exp(0) = 1, so the
    # fsum is in [1, len(row)] and its log in [0, log(len(row))]
    return top + log(fsum(exp(x - top) for x in row))


def softmax(x: object, masked_rows: str = "zero") -> list:
    """Softmax of a vector or of every row along the last axis of a nested list.

    Args:
        x: a vector (S,) or scores (..., S); -inf entries are masked keys.
        masked_rows: a row of only -inf: "zero" (all 0), "nan" (the textbook 0 / 0) or
            "uniform" (1 / S each).

    Returns:
        The weights, x's shape, each row summing to 1 (or a masked row as masked_rows says).

    Examples:
        >>> from scratch import softmax
        >>> softmax([0.0, 0.0])
        [0.5, 0.5]
        >>> softmax([[float("-inf"), float("-inf")]])
        [[0.0, 0.0]]
    """
    masked_rows = check_masked_rows(masked_rows)
    data, shape = as_tensor(x, "x", min_dims=1)
    if len(shape) == 1:
        return softmax_row(data, masked_rows)
    level = [data]
    for _ in shape[:-2]:
        level = [m for block in level for m in block]
    for matrix in level:  # matrix: (rows, n); rewrite its rows in place
        matrix[:] = [softmax_row(row, masked_rows) for row in matrix]
    return data

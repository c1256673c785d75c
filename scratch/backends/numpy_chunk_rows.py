"""The rows of a query chunk in the NumPy chunked kernels: their norms (the fast pass's bound),
the ranges the safe pass redoes, and how each row ends (one division, the fully masked rows'
policy, the log-sum-exp)."""

from __future__ import annotations

import numpy as np


def safe_ranges(i0: int, i1: int, rows: np.ndarray | None, plan) -> list[tuple[int, int]]:
    """The row ranges the safe pass redoes for `rows` (sorted; None: all of i0:i1): the smallest
    range holding them, or for a flex call with a block mask one per query block holding some
    (a range over many blocks would compute every key tile any of its rows sees)."""
    if rows is None:
        rows = np.arange(i0, i1)
    if plan is None or plan.block_mask is None:
        return [(int(rows[0]), int(rows[-1]) + 1)]
    cuts = np.flatnonzero(np.diff(rows // plan.block_mask.block_size[0])) + 1
    return [(int(run[0]), int(run[-1]) + 1) for run in np.split(rows, cuts)]


def row_norms(a: np.ndarray) -> np.ndarray:
    """|a_i| of each row (last axis) in float32 when that is finite, else in float64."""
    with np.errstate(over="ignore"):
        norms = np.sqrt(np.einsum("...e,...e->...", a, a))
    if norms.dtype == np.float64 or np.isfinite(norms).all():
        return norms.astype(np.float64)
    return np.sqrt(np.einsum("...e,...e->...", a, a, dtype=np.float64))


def log_sum_exp(base, total, to_natural, out) -> None:
    """out = (base + log(total)) * to_natural: the log-sum-exp of rows whose exps, taken
    relative to `base` (in the exponential's base), sum to `total`; -inf where total is 0."""
    log = np.log2 if to_natural != 1 else np.log  # the exponential's own base
    with np.errstate(divide="ignore"):  # log(0) = -inf: a row with every key masked
        log(total, out=out)
    out += base
    if to_natural != 1:
        out *= to_natural


def finish(acc, total, out, masked_rows, v_b, draws=None, dropout_p=0.0) -> None:
    """step 6: out = acc / denominator (one division); rows with no allowed key follow
    masked_rows."""
    full = total == 0
    np.divide(acc, np.where(full, 1, total)[:, None], out=out)
    if full.any():
        dropped = None if draws is None else draws[full]
        out[full] = _masked_rows_output(
            masked_rows, v_b, v_b.shape[0], out.dtype, dropped, dropout_p
        )


def _masked_rows_output(masked_rows, v_b, S, dtype, draws, dropout_p) -> np.ndarray | float:
    """Output of fully masked rows: 0, NaN, or the mean of v; after dropout when it is on."""
    if masked_rows == "zero":
        return 0.0
    if masked_rows == "nan":  # NaN weights, dropped or not (NaN * 0 = NaN, as torch's dropout)
        return np.nan
    if draws is None:
        return v_b.mean(axis=0, dtype=np.float64).astype(dtype)
    keep = draws >= dropout_p  # (r, S)
    weights = keep.astype(dtype) / dtype.type(S * (1.0 - dropout_p))  # (r, S)
    return weights @ v_b  # (r, S) @ (S, Ev) -> (r, Ev)


__all__ = ["finish", "log_sum_exp", "row_norms", "safe_ranges"]

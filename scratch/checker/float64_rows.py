"""The sampled rows' reference for 4096-token cases in 16/32-bit dtypes: float64 NumPy, not fsum.

The ground truth (fsum, plain Python) of 24 rows of 4096 keys costs about 0.7 s of CPU per case
here. Its exactness is not needed there: every bound already adds the float64 bound (`tolerance`
covers a float64 reference summed in any order), and float64 rounding (about 1e-16 relative) is
2^29 times below a float32 kernel's. A float64 check keeps the ground truth, where it matters.
"""

from __future__ import annotations

import numpy as np

from scratch.checker.reference import Problem, scores


def float64_rows(p: Problem, masked_rows: str) -> tuple[np.ndarray, np.ndarray]:
    """(output (..., R, Ev), weights (..., R, S)) of softmax(q @ k^T * scale + mask) @ v in
    float64, fully masked rows following `masked_rows` as the ground truth does."""
    k, v = p.heads()
    with np.errstate(all="ignore"):  # NaN and inf in the data propagate as in the ground truth
        s = scores(p, p.q, k, np.float64)  # (..., R, E) @ (..., E, S) -> (..., R, S)
        top = np.max(s, axis=-1, keepdims=True)  # (..., R, 1)
        full = top == -np.inf  # every key masked
        e = np.exp(s - np.where(full, 0.0, top))  # subtract the row max: exp never overflows
        weights = e / np.sum(e, axis=-1, keepdims=True)  # (..., R, S)
        fill = {"zero": 0.0, "nan": np.nan, "uniform": 1.0 / s.shape[-1]}[masked_rows]
        weights = np.where(full, fill, weights)
        output = weights @ v  # (..., R, S) @ (..., S, Ev) -> (..., R, Ev)
    if masked_rows == "zero":  # zero weights give zero output even where v holds inf or NaN
        output = np.where(full, 0.0, output)
    return output, weights

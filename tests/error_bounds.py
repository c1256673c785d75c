"""Derived rounding bounds shared by the NumPy tests: a kernel's output and its lse.

`output_bound` is scratch.tolerance plus the online-softmax rescaling of running sums;
`lse_bound` bounds a kernel's log-sum-exp (its derivation in the docstring). Both are per
element, from the dtype, the problem's sizes and the inputs, never fitted to a run.
"""

from __future__ import annotations

import math

import numpy as np

from scratch.bounds.tolerance import EXP_ULPS, SMALLEST_SUBNORMAL, UNIT_ROUNDOFF, gamma, tolerance


def output_bound(q, k, v, p, scale, dtype, mask=None, blocks=1):
    """scratch.tolerance, plus the online-softmax rescaling term for `blocks` key blocks."""
    bound = np.array(tolerance(q, k, v, p, scale=scale, dtype=dtype, attn_mask=mask))
    u = UNIT_ROUNDOFF[dtype]
    rescale = 2 * blocks * (2 * EXP_ULPS + 2) * u  # numerator and denominator
    return bound + np.where(bound > 0, rescale * (np.nan_to_num(p) @ np.abs(v)), 0.0)


def lse_bound(q, k, mask, scale, dtype: str) -> np.ndarray:
    """Per-row bound (..., L) on |lse - exact lse| for a kernel working in `dtype`.

    With u the unit roundoff, m = EXP_ULPS and Z_i = |scale| |q_i| max_j |k_j| + max_j
    |finite mask_ij| (Cauchy-Schwarz: every |masked score| of row i is <= Z_i):
        |err_i| <= g(E+6) Z_i + 3u (Z_i + log S) + g(S + 2m + S(2m+2)) + 2m u log S + S tiny.
    (1) A score is E products and sums, the scale (or scale*log2(e) folded into q, one more
    rounding), a float mask added: within g(E+3) Z_i. Subtracting the base b (row max, running
    max, or the fast pass's offset, each <= Z_i in size, so |x - b| <= 2 Z_i) rounds once more:
    3u Z_i in all, g(E+6) Z_i together. lse is 1-Lipschitz in the max norm (its gradient is the
    softmax row, >= 0 and summing to 1), so score errors move it by at most that. (2) The sum
    T = sum_j exp(x_j - b) >= 1: each exp off by m ulps (2m roundings), S-1 additions, and an
    online kernel's rescaling exp(m_old - m_new) times the running sum at most once per key
    (2m+2 roundings each): relative g(S + 2m + S(2m+2)), which log turns into as much absolute
    error. (3) log itself is off by m ulps of log T <= log S. (4) b + log T rounds once, and a
    base-2 kernel's final * ln(2) twice more: 3u |lse| <= 3u (Z_i + log S). (5) Terms below the
    smallest normal lose at most a subnormal each: S tiny on T >= 1. The ground truth (float64,
    fsum) obeys the float64 bound; callers add both.
    """
    u, tiny = UNIT_ROUNDOFF[dtype], SMALLEST_SUBNORMAL[dtype]
    E, S = q.shape[-1], k.shape[-2]
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
    size = abs(scale) * np.linalg.norm(q, axis=-1) * np.linalg.norm(k, axis=-1).max(-1)[..., None]
    if mask is not None and np.asarray(mask).dtype != np.bool_:
        finite = np.where(np.isfinite(mask), np.abs(mask), 0.0)
        size = size + np.broadcast_to(finite, q.shape[:-1] + (S,)).max(-1)
    m = EXP_ULPS
    log_s = math.log(S)
    return (
        gamma(E + 6, u) * size
        + 3 * u * (size + log_s)
        + gamma(S + 2 * m + S * (2 * m + 2), u)
        + 2 * m * u * log_s
        + S * tiny
    )

"""How far a correct kernel's attention weights may land from the ground truth's, per weight.

`scratch.tolerance` bounds the output; its steps (1)-(3) bound the weights on the way. Every
exponent of row i moves by at most delta_i = g(E+4) S_i (S_i the row's largest live
|scale| sum_l |q_il k_jl| + |attn_mask_ij|), so each weight moves by a factor within
expm1(2 delta_i) and softmax's own roundings add g(S+2m): the row factor R_i of `tolerance`
(which also counts the output sum's roundings, so it is a little wider than the weights need)
covers them. With the ground truth's own float64 error added, as there:

    |p_ij - truth_ij| <= (R_i(dtype) + R_i(float64)) p_ij + floor_w(dtype) + floor_w(float64).

The window checks a backend's sampled rows of weights with it (gui/sampled_check.py). Needs
NumPy (imported when called): at 4096 keys the sizes are an (R, E) @ (E, S) product per head.
"""

from __future__ import annotations

import math

from .options import Options
from .tolerance import Rounding, _check_inputs, _is_bool_mask, as_float64, check_dtype


def weights_tolerance(
    query: object, key: object, weights: object, options: Options, dtype: object = "float32"
) -> list:
    """Per-element bound (..., L, S) on |weights - ground truth| for a kernel working in `dtype`.

    query (..., L, E) and key (..., S, E) are the kernel's inputs, `weights` (..., L, S) the
    ground truth's p from them (NaN rows count as 0); `options` the call's scale, attn_mask (a
    bool mask adds nothing to the scores' size, a float one its finite |entries|) and
    enable_gqa. A causal call's mask adds nothing either (it is a bool mask)."""
    import numpy as np

    dtype = check_dtype(dtype)
    scale, attn_mask, enable_gqa = options.scale, options.attn_mask, options.enable_gqa
    # key stands in for value: a bound on the weights reads no values
    _check_inputs(query, key, key, weights, scale, attn_mask, enable_gqa)
    q, k, p = (as_float64(np, a) for a in (query, key, weights))
    E, S = q.shape[-1], k.shape[-2]
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)  # kv head h // group
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    # step 1: the largest live size of each row    (..., L, E) @ (..., E, S) -> (..., L, S)
    size = abs(scale) * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))
    if attn_mask is not None and not _is_bool_mask(attn_mask):
        mask = as_float64(np, attn_mask)
        size = size + np.where(np.isfinite(mask), np.abs(mask), 0.0)
    p = np.nan_to_num(p)
    largest = np.max(np.where(p > 0, size, 0.0), axis=-1, keepdims=True)  # (..., L, 1)
    # step 2: R_i p_ij + floor, the kernel's rounding in `dtype` plus the ground truth's own
    parts = (Rounding(dtype, E, S), Rounding("float64", E, S))
    factor = sum(np.vectorize(r.factor, otypes=[float])(r.score_gamma * largest) for r in parts)
    return (factor * p + sum(r.weight_floor for r in parts)).tolist()


__all__ = ["weights_tolerance"]

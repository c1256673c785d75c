"""How far a correct kernel's attention weights may land from the ground truth's, per weight.

`scratch.tolerance` bounds the output; its steps (1)-(3) bound the weights on the way. Every
exponent of row i moves by at most delta_i = g(E+4) S_i (S_i the row's largest live
|scale| sum_l |q_il k_jl| + |attn_mask_ij|), so each weight moves by a factor within
expm1(2 delta_i) and softmax's own roundings add g(S+2m): the row factor R_i of `tolerance`
(which also counts the output sum's roundings, so it is a little wider than the weights need)
covers them. With the ground truth's own float64 error added, as there:

    |p_ij - truth_ij| <= (R_i(dtype) + R_i(float64)) p_ij + floor_w(dtype) + floor_w(float64).

A 16-bit kernel may also hold the scores in its dtype before softmax (`stored_scores`): each
score, and its difference from the row max, then rounds once more (u_s |s| <= u_s S_i and
u_s 2 S_i), so delta_i grows by 3 u_s S_i. The window checks a backend's sampled rows of
weights with it (gui/state/sampled_check.py: float32 sums, stored_scores=False); `scratch.check`
checks the weights a user's kernel returns (stored_scores=True). NumPy computes it when
installed (at 4096 keys the sizes are an (R, E) @ (E, S) product per head), plain Python else.
"""

from __future__ import annotations

import math

from scratch.bounds.tolerance import (
    _check_inputs,
    _row_size,
    as_float64,
    check_dtype,
    list_blocks,
    row_factors,
)
from scratch.core.options import Options
from scratch.ops.nested import stack


def weights_tolerance(
    query: object,
    key: object,
    weights: object,
    options: Options,
    dtype: object = "float32",
    stored_scores: bool = False,
) -> list:
    """Per-element bound (..., L, S) on |weights - ground truth| for a kernel working in `dtype`.

    query (..., L, E) and key (..., S, E) are the kernel's inputs, `weights` (..., L, S) the
    ground truth's p from them (NaN rows count as 0); `options` the call's scale, attn_mask (a
    bool mask adds nothing to the scores' size, a float one its finite |entries|) and
    enable_gqa. A causal call's mask adds nothing either (it is a bool mask). stored_scores:
    the kernel may hold 16-bit scores (see above)."""
    dtype = check_dtype(dtype)
    scale, attn_mask, enable_gqa = options.scale, options.attn_mask, options.enable_gqa
    # key stands in for value: a bound on the weights reads no values
    group = _check_inputs(query, key, key, weights, scale, attn_mask, enable_gqa).group
    stored = 3.0 if stored_scores else 0.0  # u_s S_i's on each exponent
    try:
        import numpy as np
    except ImportError:
        return _weights_lists(query, key, weights, scale, dtype, attn_mask, group, stored)
    q, k, p = (as_float64(np, a) for a in (query, key, weights))
    p = np.nan_to_num(p)
    # steps 1-2: R_i of each row from its largest live size, the kernel's rounding in `dtype`
    # plus the ground truth's own; then R_i p_ij + floor
    factor, parts = row_factors(np, q, k, p, scale, dtype, attn_mask, group, stored)
    return (factor * p + sum(r.weight_floor for r in parts)).tolist()


def _weights_lists(query, key, weights, scale, dtype, attn_mask, group, stored) -> list:
    """weights_tolerance in plain Python (no NumPy), one (L, S) block at a time."""
    lead, scale, parts, walk = list_blocks(
        query, key, None, weights, scale, dtype, attn_mask, group
    )
    floor = sum(r.weight_floor for r in parts)
    blocks = []
    for _, qb, kb, _, pb, add in walk:
        rows = []
        for i, (q_i, p_i) in enumerate(zip(qb, pb)):
            p_i = [0.0 if math.isnan(x) else x for x in p_i]
            size = _row_size(q_i, kb, p_i, scale, None if add is None else add[i])
            factor = sum(r.factor((r.score_gamma + stored * r.u_store) * size) for r in parts)
            rows.append([factor * x + floor for x in p_i])
        blocks.append(rows)
    return stack(blocks, lead)


__all__ = ["weights_tolerance"]

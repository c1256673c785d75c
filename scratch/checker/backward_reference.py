"""Correct backward kernels in NumPy in the checked dtype: the backward rule's yardstick.

Each returns (dq, dk, dv) for one case and differs from the others only in the order and
precision of its sums: the textbook backward (every intermediate stored in the dtype), the same
with the keys reversed, the same with D taken as rowsum(P * dP) (equal in exact arithmetic),
one with float32 intermediates (16-bit dtypes), and a FlashAttention-2 style backward that
recomputes P per key block of 16 from the forward's log-sum-exp. The rule allows a kernel
twice the largest error of these, per gradient (see the README).
"""

from __future__ import annotations

import math

import numpy as np

from ..tolerance import ACCUMULATE
from .reference import Problem, scores, store


def group_sum(x: np.ndarray, kv_heads: int) -> np.ndarray:
    """(..., H, S, E) summed over each group of H // kv_heads query heads -> (..., Hkv, S, E)."""
    if x.ndim < 3 or x.shape[-3] == kv_heads:
        return x
    H = x.shape[-3]
    grouped = x.reshape(x.shape[:-3] + (kv_heads, H // kv_heads) + x.shape[-2:])
    return grouped.sum(axis=-3)


def weights_of(p: Problem, q, k, acc, dtype: str, masked_rows: str, *, reverse: bool = False):
    """P = softmax(scale q k^T + mask) in `acc`, stored in `dtype`; (P, rows with no key).

    reverse: keys (and features, so q k^T sums in another order) in the opposite order."""
    sub = p.reversed_keys() if reverse else p
    with np.errstate(all="ignore"):
        if reverse:
            q, k = q[..., ::-1], k[..., ::-1]
        return softmax(store(scores(sub, q, k, acc), dtype), masked_rows, dtype)  # (..., L, S)


def softmax(s: np.ndarray, masked_rows: str, dtype: str = "float64"):
    """(row softmax of masked scores s stored in `dtype`, rows with no key (..., L, 1)); the
    rows with no key follow the masked_rows policy."""
    with np.errstate(all="ignore"):
        top = np.max(s, axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = np.sum(e, axis=-1, keepdims=True)
        empty = total == 0  # (..., L, 1): every key masked
        P = store(e / np.where(empty, 1, total), dtype)
    fill = {"zero": 0.0, "nan": math.nan, "uniform": 1.0 / s.shape[-1]}[masked_rows]
    return np.where(empty, s.dtype.type(fill), P).astype(s.dtype), empty


def textbook(
    p: Problem,
    grad_output: np.ndarray,
    factors: np.ndarray | None,
    dtype: str,
    masked_rows: str = "zero",
    *,
    reverse: bool = False,
    d_from_weights: bool = False,
    wide: bool = False,
) -> tuple[np.ndarray, ...]:
    """The backward written out: sums in ACCUMULATE[dtype], intermediates stored in the dtype
    (in the accumulation type with wide=True)."""
    acc = np.dtype(ACCUMULATE[dtype]).type
    mid = ACCUMULATE[dtype] if wide else dtype  # where intermediates are stored
    k, v = p.heads()
    q, k, v, dO = (x.astype(acc) for x in (p.q, k, v, grad_output))
    keep = None if factors is None else factors.astype(acc)
    if reverse:  # the keys in the opposite order: other summation orders, same math
        k, v = k[..., ::-1, :], v[..., ::-1, :]
        keep = None if keep is None else keep[..., ::-1]
    with np.errstate(all="ignore"):
        P, empty = weights_of(p, q, k, acc, mid, masked_rows, reverse=reverse)  # (..., L, S)
        Pd = P if keep is None else store(P * keep, mid)
        O = store(Pd @ v, mid)  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
        dV = Pd.swapaxes(-1, -2) @ dO  # step 1: (..., S, L) @ (..., L, Ev) -> (..., S, Ev)
        dP = store(dO @ v.swapaxes(-1, -2), mid)  # step 2: (..., L, Ev) @ (..., Ev, S)
        if keep is not None:
            dP = store(dP * keep, mid)  # step 3: the forward's dropout mask, reused
        if d_from_weights:  # step 4: D_i = sum_j P_ij dP_ij, equal to sum_c dO_ic O_ic
            D = np.sum(P * dP, axis=-1, keepdims=True)
        else:
            D = np.sum(dO * O, axis=-1, keepdims=True)  # (..., L, 1)
        dS = store(P * (dP - D), mid)  # step 5
        if masked_rows == "uniform":
            dS = np.where(empty, acc(0), dS)
        dQ = store(dS @ k * acc(p.scale), dtype)  # step 6: (..., L, S) @ (..., S, E)
        dK = dS.swapaxes(-1, -2) @ q * acc(p.scale)  # step 7: (..., S, L) @ (..., L, E)
    if reverse:
        dK, dV = dK[..., ::-1, :], dV[..., ::-1, :]
    kv = p.k.shape[-3] if p.k.ndim >= 3 else 1
    return (
        dQ.astype(np.float64),
        store(group_sum(dK, kv), dtype).astype(np.float64),
        store(group_sum(dV, kv), dtype).astype(np.float64),
    )


def tiled(
    p: Problem,
    grad_output: np.ndarray,
    factors: np.ndarray | None,
    dtype: str,
    masked_rows: str = "zero",
    block: int = 16,
) -> tuple[np.ndarray, ...]:
    """FlashAttention-2's backward: P recomputed per key block from the row log-sum-exp."""
    acc = np.dtype(ACCUMULATE[dtype]).type
    k, v = p.heads()
    q, k, v, dO = (x.astype(acc) for x in (p.q, k, v, grad_output))
    keep = None if factors is None else factors.astype(acc)
    S = k.shape[-2]
    with np.errstate(all="ignore"):
        # (..., L, 1, E) * (..., 1, S, E) summed over E: q k^T in numpy's own order, not BLAS's
        products = np.sum(q[..., :, None, :] * k[..., None, :, :], axis=-1)
        s_all = products * acc(p.scale)  # (..., L, S), read block by block
        if p.add is not None:
            s_all = s_all + p.add.astype(acc)
        if p.allowed is not None:
            s_all = np.where(p.allowed, s_all, -np.inf)
        top = np.max(s_all, axis=-1, keepdims=True)
        safe = np.where(np.isfinite(top), top, 0)
        total = np.sum(np.exp(s_all - safe), axis=-1, keepdims=True)
        lse = safe + np.log(total)  # (..., L, 1): -inf for a row with no key
        empty = total == 0
        # the forward's output, stored in the dtype as a forward kernel returns it
        P_all = np.where(empty, 0, np.exp(s_all - np.where(empty, 0, lse)))
        if keep is not None:
            P_all = P_all * keep
        O = store(store(P_all, dtype) @ v, dtype)  # (..., L, Ev)
        D = np.sum(dO * O, axis=-1, keepdims=True)  # (..., L, 1), once before the loop
        dQ = np.zeros(q.shape, dtype=acc)
        dK, dV = np.zeros(k.shape, dtype=acc), np.zeros(v.shape, dtype=acc)
        for j in range(0, S, block):
            cols = slice(j, j + block)
            s = store(s_all[..., cols], dtype)
            P = np.where(empty, 0, np.exp(s - np.where(empty, 0, lse)))  # (..., L, b)
            Pd = P if keep is None else P * keep[..., cols]
            dV[..., cols, :] = store(Pd, dtype).swapaxes(-1, -2) @ dO  # (..., b, L) @ (..., L, Ev)
            dP = dO @ v[..., cols, :].swapaxes(-1, -2)  # (..., L, Ev) @ (..., Ev, b)
            if keep is not None:
                dP = dP * keep[..., cols]
            dS = store(P * (dP - D), dtype)  # (..., L, b)
            dQ = dQ + dS @ k[..., cols, :]  # (..., L, b) @ (..., b, E)
            dK[..., cols, :] = dS.swapaxes(-1, -2) @ q  # (..., b, L) @ (..., L, E)
        dQ, dK = dQ * acc(p.scale), dK * acc(p.scale)
    if masked_rows == "nan":
        nan = np.where(empty, acc(math.nan), acc(0))  # (..., L, 1)
        dQ = dQ + nan
        dK, dV = dK + _any_nan(nan), dV + _any_nan(nan)
    elif masked_rows == "uniform":
        uniform = np.where(empty, acc(1.0 / S), acc(0))  # (..., L, 1): P = 1/S, dS = 0
        dV = dV + uniform.swapaxes(-1, -2) @ dO  # (..., 1, L) @ (..., L, Ev), every key
    kv = p.k.shape[-3] if p.k.ndim >= 3 else 1
    return (
        store(dQ, dtype).astype(np.float64),
        store(group_sum(dK, kv), dtype).astype(np.float64),
        store(group_sum(dV, kv), dtype).astype(np.float64),
    )


def _any_nan(nan_rows: np.ndarray) -> np.ndarray:
    """NaN for every key of a head that has a NaN row (..., 1, 1), else 0."""
    return np.where(np.any(np.isnan(nan_rows), axis=-2, keepdims=True), math.nan, 0.0)


def reference_grads(prep, masked_rows: str) -> list[tuple[np.ndarray, ...]]:
    """(dq, dk, dv) of every correct reference kernel for this case in its dtype."""
    p, g, f, dtype = prep.problem, prep.grad_output, prep.factors, prep.dtype
    outs = [
        textbook(p, g, f, dtype, masked_rows),
        textbook(p, g, f, dtype, masked_rows, reverse=True),
        textbook(p, g, f, dtype, masked_rows, d_from_weights=True),
        tiled(p, g, f, dtype, masked_rows),
    ]
    if dtype in ("float16", "bfloat16"):
        outs.append(textbook(p, g, f, dtype, masked_rows, wide=True))
    return outs


def max_error(got: np.ndarray, truth: np.ndarray) -> float:
    """max |got - truth|: NaN against NaN is 0, NaN or inf against a number is inf."""
    with np.errstate(invalid="ignore"):
        both = np.isnan(got) & np.isnan(truth)
        diff = np.where(both, 0.0, np.abs(got - truth))
    if diff.size == 0:
        return 0.0
    return math.inf if not np.all(np.isfinite(diff)) else float(np.max(diff))


def rounding_scale(p: Problem, dO: np.ndarray, factors: np.ndarray | None) -> tuple:
    """Per element of (dq, dk, dv): the size of the terms whose rounding moves it (float64).

    First order, not a rigorous bound: a score rounded by u S_ij (S_ij = |scale| sum_c |q_ic
    k_jc| + |mask_ij|) moves P_ij by about u P_ij (S_ij + sum_l P_il S_il + 1); dS = P (dP - D)
    then moves by that times |dP - D| plus u P (|dP| + |D|) from its own sums, and dq, dk, dv
    by those sizes times |k|, |q| and |dO|. The rule lets an element pass when its error is at
    most (E + Ev + S) u times this scale (run.py): rounding at the size of the terms, which
    no real mistake stays under (a mistake moves a gradient by about its own size).
    """
    k, v = p.heads()
    q = p.q
    keep = 1.0 if factors is None else factors
    with np.errstate(all="ignore"):
        P, _ = weights_of(p, q, k, np.float64, "float64", "zero")  # (..., L, S)
        P = np.nan_to_num(P)
        Pd = P * keep
        O = Pd @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
        dP = (dO @ v.swapaxes(-1, -2)) * keep  # (..., L, S)
        D = np.sum(dO * O, axis=-1, keepdims=True)  # (..., L, 1)
        size = abs(p.scale) * (np.abs(q) @ np.abs(k).swapaxes(-1, -2))  # (..., L, S)
        if p.add is not None:
            size = size + np.abs(p.add)
        if p.allowed is not None:
            size = np.where(p.allowed, size, 0.0)
        moved = P * (size + np.sum(P * size, axis=-1, keepdims=True) + 1.0)  # |dP_ij| / u
        terms = (np.abs(dO) @ np.abs(v).swapaxes(-1, -2)) * np.abs(keep)  # |dP| by terms
        D_terms = np.sum(Pd * terms, axis=-1, keepdims=True)  # |D| by terms (..., L, 1)
        dS = P * (dP - D)
        W = moved * np.abs(dP - D) + P * (terms + D_terms) + np.abs(dS)  # (..., L, S)
        sq = abs(p.scale) * (W @ np.abs(k))  # (..., L, S) @ (..., S, E)
        sk = abs(p.scale) * (W.swapaxes(-1, -2) @ np.abs(q))  # (..., S, L) @ (..., L, E)
        sv = ((moved + P) * np.abs(keep)).swapaxes(-1, -2) @ np.abs(dO)  # (..., S, Ev)
    kv = p.k.shape[-3] if p.k.ndim >= 3 else 1
    return tuple(np.nan_to_num(x) for x in (sq, group_sum(sk, kv), group_sum(sv, kv)))

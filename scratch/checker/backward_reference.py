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
from dataclasses import replace

import numpy as np

from scratch.bounds.tolerance import ACCUMULATE
from scratch.checker.reference import LOG2E, Problem, scores, store


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


BLOCKS = (16, 32, 64, 128)  # the block sizes an FA2 block mistake is planted with
SIZED = ("fa2_block_softmax", "fa2_dq_overwritten", "fa2_dk_overwritten")
RECOMPUTED = ("block_softmax", "mask_dropped", "fa2_block_softmax", "fa2_mask_dropped",
              "fa2_lse_log2", "fa2_lse_scale")  # the mistakes in P's recompute  # fmt: skip


def shows(p: Problem, factors, mistake: str | None, block: int) -> bool:
    """Whether this case can show the mistake at all (its shapes, mask, dropout, heads)."""
    k, v = p.heads()
    L, S = p.q.shape[-2], k.shape[-2]
    return not (
        (mistake == "ds_transposed" and L != S)
        or (mistake == "dq_from_v" and k.shape[-1] != v.shape[-1])
        or (mistake in ("block_softmax", "fa2_block_softmax", "fa2_dq_overwritten") and S <= block)
        or (mistake == "fa2_dk_overwritten" and L <= block)
        or (mistake in ("d_before_dropout", "fa2_dropout_unscaled", "fa2_dv_before_dropout")
            and factors is None)
        or (mistake == "fa2_mask_dropped" and p.allowed is None)
        or (mistake == "fa2_gqa_interleaved_sum" and not (p.gqa and k.shape[-3] != p.k.shape[-3]))
    )  # fmt: skip


def _lse(s: np.ndarray) -> np.ndarray:
    """Each row's log-sum-exp (..., L, 1); +inf for rows with no key (their P is 0)."""
    top = np.max(s, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0)
    total = np.sum(np.exp(s - safe), axis=-1, keepdims=True)
    return np.where(total > 0, safe + np.log(np.where(total > 0, total, 1)), np.inf)


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
    mistake: str | None = None,
    block: int = 16,
) -> tuple[np.ndarray, ...] | None:
    """The backward written out: sums in ACCUMULATE[dtype], intermediates stored in the dtype
    (in the accumulation type with wide=True). With `mistake` (a key of backward_diagnosis's
    MISTAKES or FA2, in float64) one known mistake planted: None where the case cannot show it."""
    if not shows(p, factors, mistake, block):
        return None
    fa2 = mistake is not None and mistake.startswith("fa2_")
    acc = np.dtype(ACCUMULATE[dtype]).type
    mid = ACCUMULATE[dtype] if wide else dtype  # where intermediates are stored
    k, v = p.heads(interleave=mistake == "gqa_interleaved")
    q, k, v, dO = (x.astype(acc) for x in (p.q, k, v, grad_output))
    keep = None if factors is None else factors.astype(acc)
    if reverse:  # the keys in the opposite order: other summation orders, same math
        k, v = k[..., ::-1, :], v[..., ::-1, :]
        keep = None if keep is None else keep[..., ::-1]
    L, S, scale = q.shape[-2], k.shape[-2], p.scale
    with np.errstate(all="ignore"):
        P, empty = weights_of(p, q, k, acc, mid, masked_rows, reverse=reverse)  # (..., L, S)
        if fa2:  # the forward's stored output (..., L, Ev), right whatever P the backward makes
            O = (P if keep is None else P * keep) @ v
        if mistake in RECOMPUTED:
            P, empty = _recomputed(p, q, k, P, empty, mistake, masked_rows, block)
        if mistake == "dropout_none":
            keep = None
        if mistake in ("dropout_unscaled", "fa2_dropout_unscaled") and keep is not None:
            keep = (keep > 0).astype(acc)
        Pd = P if keep is None or mistake == "fa2_dv_before_dropout" else store(P * keep, mid)
        if not fa2:
            O = store(Pd @ v, mid)  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
        dV = Pd.swapaxes(-1, -2) @ dO  # step 1: (..., S, L) @ (..., L, Ev) -> (..., S, Ev)
        dPd = store(dO @ v.swapaxes(-1, -2), mid)  # step 2: (..., L, Ev) @ (..., Ev, S)
        dP = dPd  # step 3: the forward's dropout mask, reused
        if keep is not None and mistake != "dropout_dp":
            dP = store(dPd * keep, mid)
        if d_from_weights:  # step 4: D_i = sum_j P_ij dP_ij, equal to sum_c dO_ic O_ic
            D = np.sum(P * dP, axis=-1, keepdims=True)
        else:
            D = np.sum(dO * O, axis=-1, keepdims=True)  # (..., L, 1)
        if mistake == "no_d":
            D = 0.0
        elif mistake == "d_before_dropout":
            D = np.sum(P * dPd, axis=-1, keepdims=True)
        elif mistake == "d_elementwise":
            D = P * dP
        elif mistake == "d_over_queries":
            D = np.sum(P * dP, axis=-2, keepdims=True)  # (..., 1, S)
        dS = store(P * (dP - D) if mistake != "sign" else P * (D - dP), mid)  # step 5
        if mistake == "fa2_ds_without_p":
            dS = dP - D
            if p.allowed is not None:  # a kernel reads only the allowed tiles' keys
                dS = np.where(p.allowed, dS, 0.0)
        if masked_rows == "uniform":
            dS = np.where(empty, acc(0), dS)
        dS_q = dS.swapaxes(-1, -2) if mistake == "ds_transposed" else dS
        dS_k = dS if mistake == "ds_transposed" else dS.swapaxes(-1, -2)
        q_scale = {"no_scale_dq": 1.0, "no_scale": 1.0, "scale_twice_dq": scale * scale}
        k_scale = {"no_scale_dk": 1.0, "no_scale": 1.0, "scale_twice_dk": scale * scale}
        q_scale, k_scale = acc(q_scale.get(mistake, scale)), acc(k_scale.get(mistake, scale))
        dQ = store(dS_q @ (v if mistake == "dq_from_v" else k) * q_scale, dtype)  # step 6
        dK = dS_k @ q * k_scale  # step 7: (..., S, L) @ (..., L, E) -> (..., S, E)
        if mistake == "fa2_dq_overwritten":  # only the last key block's share survives
            j = (S - 1) // block * block
            dQ = dS[..., j:] @ k[..., j:, :] * scale
        elif mistake == "fa2_dk_overwritten":  # only the last query block's share survives
            i = (L - 1) // block * block
            dK = dS[..., i:, :].swapaxes(-1, -2) @ q[..., i:, :] * scale
    if reverse:
        dK, dV = dK[..., ::-1, :], dV[..., ::-1, :]
    dK, dV = _to_kv_heads(p, dK, dV, "gqa_interleaved" if fa2 and "gqa" in mistake else mistake)
    if mistake == "swapped":
        if dK.shape != dV.shape:
            return None
        dK, dV = dV, dK
    return tuple(store(g, dtype).astype(np.float64) for g in (dQ, dK, dV))


def _recomputed(p: Problem, q, k, P, empty, mistake: str, masked_rows: str, block: int):
    """(P, rows with no key) as a backward with `mistake` recomputes them (float64)."""
    S = k.shape[-2]
    s = scores(p, q, k, np.float64)  # (..., L, S), masked
    unmasked = scores(replace(p, allowed=None), q, k, np.float64)
    if mistake in ("block_softmax", "fa2_block_softmax"):  # each block its own softmax
        blocks = [softmax(s[..., j : j + block], "zero")[0] for j in range(0, S, block)]
        P = np.concatenate(blocks, axis=-1)
    elif mistake == "mask_dropped":  # (its rows with no key: none)
        P, empty = softmax(unmasked, masked_rows)
    elif mistake == "fa2_mask_dropped":
        P = np.exp(unmasked - _lse(s))
    elif mistake == "fa2_lse_log2":
        P = np.exp(s - _lse(s) * LOG2E)
    elif mistake == "fa2_lse_scale":
        P = np.exp(s - _lse(scores(replace(p, scale=1.0), q, k, np.float64)))
    if mistake.startswith("fa2_"):
        P = np.nan_to_num(P, nan=0.0, posinf=0.0)
    return P, empty


def _to_kv_heads(p: Problem, dK: np.ndarray, dV: np.ndarray, mistake: str | None):
    """dK, dV of the query heads turned into the kv heads' gradients (summed over each group)."""
    kv = p.k.shape[-3] if p.k.ndim >= 3 else 1
    if not p.gqa or dK.ndim < 3 or dK.shape[-3] == kv:
        return dK, dV
    H = dK.shape[-3]
    group = H // kv
    if mistake == "gqa_first_head":
        return dK[..., ::group, :, :], dV[..., ::group, :, :]
    if mistake == "gqa_mean":
        return group_sum(dK, kv) / group, group_sum(dV, kv) / group
    if mistake == "gqa_interleaved":  # query head h read kv head h % kv
        shape = dK.shape[:-3] + (group, kv) + dK.shape[-2:]
        vshape = dV.shape[:-3] + (group, kv) + dV.shape[-2:]
        return dK.reshape(shape).sum(axis=-4), dV.reshape(vshape).sum(axis=-4)
    return group_sum(dK, kv), group_sum(dV, kv)


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

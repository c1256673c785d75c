"""Backward mistakes in FlashAttention-2's form: D from the stored (correct) output, P from lse.

A tiled backward recomputes P = exp(s - lse) per tile from the forward's log-sum-exp and takes
D = rowsum(dO * O) from the forward's stored output, so a mistake in P there leaves O and D
right (the explicit form in backward_diagnosis rebuilds O and D from the wrong P). Each function
returns (dq, dk, dv) in float64, per query head (summed into kv heads by the caller), or None
where the case cannot show the mistake.
"""

from __future__ import annotations

import numpy as np

from .reference import LOG2E, Problem

BLOCKS = (16, 32, 64, 128)
MISTAKES = {
    "fa2_block_softmax": (
        "P recomputed per key block with the block's own softmax instead of the row's "
        "log-sum-exp (FlashAttention's L_i)"
    ),
    "fa2_mask_dropped": (
        "the mask (or causal mask) not applied when P is recomputed in the backward"
    ),
    "fa2_dq_overwritten": "dQ overwritten per key block instead of accumulated (= for +=)",
    "fa2_dk_overwritten": "dK overwritten per query block instead of accumulated (= for +=)",
    "fa2_dropout_unscaled": "dropout's 1/(1-p) missing in the backward (mask reused, not rescaled)",
    "fa2_ds_without_p": "dS without P: dS = dP - D instead of P * (dP - D)",
    "fa2_dv_before_dropout": "dV from P before dropout: dV = P^T dO instead of (P * mask)^T dO",
    "fa2_lse_log2": "lse in log2 units used as natural: P = exp(s - lse log2(e))",
    "fa2_lse_scale": "lse from another scale: P = exp(s - lse) with lse of the unscaled q k^T",
    "fa2_gqa_interleaved_sum": (
        "GQA gradients summed over interleaved heads: kv head h gets query heads h, h + Hkv, ... "
        "(the forward read h // group)"
    ),
}


def _scores(p: Problem, k: np.ndarray, scale: float, masked: bool = True) -> np.ndarray:
    """(..., L, S) scores times scale, plus the float mask, masked to -inf where not allowed."""
    s = p.q @ k.swapaxes(-1, -2) * scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
    if p.add is not None:
        s = s + p.add
    if p.allowed is not None and masked:
        s = np.where(p.allowed, s, -np.inf)
    return s


def _lse(s: np.ndarray) -> np.ndarray:
    """Each row's log-sum-exp (..., L, 1); +inf for rows with no key (their P is 0)."""
    top = np.max(s, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0)
    total = np.sum(np.exp(s - safe), axis=-1, keepdims=True)
    return np.where(total > 0, safe + np.log(np.where(total > 0, total, 1)), np.inf)


def tiled_planted(p: Problem, dO: np.ndarray, factors, mistake: str, block: int = 16):
    """(dq, dk, dv) per query head with one FlashAttention-2 mistake planted, or None."""
    k, v = p.heads()
    L, S = p.q.shape[-2], k.shape[-2]
    if mistake in ("fa2_dropout_unscaled", "fa2_dv_before_dropout") and factors is None:
        return None
    if mistake in ("fa2_block_softmax", "fa2_dq_overwritten") and S <= block:
        return None
    if mistake == "fa2_dk_overwritten" and L <= block:
        return None
    if mistake == "fa2_mask_dropped" and p.allowed is None:
        return None
    if mistake == "fa2_gqa_interleaved_sum" and not (p.gqa and k.shape[-3] != p.k.shape[-3]):
        return None
    with np.errstate(all="ignore"):
        s = _scores(p, k, p.scale)
        lse = _lse(s)
        P = np.exp(s - lse)  # the forward's weights (..., L, S)
        O = (P if factors is None else P * factors) @ v  # (..., L, Ev): the stored output
        D = np.sum(dO * O, axis=-1, keepdims=True)  # (..., L, 1)
        if mistake == "fa2_block_softmax":
            P = np.concatenate(
                [np.exp(s[..., j : j + block] - _lse(s[..., j : j + block])) for j in
                 range(0, S, block)], axis=-1)  # fmt: skip
        elif mistake == "fa2_mask_dropped":
            P = np.exp(_scores(p, k, p.scale, masked=False) - lse)
        elif mistake == "fa2_lse_log2":
            P = np.exp(s - lse * LOG2E)
        elif mistake == "fa2_lse_scale":
            P = np.exp(s - _lse(_scores(p, k, 1.0)))
        P = np.nan_to_num(P, nan=0.0, posinf=0.0)
        z = factors
        if mistake == "fa2_dropout_unscaled":
            z = (factors > 0).astype(np.float64)
        Pd = P if z is None or mistake == "fa2_dv_before_dropout" else P * z
        dV = Pd.swapaxes(-1, -2) @ dO  # (..., S, L) @ (..., L, Ev) -> (..., S, Ev)
        dP = dO @ v.swapaxes(-1, -2)  # (..., L, Ev) @ (..., Ev, S) -> (..., L, S)
        if z is not None:
            dP = dP * z
        dS = dP - D if mistake == "fa2_ds_without_p" else P * (dP - D)
        if mistake == "fa2_ds_without_p" and p.allowed is not None:
            dS = np.where(p.allowed, dS, 0.0)  # a kernel reads only the allowed tiles' keys
        dQ = dS @ k * p.scale  # (..., L, S) @ (..., S, E) -> (..., L, E)
        dK = dS.swapaxes(-1, -2) @ p.q * p.scale  # (..., S, L) @ (..., L, E) -> (..., S, E)
        if mistake == "fa2_dq_overwritten":  # only the last key block's share survives
            j = (S - 1) // block * block
            dQ = dS[..., j:] @ k[..., j:, :] * p.scale
        elif mistake == "fa2_dk_overwritten":  # only the last query block's share survives
            i = (L - 1) // block * block
            dK = dS[..., i:, :].swapaxes(-1, -2) @ p.q[..., i:, :] * p.scale
    return dQ, dK, dV


def candidates(p: Problem, dO: np.ndarray, factors) -> list[tuple[str, tuple]]:
    """(words, per-query-head (dq, dk, dv)) for every FlashAttention-2 mistake and block."""
    found = []
    for key, words in MISTAKES.items():
        sized = key in ("fa2_block_softmax", "fa2_dq_overwritten", "fa2_dk_overwritten")
        for block in BLOCKS if sized else (16,):
            grads = tiled_planted(p, dO, factors, key, block)
            if grads is not None:
                found.append((words, grads))
    return found

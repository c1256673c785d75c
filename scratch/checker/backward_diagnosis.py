"""Known backward mistakes, each planted in a float64 backward, and the diagnosis that names them.

A failing kernel's (dq, dk, dv) is compared with every mistake's gradients on the same case;
the mistake is named only when all three gradients land on it (each within twice the rule's
allowance, or 1/1000 of the mistake's own distance from the truth) and at least one of them
is told apart from the truth. Otherwise nothing is named: a wrong name is worse than none.
"""

from __future__ import annotations

import math

import numpy as np

from .backward_reference import group_sum
from .backward_tiled import MISTAKES as TILED
from .backward_tiled import candidates as tiled_candidates
from .diagnosis import structural_score
from .reference import Problem

MISTAKES = {
    "no_d": "the D term left out: dS = P * dP, but softmax's Jacobian needs dS = P * (dP - D)",
    "d_before_dropout": (
        "D taken as rowsum(dP * P) with dP and P before dropout: with dropout D must be "
        "rowsum(dO * O) (or rowsum of the dropped P times dP)"
    ),
    "d_elementwise": "D not summed over the keys: D = dP * P elementwise instead of its row sum",
    "d_over_queries": "D summed over the queries (columns) instead of the keys (rows)",
    "sign": "dS with the wrong sign: P * (D - dP) instead of P * (dP - D)",
    "ds_transposed": "dS transposed: dQ = scale dS^T K and dK = scale dS Q",
    "no_scale_dq": "scale missing in dQ (dQ = dS K, not scale * dS K)",
    "no_scale_dk": "scale missing in dK (dK = dS^T Q, not scale * dS^T Q)",
    "no_scale": "scale missing in dQ and dK",
    "scale_twice_dq": "scale applied twice in dQ (scale^2 * dS K)",
    "scale_twice_dk": "scale applied twice in dK (scale^2 * dS^T Q)",
    "gqa_first_head": (
        "GQA gradients not summed: dK, dV of a kv head hold only the first query head of its "
        "group, not the sum over the group"
    ),
    "gqa_mean": "GQA gradients averaged over the group instead of summed",
    "gqa_interleaved": "GQA heads mapped as h % kv_heads instead of h // group",
    "dropout_dp": (
        "dropout mask not reused in dP: dP = dO V^T must be multiplied by the forward's mask "
        "and 1/(1-p), as P was"
    ),
    "dropout_none": (
        "dropout mask not reused: the gradients are those of attention without dropout"
    ),
    "dropout_unscaled": "dropout's 1/(1-p) missing in the backward (mask reused, not rescaled)",
    "nan_rows": (
        "NaN from fully masked rows: their P is 0/0; give them zero gradients (or check with "
        "masked_rows='nan' if NaN is your policy)"
    ),
    "swapped": "dK and dV swapped (returned as (dq, dv, dk))",
    "dq_from_v": "dQ computed from V instead of K (dS V)",
    "mask_dropped": "the mask (or causal mask) not applied when P is recomputed in the backward",
    "block_softmax": (
        "P recomputed per key block with the block's own softmax instead of the row's "
        "log-sum-exp (FlashAttention's L_i)"
    ),
}


def planted(
    p: Problem,
    dO: np.ndarray,
    factors: np.ndarray | None,
    mistake: str | None = None,
    masked_rows: str = "zero",
    block: int = 16,
) -> tuple[np.ndarray, ...] | None:
    """(dq, dk, dv) in float64 with one mistake planted (None: correct); None if inapplicable."""
    k, v = p.heads(interleave=mistake == "gqa_interleaved")
    q, scale = p.q, p.scale
    L, S = q.shape[-2], k.shape[-2]
    if mistake == "ds_transposed" and L != S:
        return None
    if mistake == "dq_from_v" and k.shape[-1] != v.shape[-1]:
        return None
    keep = factors
    with np.errstate(all="ignore"):
        s = q @ k.swapaxes(-1, -2) * scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
        if p.add is not None:
            s = s + p.add
        if p.allowed is not None and mistake != "mask_dropped":
            s = np.where(p.allowed, s, -np.inf)
        P, empty = _softmax(s, masked_rows)
        if mistake == "block_softmax":
            if S <= block:
                return None
            P = np.concatenate(
                [_softmax(s[..., j : j + block], "zero")[0] for j in range(0, S, block)], axis=-1
            )
        if mistake == "dropout_none":
            keep = None
        if mistake == "dropout_unscaled" and keep is not None:
            keep = (keep > 0).astype(np.float64)
        Pd = P if keep is None else P * keep
        O = Pd @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
        dV = Pd.swapaxes(-1, -2) @ dO  # (..., S, L) @ (..., L, Ev) -> (..., S, Ev)
        dPd = dO @ v.swapaxes(-1, -2)  # (..., L, Ev) @ (..., Ev, S) -> (..., L, S)
        dP = dPd if keep is None or mistake == "dropout_dp" else dPd * keep
        D = np.sum(dO * O, axis=-1, keepdims=True)  # (..., L, 1)
        if mistake == "no_d":
            D = 0.0
        elif mistake == "d_before_dropout":
            if factors is None:
                return None
            D = np.sum(P * dPd, axis=-1, keepdims=True)
        elif mistake == "d_elementwise":
            D = P * dP
        elif mistake == "d_over_queries":
            D = np.sum(P * dP, axis=-2, keepdims=True)  # (..., 1, S)
        dS = P * (dP - D) if mistake != "sign" else P * (D - dP)
        if masked_rows == "uniform":
            dS = np.where(empty, 0.0, dS)
        dS_q = dS.swapaxes(-1, -2) if mistake == "ds_transposed" else dS
        dS_k = dS if mistake == "ds_transposed" else dS.swapaxes(-1, -2)
        q_scale = {"no_scale_dq": 1.0, "no_scale": 1.0, "scale_twice_dq": scale * scale}
        k_scale = {"no_scale_dk": 1.0, "no_scale": 1.0, "scale_twice_dk": scale * scale}
        q_scale, k_scale = q_scale.get(mistake, scale), k_scale.get(mistake, scale)
        dQ = dS_q @ (v if mistake == "dq_from_v" else k) * q_scale  # (..., L, S) @ (..., S, E)
        dK = dS_k @ q * k_scale  # (..., S, L) @ (..., L, E) -> (..., S, E)
    dK, dV = _to_kv_heads(p, dK, dV, mistake)
    if mistake == "swapped":
        if dK.shape != dV.shape:
            return None
        dK, dV = dV, dK
    return dQ, dK, dV


def _softmax(s: np.ndarray, masked_rows: str) -> tuple[np.ndarray, np.ndarray]:
    """Row softmax of masked scores and the rows with no key; such rows follow the policy."""
    top = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0))
    total = np.sum(e, axis=-1, keepdims=True)
    empty = total == 0
    fill = {"zero": 0.0, "nan": math.nan, "uniform": 1.0 / s.shape[-1]}[masked_rows]
    return np.where(empty, fill, e / np.where(empty, 1, total)), empty


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


def candidates(prep, masked_rows: str) -> list[tuple[str, tuple]]:
    """(words, (dq, dk, dv)) of every mistake that applies to this case, computed once."""

    def make() -> list:
        found = []
        for key, words in MISTAKES.items():
            policy = "nan" if key == "nan_rows" else masked_rows
            if key == "nan_rows" and (masked_rows == "nan" or prep.case.mask != "empty-row"):
                continue
            plant = None if key == "nan_rows" else key
            grads = planted(prep.problem, prep.grad_output, prep.factors, plant, policy)
            if grads is not None:
                found.append((words, grads))
        if masked_rows == "zero":  # a tiled kernel's rows with no key: P = exp(s - inf) = 0
            p = prep.problem
            for words, (dQ, dK, dV) in tiled_candidates(p, prep.grad_output, prep.factors):
                fold = "gqa_interleaved" if words == TILED["fa2_gqa_interleaved_sum"] else None
                found.append((words, (dQ, *_to_kv_heads(p, dK, dV, fold))))
        return found

    return prep.memo(f"mistakes:{masked_rows}", make)


def match_score(got: tuple, grads: tuple, truth: tuple, allowed: tuple) -> float:
    """How well got lands on a mistake's gradients: <= 2 is a match (math.inf: no match)."""
    told_apart = False
    worst = 0.0
    for g, v, t, a in zip(got, grads, truth, allowed):
        if g.shape != v.shape:
            return math.inf
        bound = np.full(t.shape, max(a, 1e-300))
        with np.errstate(all="ignore"):
            far = np.where(np.isnan(v) & np.isnan(t), 0.0, np.abs(v - t))
        differs = bool(np.any(np.isnan(v) != np.isnan(t)) or np.any(far > 4 * bound))
        if differs:
            told_apart = True
            nan = np.isnan(v)
            if np.all(nan):  # every entry NaN (a NaN row summed into dk, dv): NaN must match
                score = 0.0 if np.all(np.isnan(g)) else math.inf
            else:
                score = structural_score(g, v, t, bound)
        else:  # this gradient is right in the mistake too: the kernel's must be right as well
            with np.errstate(all="ignore"):
                err = np.where(np.isnan(g) & np.isnan(t), 0.0, np.abs(g - t))
            score = float(np.max(err / bound)) if err.size else 0.0
            score = math.inf if not math.isfinite(score) else score
        worst = max(worst, score)
    return worst if told_apart else math.inf


def _nan_from_empty_rows(prep, got: tuple, masked_rows: str) -> bool:
    """NaN where the truth has numbers, dQ's only on the rows that may attend no key.

    However the NaN got there (a 0/0 P summed into dK and dV, or autograd through
    masked_fill(-inf) + softmax, which leaves dQ and dK finite and only dV NaN), it comes from
    those rows; the whole-pattern match below needs all three gradients to agree."""
    allowed = prep.problem.allowed
    if masked_rows == "nan" or prep.case.mask != "empty-row" or allowed is None:
        return False
    with np.errstate(invalid="ignore"):
        new_nan = [np.isnan(g) & ~np.isnan(t) for g, t in zip(got, prep.truth)]
    if not any(n.any() for n in new_nan):
        return False
    empty = ~np.asarray(allowed).any(axis=-1)  # (L,) rows where every key is masked
    return not np.any(new_nan[0].any(axis=-1) & ~empty)  # dQ's NaN rows (..., L) all empty


def diagnose(prep, got: tuple, allowed: tuple, masked_rows: str) -> str | None:
    """The known mistake that matches the kernel's (dq, dk, dv) best, or None."""
    if _nan_from_empty_rows(prep, got, masked_rows):
        return MISTAKES["nan_rows"]
    matched = {
        words
        for words, grads in candidates(prep, masked_rows)
        if match_score(got, grads, prep.truth, allowed) <= 2.0
    }
    return matched.pop() if len(matched) == 1 else None  # two names alike: this case can't tell


def diagnose_shapes(prep, shapes: tuple) -> str | None:
    """Name a mistake from the shapes of (dq, dk, dv) alone."""
    case = prep.case
    want = (case.q, case.k, case.v)
    if shapes == want:
        return None
    if shapes == (case.q, case.v, case.k):
        return MISTAKES["swapped"]
    if case.gqa and shapes[1][:-3] == case.q[:-3] and shapes[1][-3] == case.q[-3]:
        return (
            "GQA gradients not summed over the group: dk and dv have the query's head count "
            f"({case.q[-3]}), expected the key's ({case.k[-3]})"
        )
    if shapes[0] == case.q and shapes[1][-2:] == (case.q[-2], case.k[-1]) != case.k[-2:]:
        return "dS transposed: dK has L rows (dS @ Q instead of dS^T @ Q)"
    return None

"""Known backward mistakes, each planted in a float64 backward, and the diagnosis that names them.

A failing kernel's (dq, dk, dv) is compared with every mistake's gradients on the same case;
the mistake is named only when all three gradients land on it (each within twice the rule's
allowance, or 1/1000 of the mistake's own distance from the truth) and at least one of them
is told apart from the truth. Otherwise nothing is named: a wrong name is worse than none.

Each is planted by backward_reference.textbook (mistake=key) in one of two forms. The explicit
form rebuilds O and D from the planted P; FlashAttention-2's form (keys 'fa2_...') recomputes
P per tile from the forward's log-sum-exp and takes D = rowsum(dO * O) from the forward's
stored (correct) output, so a mistake in P there leaves O and D right.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from scratch.checker.backward_reference import BLOCKS, SIZED, textbook
from scratch.checker.mistake import Mistake, named, one, outputs, structural_score

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
FA2 = {  # the same words as the explicit form's where the mistake is the same
    "fa2_block_softmax": MISTAKES["block_softmax"],
    "fa2_mask_dropped": MISTAKES["mask_dropped"],
    "fa2_dq_overwritten": "dQ overwritten per key block instead of accumulated (= for +=)",
    "fa2_dk_overwritten": "dK overwritten per query block instead of accumulated (= for +=)",
    "fa2_dropout_unscaled": MISTAKES["dropout_unscaled"],
    "fa2_ds_without_p": "dS without P: dS = dP - D instead of P * (dP - D)",
    "fa2_dv_before_dropout": "dV from P before dropout: dV = P^T dO instead of (P * mask)^T dO",
    "fa2_lse_log2": "lse in log2 units used as natural: P = exp(s - lse log2(e))",
    "fa2_lse_scale": "lse from another scale: P = exp(s - lse) with lse of the unscaled q k^T",
    "fa2_gqa_interleaved_sum": (
        "GQA gradients summed over interleaved heads: kv head h gets query heads h, h + Hkv, ... "
        "(the forward read h // group)"
    ),
}


def candidates(prep, masked_rows: str) -> list[Mistake]:
    """Every mistake (and block size) this case can show, as a record (words, (key, block))."""
    found = []
    for key, words in (MISTAKES | FA2).items():
        if key == "nan_rows" and (masked_rows == "nan" or prep.case.mask != "empty-row"):
            continue
        if key.startswith("fa2_") and masked_rows != "zero":  # a tiled kernel's empty rows: P = 0
            continue
        for block in BLOCKS if key in SIZED else (16,):
            found.append(Mistake(words, (None if key == "nan_rows" else key, block)))
    return found


def grads_of(prep, masked_rows: str):
    """The planted backward (backward_reference.textbook in float64) of a record's (key, block)."""

    def run(plant: tuple) -> tuple | None:
        key, block = plant
        policy = "nan" if key is None else masked_rows  # nan_rows: the 'nan' policy's grads
        p, dO, factors = prep.problem, prep.grad_output, prep.factors
        return textbook(p, dO, factors, "float64", policy, mistake=key, block=block)

    return run


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
    catalogue = functools.partial(candidates, prep, masked_rows)
    made = outputs(prep._memo, f"mistakes:{masked_rows}", catalogue, grads_of(prep, masked_rows))
    return named(got, made, prep.truth, allowed, score=match_score, pick=one)


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

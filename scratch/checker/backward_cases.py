"""The backward checker's seeded cases and, per case, inputs, dO, dropout mask and true gradients.

A backward case is the checker's `Case` with a grad_output (one also with dropout). Everything
here depends on the case, seed, dtype and masked-rows policy only (never on the kernel), so
prepare.prepare makes it once per process for every kernel checked with the same settings.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from ..backward import scaled_dot_product_attention_backward
from .arrays import Arrays, Inputs, made_in
from .cases import Case, draw, gauss
from .reference import Problem, problem_for

DROPOUT_P = 0.25  # the dropout cases' probability; the kept entries are scaled by 1 / (1 - p)


def backward_cases(dtype: str) -> list[Case]:
    """Small cases that tell the backward mistakes apart, then a few spanning key blocks."""
    big = 1000.0 if dtype == "float64" else 100.0
    C = functools.partial(Case, grad_output=True)
    cases = [
        C("plain", (5, 8), (7, 8), (7, 4)),
        C("square", (6, 8), (6, 8), (6, 8)),  # L == S: dS^T has dS's shape; E == Ev: dK ~ dV
        C("batch-heads", (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5)),
        C("bool-mask", (5, 8), (7, 8), (7, 4), mask="bool"),
        C("float-mask", (5, 8), (7, 8), (7, 4), mask="float"),
        C("causal-square", (6, 8), (6, 8), (6, 4), is_causal=True),
        C("causal-wide", (4, 8), (7, 8), (7, 4), is_causal=True),
        C("causal-tall", (7, 8), (4, 8), (4, 4), is_causal=True),
        C("custom-scale", (5, 8), (7, 8), (7, 4), scale=0.3),
        C("gqa", (1, 4, 5, 8), (1, 2, 7, 8), (1, 2, 7, 4), gqa=True),
        C("masked-row", (5, 8), (7, 8), (7, 4), mask="empty-row"),
        C("large-logits", (5, 8), (7, 8), (7, 4), q_size=big),
        C("dropout", (5, 8), (7, 8), (7, 4), dropout_p=DROPOUT_P),
    ]
    for other in ("float32", "float64"):
        if other != dtype:
            cases.append(C(other, (5, 8), (7, 8), (7, 4), dtype=other))
    # key lengths spanning blocks of 8 and 16 with a partial last block, E == Ev
    cases += [
        C("keys-17", (8, 16), (17, 16), (17, 16)),
        C("keys-65-late-max", (5, 32), (65, 32), (65, 32), late_max=True),
        C("causal-33", (33, 16), (33, 16), (33, 16), is_causal=True),
        C("gqa-33", (1, 4, 5, 16), (1, 2, 33, 16), (1, 2, 33, 16), gqa=True),
    ]
    return cases


@dataclass
class BackwardPrepared(Inputs):
    """One case's inputs (float lists and masters in the caller's arrays) and true gradients."""

    case: Case
    dtype: str
    raw: tuple  # q, k, v, grad_output as drawn (float64 lists, before rounding)
    extra: dict  # attn_mask as drawn, dropout_mask: the kept entries (bools, ..., L, S) or None
    kwargs: dict  # is_causal, scale, enable_gqa, dropout_p
    truth: tuple  # (dq, dk, dv) float64 arrays
    problem: Problem  # float64 q, k, v as rounded to the dtype, with the case's mask
    grad_output: np.ndarray  # dO as rounded to the dtype
    factors: np.ndarray | None  # dropout factors 0 or 1/(1-p) (..., L, S), None: no dropout
    _masters: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)

    def memo(self, key: str, make) -> object:
        """make() computed once per case (reference errors, mistake variants)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


def prepare_backward(case: Case, arrays: Arrays, dtype: str, seed: int, masked_rows: str):
    """Seeded inputs rounded through the caller's arrays, and the ground truth's gradients
    (prepare.prepare keeps them)."""
    rng = random.Random(f"{seed}:{case.name}:backward")
    q, k, v, mask = draw(rng, case)
    lead, L, S = case.q[:-2], case.q[-2], case.k[-2]
    grad_output = gauss(rng, lead + (L, case.v[-1]))
    raw = (q, k, v, grad_output)
    masters, (q, k, v, grad_output), mask_master, read = made_in(arrays, dtype, raw, mask, case)
    kwargs = case.keywords()
    keep, factors = None, None
    if case.dropout_p:
        kwargs["dropout_p"] = case.dropout_p
        keep, factors = _dropout(f"{seed}:{case.name}:dropout", lead, L, S, case.dropout_p)
    truth = scaled_dot_product_attention_backward(
        q,
        k,
        v,
        grad_output,
        read,
        case.dropout_p,
        case.is_causal,
        case.scale,
        enable_gqa=case.gqa,
        masked_rows=masked_rows,
        rng=random.Random(f"{seed}:{case.name}:dropout") if case.dropout_p else None,
    )
    problem = problem_for(case, q, k, v, read)
    prep = BackwardPrepared(
        case,
        dtype,
        raw,
        {"attn_mask": mask, "dropout_mask": keep},
        kwargs,
        tuple(np.asarray(g, dtype=np.float64) for g in truth),
        problem,
        np.asarray(grad_output, dtype=np.float64),
        factors,
    )
    extra = (mask_master, None if keep is None else arrays.make(keep, dtype))
    prep._masters[(arrays.array, str(arrays.device))] = masters + extra
    return prep


def _dropout(seed: str, lead: tuple, L: int, S: int, p: float) -> tuple[list, np.ndarray]:
    """The forward's dropout draws, head by head in row-major order as the ground truth draws
    them: (kept entries as nested bools, factors 0 or 1/(1-p) as an array)."""
    rng = random.Random(seed)
    heads = [
        [[rng.random() >= p for _ in range(S)] for _ in range(L)]
        for _ in product(*map(range, lead))
    ]
    kept = np.asarray(heads, dtype=bool).reshape(lead + (L, S))
    return kept.tolist(), np.where(kept, 1.0 / (1.0 - p), 0.0)

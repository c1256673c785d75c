"""The backward checker's seeded cases and, per case, inputs, dO, dropout mask and true gradients.

A case is the forward checker's `Case` plus a dropout probability. Everything here depends on
the case, seed, dtype and masked-rows policy only (never on the kernel), so it is made once per
process and reused by every kernel checked with the same settings.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from ..backward import scaled_dot_product_attention_backward
from .arrays import Arrays
from .cases import FEATURES, Case, add_late_max, gauss, mask_values
from .prepare import made_in
from .reference import Problem, problem_for

BACKWARD_FEATURES = (*FEATURES, "dropout")  # what check_backward's `require=` may name
DROPOUT_P = 0.25  # the dropout cases' probability; the kept entries are scaled by 1 / (1 - p)
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 64


@dataclass(frozen=True)
class BackwardCase(Case):
    """A forward checker case plus dropout: fn gets dropout_p and the forward's kept entries."""

    dropout_p: float = 0.0

    def features(self, dtype: str) -> tuple[str, ...]:
        """The forward case's optional features, plus 'dropout'."""
        return super().features(dtype) + (("dropout",) if self.dropout_p else ())

    def options(self) -> str:
        """The case's options in words, for the report."""
        words = super().options()
        if not self.dropout_p:
            return words
        extra = f"dropout_p={self.dropout_p:g} with the forward's mask"
        return extra if words == "-" else f"{words}, {extra}"


def backward_cases(dtype: str) -> list[BackwardCase]:
    """Small cases that tell the backward mistakes apart, then a few spanning key blocks."""
    big = 1000.0 if dtype == "float64" else 100.0
    C = BackwardCase
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
class BackwardPrepared:
    """One case's inputs (float lists and masters in the caller's arrays) and true gradients."""

    case: BackwardCase
    dtype: str
    raw: tuple  # q, k, v, grad_output, mask as drawn (float64 lists, before rounding)
    kwargs: dict  # is_causal, scale, enable_gqa, dropout_p
    keep: list | None  # dropout: the kept entries (bools, ..., L, S) fn gets as dropout_mask
    truth: tuple  # (dq, dk, dv) float64 arrays
    problem: Problem  # float64 q, k, v as rounded to the dtype, with the case's mask
    grad_output: np.ndarray  # dO as rounded to the dtype
    factors: np.ndarray | None  # dropout factors 0 or 1/(1-p) (..., L, S), None: no dropout
    _masters: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)

    def masters(self, arrays: Arrays) -> tuple:
        """(q, k, v, grad_output, mask or None, keep or None) in the caller's array type."""
        key = (arrays.array, str(arrays.device))
        if key not in self._masters:
            q, k, v, g, mask = self.raw
            made = tuple(arrays.make(x, self.dtype) for x in (q, k, v, g))
            extra = tuple(
                None if x is None else arrays.make(x, self.dtype) for x in (mask, self.keep)
            )
            self._masters = {key: made + extra}  # one array type at a time
        return self._masters[key]

    def call_args(self, arrays: Arrays) -> tuple[tuple, dict]:
        """Fresh copies of (q, k, v, grad_output) and the keywords the case needs."""
        *made, mask, keep = self.masters(arrays)
        kwargs = dict(self.kwargs)
        if mask is not None:
            kwargs["attn_mask"] = arrays.copy(mask)
        if keep is not None:
            kwargs["dropout_mask"] = arrays.copy(keep)
        return tuple(arrays.copy(x) for x in made), kwargs

    def memo(self, key: str, make) -> object:
        """make() computed once per case (reference errors, mistake variants)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


def prepare_backward(
    case: BackwardCase, arrays: Arrays, dtype: str, seed: int, masked_rows: str
) -> BackwardPrepared:
    """The case's BackwardPrepared, from the cache when this process made it before."""
    key = (case, dtype, seed, masked_rows)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    made = _prepare(case, arrays, dtype, seed, masked_rows)
    _CACHE[key] = made
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return made


def _prepare(case: BackwardCase, arrays: Arrays, dtype: str, seed: int, masked_rows: str):
    """Seeded inputs rounded through the caller's arrays, and the ground truth's gradients."""
    rng = random.Random(f"{seed}:{case.name}:backward")
    q = gauss(rng, case.q, case.q_size)
    k, v = gauss(rng, case.k), gauss(rng, case.v)
    if case.late_max:
        add_late_max(q, k)
    lead, L, S = case.q[:-2], case.q[-2], case.k[-2]
    mask = mask_values(rng, case, L, S)
    grad_output = gauss(rng, lead + (L, case.v[-1]))
    raw = (q, k, v, grad_output, mask)
    tensors = (q, k, v, grad_output)
    masters, (q, k, v, grad_output), mask_master, mask = made_in(arrays, dtype, tensors, mask, case)
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
        mask,
        case.dropout_p,
        case.is_causal,
        case.scale,
        enable_gqa=case.gqa,
        masked_rows=masked_rows,
        rng=random.Random(f"{seed}:{case.name}:dropout") if case.dropout_p else None,
    )
    problem = problem_for(case, q, k, v, mask)
    prep = BackwardPrepared(
        case,
        dtype,
        raw,
        kwargs,
        keep,
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

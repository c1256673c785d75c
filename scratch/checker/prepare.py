"""One case made ready: seeded inputs in the caller's arrays, the ground truth and its bound
(a backward case's: dO, the forward's dropout mask and the true gradients).

Everything here depends on the case, seed, dtype, masked-rows policy and array type only (never
on the kernel), so it is computed once per process and reused by every kernel checked with the
same settings.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING

from scratch.bounds.tolerance import tolerance
from scratch.bounds.weights_tolerance import weights_tolerance
from scratch.checker.arrays import Arrays, Inputs, made_in, rows_of
from scratch.checker.cases import Case, draw, gauss
from scratch.core.attention import scaled_dot_product_attention
from scratch.core.options import Options
from scratch.core.rows import attention_rows, sample_rows

if TYPE_CHECKING:
    import numpy as np

    from scratch.checker.reference import Problem

_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 64


def kept(cache: OrderedDict, key: tuple, make: Callable, size: int, keep: bool = True) -> object:
    """make() for `key`, from `cache` when made before; the `size` latest used are kept."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    made = make()
    if keep:
        cache[key] = made
        while len(cache) > size:
            cache.popitem(last=False)
    return made


@dataclass
class Prepared(Inputs):
    """A forward case's inputs, truth, weights and bound."""

    mask: list | None  # the mask as float64 lists (bools for a bool mask)
    rows: list[int] | None  # the sampled query rows (large cases), else None: every row
    q_rows: list  # float64 lists of the checked query rows
    truth: list  # (..., R, Ev) ground truth output
    weights: list  # (..., R, S) ground truth weights
    bound: list  # (..., R, Ev) per-element bound
    bound_inputs: tuple  # (args, kwargs) `tolerance` made `bound` from (weights_bound reads them)
    np_ready: bool = False

    def numpy(self, k: list, v: list) -> None:
        """float64 arrays of truth, bound, live rows and the reference Problem (needs numpy)."""
        import numpy as np

        from scratch.checker.reference import problem_for

        self.truth_np = np.asarray(self.truth, dtype=np.float64)
        self.bound_np = np.asarray(self.bound, dtype=np.float64)
        w = np.asarray(self.weights, dtype=np.float64)
        self.live_np = np.any(w > 0, axis=-1)  # rows with at least one weight
        self.problem = problem_for(self.case, self.q_rows, k, v, self.mask, self.rows)
        if self.dtype in ("float16", "bfloat16"):
            self.bound_np = self.bound_np + score_storage_term(self.problem, w, self.dtype)
            self.bound = self.bound_np.tolist()
        self.np_ready = True

    def weights_bound(self) -> list:
        """(..., R, S) bound on a returned weight's error (`weights_tolerance`, the kernel's
        scores perhaps held in a 16-bit dtype), made once."""

        def make() -> list:
            (q, k, _, weights), kw = self.bound_inputs
            options = Options(kw["attn_mask"], scale=kw["scale"], enable_gqa=kw["enable_gqa"])
            return weights_tolerance(q, k, weights, options, kw["dtype"], stored_scores=True)

        return self.memo("weights_bound", make)

    def reference_error(self) -> float:
        """The largest error of the correct reference kernels in this dtype."""
        from scratch.checker.reference import kernel_errors

        return self.memo(
            "ref", lambda: max(kernel_errors(self.problem, self.dtype, self.truth_np, self.live_np))
        )


@dataclass
class BackwardPrepared(Inputs):
    """A backward case's inputs (with dO and the forward's dropout mask) and true gradients."""

    truth: tuple  # (dq, dk, dv) float64 arrays
    problem: Problem  # float64 q, k, v as rounded to the dtype, with the case's mask
    grad_output: np.ndarray  # dO as rounded to the dtype
    factors: np.ndarray | None  # dropout factors 0 or 1/(1-p) (..., L, S), None: no dropout


def prepare(case: Case, arrays: Arrays, dtype: str, seed: int, masked_rows: str) -> Inputs:
    """The case's Prepared (a backward case's BackwardPrepared), from the cache when this
    process made it before (the 4096-token cases are too big to keep).

    The ground truth depends on the rounded values only, and numpy, torch and lists round to
    the same IEEE values, so one Prepared serves every array type."""
    make = _prepare_backward if case.grad_output else _prepare
    made = lambda: make(case, arrays, dtype, seed, masked_rows)  # noqa: E731
    return kept(_CACHE, (case, dtype, seed, masked_rows), made, _CACHE_SIZE, not case.rows)


def _prepare(case: Case, arrays: Arrays, dtype: str, seed: int, masked_rows: str) -> Prepared:
    """Seeded inputs made in the caller's array type, read back, and the ground truth on them."""
    q, k, v, mask = draw(random.Random(f"{seed}:{case.name}"), case)
    L = case.q[-2]
    raw, extra = (q, k, v), {"attn_mask": mask}
    masters, (q, k, v), mask_master, mask = made_in(arrays, dtype, (q, k, v), mask, case)
    kwargs = case.keywords()
    options = dict(
        attn_mask=mask,
        is_causal=case.is_causal,
        scale=case.scale,
        enable_gqa=case.gqa,
        masked_rows=masked_rows,
    )
    rows = None
    if case.rows:
        rows = sample_rows(L, case.rows, seed)
        q_rows = rows_of(q, rows, len(case.q) - 2)
        truth, weights, arrays64 = _sampled_truth(case, dtype, q, k, v, mask, rows, options)
    else:
        truth, weights = scaled_dot_product_attention(q, k, v, **options)
        q_rows, arrays64 = q, None
    float_mask = None
    if case.mask == "float":
        float_mask = mask if rows is None else [mask[i] for i in rows]
    bound_inputs = (  # the same float64 values as arrays, when made: no lists to validate
        arrays64 or (q_rows, k, v, weights),
        {"scale": case.scale, "dtype": dtype, "attn_mask": float_mask, "enable_gqa": case.gqa},
    )
    bound = tolerance(*bound_inputs[0], **bound_inputs[1])
    prep = Prepared(
        case, dtype, raw, extra, kwargs, mask, rows, q_rows, truth, weights, bound, bound_inputs,
        _masters={(arrays.array, str(arrays.device)): masters + (mask_master,)},
    )  # fmt: skip
    try:
        prep.numpy(k, v)
    except ImportError:
        pass  # no numpy: the bound alone decides, and only shape mistakes are named
    return prep


def _prepare_backward(
    case: Case, arrays: Arrays, dtype: str, seed: int, masked_rows: str
) -> BackwardPrepared:
    """Seeded inputs and dO rounded through the caller's arrays, and the true gradients."""
    import numpy as np

    from scratch.backward.sdpa import scaled_dot_product_attention_backward
    from scratch.checker.reference import problem_for

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
    extra = (mask_master, None if keep is None else arrays.make(keep, dtype))
    return BackwardPrepared(
        case,
        dtype,
        raw,
        {"attn_mask": mask, "dropout_mask": keep},
        kwargs,
        tuple(np.asarray(g, dtype=np.float64) for g in truth),
        problem_for(case, q, k, v, read),
        np.asarray(grad_output, dtype=np.float64),
        factors,
        _masters={(arrays.array, str(arrays.device)): masters + extra},
    )


def _dropout(seed: str, lead: tuple, L: int, S: int, p: float) -> tuple:
    """The forward's dropout draws, head by head in row-major order as the ground truth draws
    them: (kept entries as nested bools, factors 0 or 1/(1-p) as an array)."""
    import numpy as np

    rng = random.Random(seed)
    heads = [
        [[rng.random() >= p for _ in range(S)] for _ in range(L)]
        for _ in product(*map(range, lead))
    ]
    kept = np.asarray(heads, dtype=bool).reshape(lead + (L, S))
    return kept.tolist(), np.where(kept, 1.0 / (1.0 - p), 0.0)


def _sampled_truth(case, dtype: str, q, k, v, mask, rows: list[int], options: dict) -> tuple:
    """(output, weights, float64 arrays of q rows, k, v, weights or None) of the sampled rows:
    the ground truth for float64 checks (and without numpy), else the float64 NumPy reference
    (float64_rows.py says why)."""
    if dtype != "float64":
        try:
            from scratch.checker.float64_rows import float64_rows
            from scratch.checker.reference import problem_for
        except ImportError:
            pass
        else:
            q_rows = rows_of(q, rows, len(case.q) - 2)
            problem = problem_for(case, q_rows, k, v, mask, rows)
            output, weights = float64_rows(problem, options["masked_rows"])
            arrays64 = (problem.q, problem.k, problem.v, weights)
            return output.tolist(), weights.tolist(), arrays64
    return (*attention_rows(q, k, v, rows, **options), None)


__all__ = ["BackwardPrepared", "Prepared", "kept", "prepare"]


def score_storage_term(p, weights, dtype: str):
    """The bound's extra term for scores stored in 16 bits between q @ k^T and softmax.

    PyTorch's math path (and the textbook kernel) keep the scores in float16/bfloat16: storing
    a score moves it by at most u |s_ij| <= u S_i, storing s_ij - max by at most 2u S_i more, so
    each weight moves by a factor e^(+-2 x 3u S_i) and the output by at most
    expm1(6u S_i) sum_j p_ij |v_jc| (times 1.25 for the product with the other roundings).
    S_i as in `tolerance`: max over live keys of |scale| sum_l |q_il k_jl| + |mask_ij|. Sums
    must still be float32: 16-bit accumulation grows with E and fails.
    """
    import numpy as np

    from scratch.bounds.tolerance import UNIT_ROUNDOFF

    k, v = p.heads()
    size = abs(p.scale) * (np.abs(p.q) @ np.swapaxes(np.abs(k), -1, -2))  # (..., R, S)
    if p.add is not None:
        size = size + np.abs(p.add)
    live = weights > 0
    S_i = np.max(np.where(live, size, 0.0), axis=-1, keepdims=True)  # (..., R, 1)
    spread = np.expm1(np.minimum(6 * UNIT_ROUNDOFF[dtype] * S_i, 700.0))  # 2 x (u + 2u) S_i
    return 1.25 * spread * (np.where(live, weights, 0.0) @ np.abs(v))  # (..., R, Ev)

"""One case made ready: seeded inputs in the caller's arrays, the ground truth and its bound.

Everything here depends on the case, seed, dtype and array type only (never on the kernel), so
it is computed once per process and reused by every kernel checked with the same settings.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field

from ..attention import scaled_dot_product_attention
from ..options import Options
from ..rows import attention_rows, sample_rows
from ..tolerance import tolerance
from ..weights_tolerance import weights_tolerance
from .arrays import Arrays, Inputs, made_in
from .cases import Case, draw

_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 64


@dataclass
class Prepared(Inputs):
    """A case's inputs (masters in the caller's arrays, float lists), truth, weights and bound."""

    case: Case
    dtype: str
    raw: tuple  # q, k, v as drawn (float64 lists, before rounding to the dtype)
    extra: dict  # attn_mask as drawn (None: no mask)
    kwargs: dict  # is_causal, scale, enable_gqa
    mask: list | None  # the mask as float64 lists (bools for a bool mask)
    rows: list[int] | None  # the sampled query rows (large cases), else None: every row
    q_rows: list  # float64 lists of the checked query rows
    truth: list  # (..., R, Ev) ground truth output
    weights: list  # (..., R, S) ground truth weights
    bound: list  # (..., R, Ev) per-element bound
    bound_inputs: tuple  # (args, kwargs) `tolerance` made `bound` from (weights_bound reads them)
    np_ready: bool = False
    _memo: dict = field(default_factory=dict)
    _masters: dict = field(default_factory=dict)

    def numpy(self, k: list, v: list) -> None:
        """float64 arrays of truth, bound, live rows and the reference Problem (needs numpy)."""
        import numpy as np

        from .reference import problem_for

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
        if "weights_bound" not in self._memo:
            (q, k, _, weights), kw = self.bound_inputs
            options = Options(kw["attn_mask"], scale=kw["scale"], enable_gqa=kw["enable_gqa"])
            self._memo["weights_bound"] = weights_tolerance(
                q, k, weights, options, kw["dtype"], stored_scores=True
            )
        return self._memo["weights_bound"]

    def reference_error(self) -> float:
        """The largest error of the correct reference kernels in this dtype."""
        if "ref" not in self._memo:
            from .reference import kernel_errors

            errs = kernel_errors(self.problem, self.dtype, self.truth_np, self.live_np)
            self._memo["ref"] = max(errs)
        return self._memo["ref"]


def prepare(case: Case, arrays: Arrays, dtype: str, seed: int, masked_rows: str) -> Prepared:
    """The case's Prepared (a backward case's BackwardPrepared, backward_cases.py), from the
    cache when this process made it before.

    The ground truth depends on the rounded values only, and numpy, torch and lists round to
    the same IEEE values, so one Prepared serves every array type."""
    key = (case, dtype, seed, masked_rows)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    if case.grad_output:
        from .backward_cases import prepare_backward

        made = prepare_backward(case, arrays, dtype, seed, masked_rows)
    else:
        made = _prepare(case, arrays, dtype, seed, masked_rows)
    if not case.rows:  # the 4096-token cases are too big to keep
        _CACHE[key] = made
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return made


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
        q_rows = _rows_of(q, rows, len(case.q) - 2)
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
        case, dtype, raw, extra, kwargs, mask, rows, q_rows, truth, weights, bound, bound_inputs
    )
    prep._masters[(arrays.array, str(arrays.device))] = masters + (mask_master,)
    try:
        prep.numpy(k, v)
    except ImportError:
        pass  # no numpy: the bound alone decides, and only shape mistakes are named
    return prep


def _sampled_truth(case, dtype: str, q, k, v, mask, rows: list[int], options: dict) -> tuple:
    """(output, weights, float64 arrays of q rows, k, v, weights or None) of the sampled rows:
    the ground truth for float64 checks (and without numpy), else the float64 NumPy reference
    (float64_rows.py says why)."""
    if dtype != "float64":
        try:
            from .float64_rows import float64_rows
            from .reference import problem_for
        except ImportError:
            pass
        else:
            q_rows = _rows_of(q, rows, len(case.q) - 2)
            problem = problem_for(case, q_rows, k, v, mask, rows)
            output, weights = float64_rows(problem, options["masked_rows"])
            arrays64 = (problem.q, problem.k, problem.v, weights)
            return output.tolist(), weights.tolist(), arrays64
    return (*attention_rows(q, k, v, rows, **options), None)


def _rows_of(x: list, rows: list[int], depth: int) -> list:
    """x[..., rows, :] of nested lists with `depth` leading dims."""
    if depth == 0:
        return [x[i] for i in rows]
    return [_rows_of(a, rows, depth - 1) for a in x]


__all__ = ["Prepared", "prepare"]


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

    from ..tolerance import UNIT_ROUNDOFF

    k, v = p.heads()
    size = abs(p.scale) * (np.abs(p.q) @ np.swapaxes(np.abs(k), -1, -2))  # (..., R, S)
    if p.add is not None:
        size = size + np.abs(p.add)
    live = weights > 0
    S_i = np.max(np.where(live, size, 0.0), axis=-1, keepdims=True)  # (..., R, 1)
    spread = np.expm1(np.minimum(6 * UNIT_ROUNDOFF[dtype] * S_i, 700.0))  # 2 x (u + 2u) S_i
    return 1.25 * spread * (np.where(live, weights, 0.0) @ np.abs(v))  # (..., R, Ev)

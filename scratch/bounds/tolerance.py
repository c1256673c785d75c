"""How far a correct attention kernel may land from the ground truth: a rounding-error bound.

`tolerance` gives the per-element bound on |output - ground truth| for a kernel that computes in
a given dtype; `reference_error_rule` is FlashAttention's practical rule (at most twice the error
of a plain softmax(q @ k^T) @ v in the same dtype). numpy is used when it is installed; every
function also runs on nested lists in plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from scratch.core.masks import Mask
from scratch.ops.nested import at, flat, stack
from scratch.ops.plan import AttentionPlan, kv_index, plan_attention
from scratch.ops.validate import (
    as_mask,
    as_tensor,
    check_flag,
    check_mask_shape,
    check_scale,
    refuse_valueless_arrays,
)

# unit roundoff u = 2^-(mantissa bits + 1) and the smallest positive subnormal of each dtype
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
SMALLEST_SUBNORMAL = {
    "float64": 2.0**-1074,
    "float32": 2.0**-149,
    "float16": 2.0**-24,
    "bfloat16": 2.0**-133,
}
# sums are taken in float32 for the 16-bit dtypes (what PyTorch's CPU and CUDA kernels do)
ACCUMULATE = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float32",
    "bfloat16": "float32",
}
DTYPES = tuple(UNIT_ROUNDOFF)
EXP_ULPS = 4  # exp may be off by this many units in the last place (vectorised libms: 1-4)


def check_dtype(dtype: object, name: str = "dtype") -> str:
    """A dtype name ("float32", ...) from a name, numpy dtype or torch dtype; ValueError if not."""
    text = str(dtype).replace("torch.", "")
    text = {"half": "float16", "float": "float32", "double": "float64"}.get(text, text)
    if text not in UNIT_ROUNDOFF:
        raise ValueError(f"{name}: expected one of {', '.join(DTYPES)}, found {dtype!r}")
    return text


def gamma(n: float, u: float) -> float:
    """Higham's gamma_n = n*u / (1 - n*u): bounds n roundings; inf once n*u >= 1."""
    return n * u / (1.0 - n * u) if n * u < 1.0 else math.inf


@dataclass(frozen=True)
class Rounding:
    """The constants of the bound for one dtype and problem size (E features, S keys)."""

    dtype: str
    E: int
    S: int

    @property
    def u_acc(self) -> float:
        """Unit roundoff of the precision sums are taken in."""
        return UNIT_ROUNDOFF[ACCUMULATE[self.dtype]]

    @property
    def u_store(self) -> float:
        """Extra rounding to storage (0 when storage and accumulation agree)."""
        return 0.0 if ACCUMULATE[self.dtype] == self.dtype else UNIT_ROUNDOFF[self.dtype]

    @property
    def score_gamma(self) -> float:
        """Relative error of a score: E products and sums, scale, mask add, max subtraction."""
        return gamma(self.E + 4, self.u_acc)

    def factor(self, delta: float) -> float:
        """Relative error factor R of output elements, given score perturbation delta."""
        u, us, m = self.u_acc, self.u_store, 2 * EXP_ULPS
        softmax = math.expm1(2.0 * delta) if delta < 350 else math.inf  # e^(+-2 delta) on p
        kernel = (1 + gamma(self.S + 2 * m, u)) * (1 + gamma(self.S + 1, u)) * (1 + us) ** 2
        return (1 + softmax) * kernel - 1.0

    @property
    def weight_floor(self) -> float:
        """Absolute error of one weight from underflow (subnormal exp, subnormal storage)."""
        extra = SMALLEST_SUBNORMAL[self.dtype] if self.u_store else 0.0
        return 2 * EXP_ULPS * SMALLEST_SUBNORMAL[ACCUMULATE[self.dtype]] + extra

    @property
    def output_floor(self) -> float:
        """Absolute error of one output element from underflowing products and storage."""
        extra = SMALLEST_SUBNORMAL[self.dtype] if self.u_store else 0.0
        return (self.S + 1) * SMALLEST_SUBNORMAL[ACCUMULATE[self.dtype]] + extra


def tolerance(
    query: object,
    key: object,
    value: object,
    weights: object,
    *,
    scale: float | None = None,
    dtype: object = "float32",
    attn_mask: object = None,
    enable_gqa: bool = False,
) -> list:
    """Per-element bound (..., L, Ev) on |output - ground truth| for a kernel working in `dtype`.

    The inputs are the kernel's (already rounded) query (..., L, E), key (..., S, E), value
    (..., S, Ev); `weights` (..., L, S) are the ground truth's p computed from them. With
    u the unit roundoff of the precision sums are taken in (float32 for float16/bfloat16) and
    g(n) = n*u / (1 - n*u), each output element obeys

        |err_ic| <= R_i * sum_j p_ij |v_jc| + floor_w * sum_j |v_jc| + floor_o,
        R_i = (1 + expm1(2 * g(E+4) * S_i)) (1 + g(S+2m)) (1 + g(S+1)) (1 + u_s)^2 - 1,
        S_i = max over keys j with p_ij > 0 of (|scale| sum_l |q_il k_jl| + |attn_mask_ij|).

    Derivation. (1) A score is a dot product of E terms, times the scale, plus a float mask: each
    computed score is within g(E+2) S_i of the exact one (any summation order). Softmax subtracts
    the row max; that subtraction rounds too, by at most u |s_ij - max| <= 2u S_i, which together
    is within g(E+4) S_i =: delta_i. (2) Exponents all moved by at most delta_i move every
    softmax weight by a factor in [e^-2delta, e^2delta], hence relative error expm1(2 delta_i).
    (3) Evaluating softmax: exp is off by m = 2 * EXP_ULPS roundings, the denominator adds S-1
    roundings plus the exp errors of its terms, the division one more: relative g(S+2m).
    (4) output = sum_j p_ij v_jc adds S-1 roundings, one product rounding and one final division
    (kernels that divide by the sum at the end): g(S+1) relative to sum_j p_ij |v_jc|.
    (5) For float16/bfloat16 the weights (or the exp values multiplying v) are stored in the
    16-bit dtype before the second matmul, and the output is rounded to it: (1 + u_s) each, with
    u_s = 2^-11 (float16) or 2^-8 (bfloat16). In float32/float64 u_s = 0. (6) Underflow is not
    relative: each weight may lose a subnormal's worth (floor_w), each product and the stored
    output one more (floor_o). The ground truth (float64, fsum) obeys the float64 bound, which
    is added, so a float64 kernel is allowed twice the float64 bound and nothing more.
    To first order R_i = 2 (E+4) u S_i + (2S+17) u + 2 u_s: the textbook
    2 g(E+1) S_i + 2 g(S+2) + 4u, with room for the max subtraction and a few-ulp exp.
    Not covered: kernels that round scores to float16/bfloat16 before softmax, and one-pass
    (online-softmax) kernels add a few roundings per key block when they rescale running sums;
    the checker's second rule (`reference_error_rule`) is the practical test for those.
    Rows whose weights are all zero (masked_rows="zero") get bound 0: the output must be exactly
    zero. Rows with NaN weights (masked_rows="nan") get bound 0 too; compare NaN-ness there.

    Args:
        query: the kernel's q (..., L, E), as it rounded it.
        key: k (..., S, E).
        value: v (..., S, Ev).
        weights: the ground truth's weights p (..., L, S) from these inputs.
        scale: the scores' factor; None: 1 / sqrt(E).
        dtype: the kernel's dtype: "float64", "float32", "float16" or "bfloat16".
        attn_mask: the call's mask, None or (..., L, S) (a float mask counts in S_i).
        enable_gqa: grouped-query attention (key/value with fewer heads).

    Returns:
        The bound (..., L, Ev) on each |output - ground truth|.

    Examples:
        >>> import scratch
        >>> q = [[1.0, 0.0], [0.0, 1.0]]
        >>> _, weights = scratch.scaled_dot_product_attention(q, q, q)
        >>> bound = scratch.tolerance(q, q, q, weights, dtype="float32")
        >>> 0 < bound[0][0] < 1e-5
        True
    """
    dtype = check_dtype(dtype)
    group = _check_inputs(query, key, value, weights, scale, attn_mask, enable_gqa).group
    try:
        import numpy as np
    except ImportError:
        return _tolerance_lists(query, key, value, weights, scale, dtype, attn_mask, group)
    return _tolerance_numpy(np, query, key, value, weights, scale, dtype, attn_mask, group)


def _shape_of(x: object, name: str) -> tuple[int, ...]:
    """Shape of an array (its .shape) or of validated nested lists (bools allowed for masks)."""
    shape = getattr(x, "shape", None)
    if shape is not None and not isinstance(x, (list, tuple)):
        refuse_valueless_arrays(x, name)  # meta tensors, masked arrays
        kind = str(getattr(x, "dtype", ""))
        if "complex" in kind or kind in ("object", "str", "bytes") or kind.startswith("<U"):
            raise TypeError(f"{name}: expected real numbers, found an array of dtype {kind}")
        shape = tuple(int(n) for n in shape)
        if not shape or 0 in shape:
            raise ValueError(
                f"{name}: expected a non-empty array of at least one axis, found shape {shape}"
            )
        return shape
    if name == "attn_mask":
        return as_mask(x, name)[1]
    return as_tensor(x, name, min_dims=1)[1]


def _check_inputs(query, key, value, weights, scale, attn_mask, enable_gqa) -> AttentionPlan:
    """The ground truth's shape rules, with errors naming the argument; scale finite or None."""
    shapes = (_shape_of(x, n) for x, n in ((query, "query"), (key, "key"), (value, "value")))
    plan = plan_attention(*shapes, check_flag(enable_gqa, "enable_gqa"))
    found = _shape_of(weights, "weights")
    if found != plan.scores_shape:
        raise ValueError(f"weights: expected shape {plan.scores_shape} (..., L, S), found {found}")
    check_scale(scale, plan.E)
    if attn_mask is not None:
        check_mask_shape(_shape_of(attn_mask, "attn_mask"), plan.scores_shape)
    return plan


def as_float64(np: object, x: object) -> object:
    """Any array-like (nested lists, numpy array, torch tensor on any device) as float64 numpy."""
    if hasattr(x, "detach"):  # torch: bfloat16 and CUDA tensors need a detour through .double()
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def _scale(scale: float | None, E: int) -> float:
    """The default scale 1/sqrt(E) or the given one."""
    return 1.0 / math.sqrt(E) if scale is None else float(scale)


def _tolerance_numpy(np, query, key, value, weights, scale, dtype, attn_mask, group: int):
    """tolerance() with numpy, vectorised over every leading index."""
    q, k, v, p = (as_float64(np, a) for a in (query, key, value, weights))
    outside = (p < 0) | (p > 1)  # NaN compares False: a masked_rows="nan" row is allowed
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        _not_a_weight(p[index], index)
    if group > 1:  # query head h reads value head h // group
        v = np.repeat(v, group, axis=-3)
    # steps 1-2: S_i per row, the relative factor R_i from it, and the absolute floors
    factor, parts = row_factors(np, q, k, p, scale, dtype, attn_mask, group)  # (..., L, 1)
    p_clean = np.where(np.isnan(p), 0.0, p)
    # step 3: sum_j p_ij |v_jc|                        (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    pv = p_clean @ np.abs(v)
    v_sum = np.sum(np.abs(v), axis=-2, keepdims=True)  # (..., 1, Ev)
    bound = factor * pv
    bound = bound + sum(r.weight_floor for r in parts) * v_sum + sum(r.output_floor for r in parts)
    # step 4: exact-zero rows and NaN rows allow no difference
    exact = np.all(p_clean == 0.0, axis=-1, keepdims=True) | np.any(np.isnan(p), -1, keepdims=True)
    return np.where(exact, 0.0, bound).tolist()


def row_factors(np, q, k, p, scale, dtype: str, attn_mask, group: int, stored: float = 0.0):
    """(R_i(dtype) + R_i(float64) per row (..., L, 1), parts), for both bounds: q, k, p float64
    arrays (k one per kv head), parts the kernel's and the ground truth's Rounding; `stored` adds
    that many u_s S_i to each exponent (16-bit scores held before softmax)."""
    E, S = q.shape[-1], k.shape[-2]
    if group > 1:  # query head h reads key head h // group
        k = np.repeat(k, group, axis=-3)
    # step 1: S_i, the largest |score| terms of a live key per row
    S_i = _row_sizes(np, q, k, p, _scale(scale, E), attn_mask)  # (..., L, 1)
    # step 2: the relative factor per row
    parts = (Rounding(dtype, E, S), Rounding("float64", E, S))  # kernel + ground truth error
    grown = [(r.score_gamma + stored * r.u_store) * S_i for r in parts]  # each exponent's delta_i
    return sum(np.vectorize(r.factor, otypes=[float])(d) for r, d in zip(parts, grown)), parts


def _kv_of(index: tuple[int, ...], k_shape: tuple[int, ...], group: int) -> tuple[int, ...]:
    """The key/value leading index a query index reads: size-1 axes broadcast, and query head
    h reads key/value head h // group."""
    return kv_index(tuple(0 if k_shape[n] == 1 else i for n, i in enumerate(index)), group)


def _row_sizes(np, q, k, p, scale: float, attn_mask: object) -> object:
    """S_i (..., L, 1): max over the keys j with p_ij > 0 of |scale| sum_l |q_il k_jl| (+ |a float
    mask_ij|), k already one per query head."""
    # S_ij = |scale| |q| @ |k|^T (+ |mask|)            (..., L, E) @ (..., E, S) -> (..., L, S)
    size = abs(scale) * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))
    if attn_mask is not None and not _is_bool_mask(attn_mask):
        mask = as_float64(np, attn_mask)
        size = size + np.where(np.isfinite(mask), np.abs(mask), 0.0)
    return np.max(np.where(p > 0, size, 0.0), axis=-1, keepdims=True)  # NaN > 0 is False


def _row_size(q_i: list, kb: list, p_i: list, scale: float, add_i: list | None) -> float:
    """S_i of one row in plain Python (`_row_sizes`), add_i the row of a float mask or None."""
    found = 0.0
    for j, k_j in enumerate(kb):
        if p_i[j] > 0:
            size = abs(scale) * math.fsum(abs(a * b) for a, b in zip(q_i, k_j))
            if add_i is not None and math.isfinite(add_i[j]):
                size += abs(add_i[j])
            found = max(found, size)
    return found


def _not_a_weight(value: float, index: tuple[int, ...]) -> None:
    """Refuse a weight outside [0, 1]: the bound is derived for softmax probabilities."""
    where = "".join(f"[{i}]" for i in index)
    raise ValueError(
        f"weights{where}: expected the ground truth's softmax weights in [0, 1] "
        f"(NaN for a masked_rows='nan' row), found {float(value)!r}"
    )


def _is_bool_mask(mask: object) -> bool:
    """Whether a mask (array or nested lists) holds bools (its dtype or first leaf decides)."""
    if hasattr(mask, "dtype"):
        return "bool" in str(mask.dtype)
    leaf = mask
    while isinstance(leaf, (list, tuple)):
        leaf = leaf[0]
    return isinstance(leaf, bool) or "bool" in type(leaf).__name__


def list_blocks(query, key, value, weights, scale, dtype, attn_mask, group: int):
    """The plain-Python walk of both bounds (this one and weights_tolerance): (lead, scale,
    parts, blocks); parts the kernel's and the ground truth's Rounding, blocks yielding each
    (L, S) block's (index, q, k, v, p, the float mask or None); v None when value is None."""
    q, q_shape = as_tensor(query, "query", min_dims=2)
    k, k_shape = as_tensor(key, "key", min_dims=2)
    v = None if value is None else as_tensor(value, "value", min_dims=2)[0]
    p, _ = as_tensor(weights, "weights", min_dims=2)
    lead, E, S = q_shape[:-2], q_shape[-1], k_shape[-2]
    mask = Mask.from_user(attn_mask, lead + (q_shape[-2], S)) if attn_mask is not None else None
    parts = (Rounding(dtype, E, S), Rounding("float64", E, S))  # kernel + ground truth error

    def blocks():
        for index in product(*map(range, lead)):
            kv = _kv_of(index, k_shape, group)
            vb = None if v is None else at(v, kv)
            add = mask.slice(index) if mask is not None and not mask.is_bool else None
            yield index, at(q, index), at(k, kv), vb, at(p, index), add

    return lead, _scale(scale, E), parts, blocks()


def _tolerance_lists(query, key, value, weights, scale, dtype, attn_mask, group: int):
    """tolerance() in plain Python, one (L, S) block at a time."""
    lead, scale, parts, walk = list_blocks(
        query, key, value, weights, scale, dtype, attn_mask, group
    )
    w_floor = sum(r.weight_floor for r in parts)
    o_floor = sum(r.output_floor for r in parts)
    blocks = []
    for index, qb, kb, vb, pb, add in walk:
        v_sum = [math.fsum(abs(row[c]) for row in vb) for c in range(len(vb[0]))]
        rows = []
        for i, (q_i, p_i) in enumerate(zip(qb, pb)):
            for j, x in enumerate(p_i):
                if not (0.0 <= x <= 1.0 or math.isnan(x)):
                    _not_a_weight(x, (*index, i, j))
            if any(math.isnan(x) for x in p_i) or not any(p_i):
                rows.append([0.0] * len(v_sum))
                continue
            # step 1: S_i = max over live keys of |scale| sum_l |q_il k_jl| (+ |mask_ij|)
            S_i = _row_size(q_i, kb, p_i, scale, None if add is None else add[i])
            # step 2: R_i * sum_j p_ij |v_jc| + floors
            factor = sum(r.factor(r.score_gamma * S_i) for r in parts)
            rows.append(
                [
                    factor * math.fsum(pj * abs(vj[c]) for pj, vj in zip(p_i, vb))
                    + w_floor * v_sum[c]
                    + o_floor
                    for c in range(len(v_sum))
                ]
            )
        blocks.append(rows)
    return stack(blocks, lead)


def ulp(x: float, dtype: str) -> float:
    """Spacing of `dtype` numbers at magnitude |x| (its unit in the last place)."""
    x = abs(x)
    tiny = SMALLEST_SUBNORMAL[dtype]
    if not math.isfinite(x) or x == 0.0:
        return tiny
    return max(2.0 * UNIT_ROUNDOFF[dtype] * 2.0 ** math.floor(math.log2(x)), tiny)


@dataclass(frozen=True)
class RuleResult:
    """Outcome of the reference-error rule: error, the plain kernel's error, allowance, ok."""

    ok: bool
    error: float
    reference_error: float
    allowed: float


def reference_error_rule(
    output: object,
    plain: object,
    truth: object,
    *,
    dtype: object = "float32",
    factor: float = 2.0,
    floor_ulps: float = 4.0,
) -> RuleResult:
    """FlashAttention's rule: max |output - truth| <= 2 max |plain - truth| + a few output ulps.

    `plain` is softmax(q @ k^T * scale + mask) @ v computed naively in the same dtype (numpy or
    torch), `truth` the float64 ground truth; all three have the same shape. The floor is
    `floor_ulps` units in the last place of the largest |truth| in `dtype`. NaN must sit where
    the truth has NaN; anything else non-finite is an infinite error.
    """
    dtype = check_dtype(dtype)
    err = _max_abs_diff(output, truth)
    ref = _max_abs_diff(plain, truth)
    top = max((abs(t) for t in flat(truth) if math.isfinite(t)), default=0.0)
    allowed = factor * (ref if math.isfinite(ref) else 0.0) + floor_ulps * ulp(top, dtype)
    return RuleResult(err <= allowed, err, ref, allowed)


def _max_abs_diff(a: object, b: object) -> float:
    """max |a - b| over all elements; NaN vs NaN is 0, NaN vs a number is inf."""
    worst = 0.0
    for x, y in zip(flat(a), flat(b), strict=True):
        if math.isnan(x) or math.isnan(y):
            d = 0.0 if math.isnan(x) and math.isnan(y) else math.inf
        elif x == y:
            d = 0.0
        else:
            d = abs(x - y)
        worst = max(worst, d if not math.isnan(d) else math.inf)
    return worst

"""Value checks for the fuzzers: when a call answers, its numbers agree with an independent
computation (NumPy where scratch answered, scratch where a backend did) within the project's
error bounds, and the weights keep softmax's invariants."""

from __future__ import annotations

import math

import numpy as np

import scratch
from scratch import backends
from scratch.bounds.grad_tolerance import tolerance_of
from scratch.bounds.tolerance import UNIT_ROUNDOFF, gamma
from scratch.bounds.weights_tolerance import weights_tolerance
from scratch.core.options import Options

U64 = np.finfo(np.float64).eps / 2  # float64's unit roundoff
TINY = 2.0**-1074  # the smallest subnormal: what one rounding below the normal range may lose
NB = backends.get("numpy")


def floats(x: object) -> np.ndarray:
    """Any answer (nested lists, an array, a tensor) as a float64 array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def agree(name: str, got: object, want: object, bound: object) -> None:
    """Same shape, NaN in the same places, and |got - want| <= bound elsewhere (equal infinities
    pass: inf - inf is NaN, not a difference)."""
    got, want = floats(got), floats(want)
    bound = np.broadcast_to(floats(bound), want.shape)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    assert (np.isnan(got) == np.isnan(want)).all(), f"{name}: NaN in other places"
    with np.errstate(invalid="ignore"):
        ok = np.isnan(want) | (got == want) | (np.abs(got - want) <= bound)
    assert ok.all(), f"{name}: {got[~ok][:3]} vs {want[~ok][:3]}, bound {bound[~ok][:3]}"


def allowed_grid(shape: tuple, attn_mask: object = None, is_causal: bool = False) -> np.ndarray:
    """Which (query, key) pairs may attend, broadcast to `shape` (..., L, S), from the mask's
    meaning alone (True / a finite float = attend; causal = key j <= query i)."""
    L, S = shape[-2:]
    grid = np.ones(shape, dtype=bool)
    if is_causal:
        grid &= np.tril(np.ones((L, S), dtype=bool))
    if attn_mask is not None:
        mask = np.asarray(attn_mask.tolist() if hasattr(attn_mask, "tolist") else attn_mask)
        grid &= mask if mask.dtype == bool else (floats(mask) != -math.inf)
    return grid


def check_weight_rows(
    weights: object,
    grid: np.ndarray,
    masked_rows: str,
    nan_data: bool = False,
    dtype: str = "float64",
) -> None:
    """Softmax's invariants, row by row: a row the mask empties follows masked_rows; any other
    row gives masked keys exactly 0 and sums to 1 within 4u + S * TINY (one rounding for the
    fsum denominator, one per division, one for the fsum here; underflowed weights lose TINY;
    a kernel in `dtype` with u' = its unit roundoff: (S + 4) u' for any summation order) -
    or, where the data (overflowing scores) emptied it, follows masked_rows too. With NaN or
    inf in the data (`nan_data`), any row may be NaN (NaN + -inf is NaN, as in torch)."""
    w = floats(weights)
    S, unit = w.shape[-1], UNIT_ROUNDOFF[dtype]
    policy = {"zero": np.zeros(S), "uniform": np.full(S, 1.0 / S)}.get(masked_rows)
    for index in np.ndindex(*w.shape[:-1]):
        row, allowed = w[index], grid[index]
        if nan_data and np.isnan(row).all():
            continue
        if not allowed.any():
            follows = np.isnan(row).all() if policy is None else (row == policy).all()
            assert follows, f"row {index} masks every key: {row}, not masked_rows={masked_rows}"
        elif np.isnan(row).any() or (policy is not None and (row == policy).all()):
            continue  # NaN data, or the data emptied the row: the comparison covers both
        else:
            assert (row[~allowed] == 0.0).all(), f"row {index}: masked keys got {row[~allowed]}"
            total = math.fsum(row)
            allowed_error = 4 * U64 + S * TINY if dtype == "float64" else (S + 4) * unit
            assert abs(total - 1.0) <= allowed_error, f"row {index} sums to {total!r}"


def check_sdpa(q, k, v, output, weights, *, by: str = "scratch", dtype: str = "float64", **options):
    """One answer of scaled_dot_product_attention (dropout off) against the other side's:
    NumPy's where scratch answered (`by="scratch"`), scratch's where a backend did, output within
    scratch.tolerance and weights within weights_tolerance (both for `dtype`), and the
    weights' row invariants. `weights` may be None (a fused path): the truth's are used."""
    mask, policy = options.get("attn_mask"), options.get("masked_rows", "zero")
    if by == "scratch" and not finite(q, k, v, mask):  # NumPy refuses NaN and inf data
        shape = floats(weights).shape
        grid = allowed_grid(shape, mask, options.get("is_causal"))
        check_weight_rows(weights, grid, policy, nan_data=True)
        return
    with np.errstate(all="ignore"):
        if by == "scratch":
            other = NB.scaled_dot_product_attention(q, k, v, need_weights=True, **options)
            truth_out, truth_w = output, weights
            kernel_out, kernel_w = other.output, other.weights
        else:
            truth_out, truth_w = scratch.scaled_dot_product_attention(q, k, v, **options)
            kernel_out, kernel_w = output, weights
    qa, ka, va = (floats(t).tolist() for t in (q, k, v))
    mask = None if mask is None or is_bool(mask) else floats(mask).tolist()
    kw = {n: options[n] for n in ("scale", "enable_gqa") if n in options}
    with np.errstate(over="ignore", invalid="ignore"):  # overflowing scores: an inf bound
        bound = scratch.tolerance(qa, ka, va, truth_w, dtype=dtype, attn_mask=mask, **kw)
        agree("output", kernel_out, truth_out, bound)
        if kernel_w is not None:
            bound = weights_tolerance(qa, ka, truth_w, Options(**options), dtype)
            agree("weights", kernel_w, truth_w, bound)
    grid = allowed_grid(floats(truth_w).shape, options.get("attn_mask"), options.get("is_causal"))
    qa, ka = floats(qa), floats(ka)
    with np.errstate(over="ignore"):
        size = np.abs(qa).max() * np.abs(ka).max() * qa.shape[-1]
        size *= abs(options.get("scale") or 1.0)
    nan_data = bool(size > 1e300)  # a score that overflows to inf, plus -inf, is NaN
    check_weight_rows(truth_w, grid, policy, nan_data)
    if kernel_w is not None:
        check_weight_rows(kernel_w, grid, policy, nan_data, dtype)


def finite(q, k, v, mask) -> bool:
    """Whether the data are finite and a float mask holds finite numbers or -inf only."""
    data = all(np.isfinite(floats(t)).all() for t in (q, k, v))
    return data and (
        mask is None
        or is_bool(mask)
        or not np.isnan(floats(mask)).any()
        and not (floats(mask) == math.inf).any()
    )


def is_bool(mask: object) -> bool:
    """Whether a mask (nested lists or an array) holds bools."""
    return np.asarray(mask.tolist() if hasattr(mask, "tolist") else mask).dtype == bool


def check_dropout(weights, output, plain_weights, v, dropout_p: float) -> None:
    """Dropout's weights are 0 or the plain weights / (1 - p) (within the two roundings of
    w * (1 / (1 - p))), and the output is weights @ v within gamma(S + 1) |weights| @ |v|
    (exactly 0 on a row masked_rows="zero" emptied)."""
    w, w0 = floats(weights), floats(plain_weights)
    kept = w0 / (1.0 - dropout_p)
    with np.errstate(invalid="ignore"):
        ok = np.isnan(w0) | (w == 0.0) | (np.abs(w - kept) <= 2 * U64 * np.abs(kept) + TINY)
    assert ok.all(), f"dropout weights {w[~ok][:3]}, plain {w0[~ok][:3]}"
    va = floats(v)
    with np.errstate(all="ignore"):
        want, size = w @ va, np.abs(w) @ np.abs(va)
    empty = (w0 == 0.0).all(axis=-1)  # a row masked_rows="zero" empties: output exactly 0
    want[empty], size[empty] = 0.0, 0.0
    agree("output after dropout", output, want, gamma(w.shape[-1] + 1, U64) * size + TINY)


def check_softmax(x: object, got: object) -> None:
    """scratch.softmax against NumPy's exp(x - max) / sum within (2n + 8)u relative, rows that
    are all -inf at 0 (masked_rows="zero"), and the row invariants."""
    a = floats(x)
    with np.errstate(all="ignore"):
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
    empty = (a == -math.inf).all(axis=-1)
    want[empty] = 0.0
    n = a.shape[-1]
    agree("softmax", got, want, (2 * n + 8) * U64 * np.abs(want) + n * TINY)
    if not np.isnan(floats(got)).any():
        check_weight_rows(got, np.ones(a.shape, dtype=bool), "zero")


def check_matmul(a: object, b: object, got: object) -> None:
    """scratch.matmul (fsum, one rounding) against NumPy's within gamma(n) |a| @ |b| + u |got|."""
    a, b = floats(a), floats(b)
    with np.errstate(all="ignore"):
        want, size = a @ b, np.abs(a) @ np.abs(b)
    agree("matmul", got, want, gamma(a.shape[-1], U64) * size + U64 * np.abs(want) + TINY)


def check_backward(q, k, v, grad_output, got) -> None:
    """scratch's backward against NumPy's within grad_tolerance's float64 bounds."""
    with np.errstate(all="ignore"):
        other = NB.scaled_dot_product_attention_backward(q, k, v, grad_output)
        bounds = tolerance_of(q, k, v, grad_output, Options(), dtype="float64")
    for i, name in enumerate(("grad_query", "grad_key", "grad_value")):
        agree(name, other[i], got[i], getattr(bounds, name))

"""NumPy backend: the attention pipeline written out in NumPy, explicit and chunked.

Two kernels:

- "explicit" (need_weights=True): scores, scaled, masked, weights and output as whole arrays,
  the same steps as the ground truth.
- "chunked-online-softmax" (need_weights=False): loops over query chunks and streams over key
  blocks with a running max, running denominator and running output, so the extra memory is
  O(chunk * block) and the (L, S) score matrix is never built. A first pass skips the max
  (exp of the raw scores, then checks nothing overflowed and every denominator is >= 1);
  rows that fail it are redone by the online-softmax pass. Large problems spread query
  chunks over worker threads, one per core, with OpenBLAS held to one thread meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from scratch import validate
from scratch.backends import numpy_chunked
from scratch.result import Result
from scratch.trace import Trace, given_arguments, layout_trace
from scratch.validate import (
    check_attention_shapes,
    check_dropout_p,
    check_flag,
    check_head_counts,
    check_mask_shape,
    check_masked_rows,
    check_positive_int,
    check_projections,
    check_scale,
    check_value_has_key,
)

NAME = "numpy"
DTYPES = ("float64", "float32")
KERNELS = ("explicit", "chunked-online-softmax")
NOTES = "NumPy: explicit with weights; chunked online softmax (O(chunk * block) memory) without"


# ---------------------------------------------------------------- input conversion


def _describe(obj: object) -> str:
    """Short 'type value' text for error messages."""
    text = repr(obj)
    return f"{type(obj).__name__} {text[:37] + '...' if len(text) > 40 else text}"


def _position(name: str, index: Sequence[int]) -> str:
    """Render `name[i][j]...` for an index tuple."""
    return name + "".join(f"[{int(i)}]" for i in index)


def _raw_array(obj: object, name: str) -> np.ndarray:
    """A nested list, NumPy array or torch tensor as a NumPy array (no dtype change yet).

    Lists and tuples are read by the ground truth's own reader, so every backend accepts and
    refuses the same lists (Fractions and big ints yes; Decimals, bools among numbers, arrays
    or ranges inside lists no) with the same messages.
    """
    validate.refuse_valueless_arrays(obj, name)
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # a torch tensor, without importing torch
        tensor = obj.detach().cpu()
        if tensor.is_floating_point() and str(tensor.dtype) not in (
            "torch.float32",
            "torch.float64",
        ):
            tensor = tensor.float()  # float16 / bfloat16 have no exact NumPy twin here
        return tensor.numpy()
    if isinstance(obj, np.ndarray):
        return obj
    if not isinstance(obj, (list, tuple)):
        raise TypeError(
            f"{name}: expected a matrix (nested lists of numbers or an array), "
            f"found {_describe(obj)}"
        )
    if name == "attn_mask":
        values, _, is_bool = validate.as_mask(obj, name)
        return np.asarray(values, dtype=bool if is_bool else np.float64)
    data, _ = validate.as_tensor(obj, name, min_dims=1)
    return np.asarray(data, dtype=np.float64)


def _check_regular(arr: np.ndarray, name: str) -> None:
    """Refuse object/string arrays, empty axes and scalars."""
    if arr.ndim == 0:
        raise TypeError(f"{name}: expected a matrix, found a scalar {_describe(arr.item())}")
    if arr.dtype.kind == "O":
        raise ValueError(
            f"{name}: ragged or mixed nesting (object array of shape {arr.shape}); "
            f"expected a regular matrix of numbers"
        )
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected numbers, found dtype {arr.dtype}")
    if 0 in arr.shape:
        raise ValueError(
            f"{name}: empty dimension in shape {arr.shape}; expected at least one entry "
            f"along every axis"
        )


def _check_finite(arr: np.ndarray, name: str, allow_neg_inf: bool = False) -> None:
    """Refuse NaN and +-inf (a float mask may hold -inf) naming the first bad position."""
    bad = ~np.isfinite(arr)
    if allow_neg_inf:
        bad &= ~np.isneginf(arr)
    if bad.any():
        index = tuple(np.argwhere(bad)[0])
        expected = "finite numbers or -inf" if allow_neg_inf else "finite numbers"
        raise ValueError(
            f"{name}: expected {expected}, found {arr[index]} at {_position(name, index)}"
        )


def _as_numbers(obj: object, name: str, dtype: np.dtype) -> np.ndarray:
    """Validate a data input and return it as a finite float array of `dtype`."""
    arr = _raw_array(obj, name)
    _check_regular(arr, name)
    if arr.dtype.kind == "b":
        raise TypeError(f"{name}: expected numbers, found bools (dtype {arr.dtype})")
    _check_finite(arr, name)
    if arr.dtype == dtype:
        return arr
    with np.errstate(over="ignore"):
        cast = np.asarray(arr, dtype=dtype)
    if cast.dtype.itemsize < arr.dtype.itemsize and not np.isfinite(cast).all():
        # finite before the cast: too large for `dtype`
        index = tuple(np.argwhere(~np.isfinite(cast))[0])
        raise ValueError(
            f"{name}: {arr[index]} at {_position(name, index)} is too large for {dtype} "
            f"(largest {np.finfo(dtype).max:.4g}); pass dtype='float64'"
        )
    return cast


_FLOAT32_NAMES = ("float32", "float16", "torch.float32", "torch.float16", "torch.bfloat16")


def _result_dtype(dtype: object, *inputs: object) -> np.dtype:
    """`dtype=` when given, else float32 when every array input is float32, else float64."""
    if dtype is not None:
        text = str(dtype)
        try:  # a torch dtype by its name; anything else as NumPy reads it
            chosen = np.dtype(text[6:] if text.startswith("torch.") else dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"dtype: expected one of {DTYPES}, found {_describe(dtype)}") from exc
        if chosen.name not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, found {chosen.name!r}")
        return chosen
    given = [obj for obj in inputs if obj is not None]
    if given and all(str(getattr(obj, "dtype", "")) in _FLOAT32_NAMES for obj in given):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _as_mask(obj: object, dtype: np.dtype) -> np.ndarray:
    """Validate a mask: bools (True = may attend) stay bool; floats (added) become `dtype`."""
    name = "attn_mask"
    arr = _raw_array(obj, name)
    _check_regular(arr, name)
    if arr.dtype.kind in "iu":
        raise TypeError(
            f"{name}: found only integers (dtype {arr.dtype}), which are ambiguous; expected "
            f"bools (True = may attend) or floats (added to the scaled scores, -inf = masked)"
        )
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize:
        # finite values past the narrower dtype's range stay finite: "very unlikely" (-1e300)
        # must not turn into "masked" (-inf) by overflowing in the cast
        top = np.finfo(dtype).max
        arr = np.where(np.isfinite(arr), np.clip(arr, -top, top), arr)
    arr = np.asarray(arr, dtype=dtype)
    _check_finite(arr, name, allow_neg_inf=True)
    return arr


class _Draws:
    """Uniform [0, 1) draws for dropout, row-major, from a Generator or a random.Random."""

    def __init__(self, rng: object):
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            rng = np.random.default_rng(int(rng))
        elif rng is None:
            rng = np.random.default_rng()  # fresh entropy: unseeded, like the ground truth's
        elif not isinstance(rng, np.random.Generator) and not callable(
            getattr(rng, "random", None)
        ):
            raise TypeError(
                f"rng: expected a numpy.random.Generator, an int seed, a random.Random"
                f" or None, found {_describe(rng)}"
            )
        self.rng = rng

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray:
        """An array of draws; a random.Random gives the same stream as the ground truth."""
        if isinstance(self.rng, np.random.Generator):
            return self.rng.random(shape)
        draw = self.rng.random
        return np.fromiter(
            (draw() for _ in range(math.prod(shape))), np.float64, math.prod(shape)
        ).reshape(shape)


def _block_sizes(block_size: object) -> tuple[int, int]:
    """(query chunk, key block) from None, one int (both) or a pair."""
    if block_size is None:
        return numpy_chunked.QUERY_CHUNK, numpy_chunked.KEY_BLOCK
    pair = (block_size, block_size) if not isinstance(block_size, (tuple, list)) else block_size
    if len(pair) != 2:
        raise ValueError(f"block_size: expected an int or (query_chunk, key_block), found {pair}")
    for p in pair:
        check_positive_int(p, "block_size")
    return int(pair[0]), int(pair[1])


# ---------------------------------------------------------------- explicit kernel


def _causal_allowed(L: int, S: int) -> np.ndarray:
    """Top-left causal grid: key j allowed for query i iff j <= i.  (L, S) bool."""
    return np.arange(S)[None, :] <= np.arange(L)[:, None]


def _explicit_steps(q, k, v, scale, mask, is_causal, masked_rows, dropout_p, rng) -> dict:
    """Every intermediate of attention as whole arrays; q (..., L, E), k/v (..., S, E/Ev)."""
    L, S = q.shape[-2], k.shape[-2]
    # step 2: scores = q @ k^T                      # (..., L, E) @ (..., E, S) -> (..., L, S)
    scores = q @ np.swapaxes(k, -1, -2)
    # step 3: scaled = scores * scale
    scaled = scores * scores.dtype.type(scale)
    # step 4: masked = scaled + mask: -inf added where a key may not be seen (as in torch's
    # reference, so a NaN or +inf score there still makes the row NaN); float masks are added
    if is_causal:
        masked = np.where(_causal_allowed(L, S), scaled, scaled - np.inf)
    elif mask is None:
        masked = scaled.copy()
    elif mask.dtype == np.bool_:
        masked = np.where(mask, scaled, scaled - np.inf)
    else:
        masked = scaled + mask
    masked = masked.astype(scaled.dtype, copy=False)
    # step 5: weights = softmax of each row (subtract the row max so exp never overflows)
    row_max = masked.max(axis=-1, keepdims=True)  # (..., L, 1)
    full = np.isneginf(row_max)  # rows where every key is masked
    exps = np.exp(masked - np.where(full, 0, row_max))  # exp(-inf) = 0 on masked keys
    total = exps.sum(axis=-1, keepdims=True)  # >= 1 on rows with an allowed key
    weights = exps / np.where(full, 1, total)
    if masked_rows == "nan":
        weights = np.where(full, np.nan, weights)
    elif masked_rows == "uniform":
        weights = np.where(full, 1.0 / S, weights)
    weights = weights.astype(scaled.dtype, copy=False)
    # step 5, then: dropout on the weights (kept entries scaled by 1 / (1 - p), dropped: 0)
    if dropout_p > 0.0:
        keep = rng(weights.shape) >= dropout_p
        weights = np.where(keep, weights * weights.dtype.type(1.0 / (1.0 - dropout_p)), 0)
        weights = weights.astype(scaled.dtype, copy=False)
    # step 6: output = weights @ v                  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    output = weights @ v
    return {
        "scores": scores,
        "scaled": scaled,
        "masked": masked,
        "weights": weights,
        "output": output,
    }


# ---------------------------------------------------------------- public functions


def _chunked_output(
    q, k, v, scale, mask, is_causal, masked_rows, dropout_p, draws, group, block_size
) -> tuple[np.ndarray, str]:
    """(output, kernel detail) from the chunked kernel (scratch/backends/numpy_chunked.py)."""
    chunk, block = _block_sizes(block_size)
    return numpy_chunked.chunked_output(
        q, k, v, scale, mask, is_causal, masked_rows, dropout_p, draws, group, chunk, block
    )


def _attend(
    q, k, v, scale, mask, is_causal, masked_rows, dropout_p, draws, group, need_weights, block_size
) -> Result:
    """Pick the kernel: explicit when the weights are wanted, chunked otherwise."""
    if not need_weights:
        output, detail = _chunked_output(
            q, k, v, scale, mask, is_causal, masked_rows, dropout_p, draws, group, block_size
        )
        return Result(output, None, "chunked-online-softmax", detail)
    if group > 1:  # query head h uses key/value head h // group
        k = np.repeat(k, group, axis=-3)  # (..., Hkv, S, E) -> (..., Hq, S, E)
        v = np.repeat(v, group, axis=-3)  # (..., Hkv, S, Ev) -> (..., Hq, S, Ev)
    steps = _explicit_steps(q, k, v, scale, mask, is_causal, masked_rows, dropout_p, draws)
    return Result(steps["output"], steps["weights"], "explicit")


def _check_mask_args(attn_mask, is_causal, dtype, target) -> np.ndarray | None:
    """The converted attn_mask for scores of shape `target` (None when not given)."""
    check_flag(is_causal, "is_causal")
    if attn_mask is None:
        return None
    if is_causal:
        raise ValueError("is_causal: cannot be combined with attn_mask; pass one or the other")
    mask = _as_mask(attn_mask, dtype)
    check_mask_shape(mask.shape, target)
    return mask


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    *,
    enable_gqa=False,
    masked_rows="zero",
    rng=None,
    need_weights=True,
    dtype=None,
    block_size=None,
) -> Result:
    """softmax(q @ k^T * scale + mask) @ v in NumPy; weights only when need_weights."""
    check_flag(need_weights, "need_weights")
    dtype = _result_dtype(dtype, query, key, value)
    q = _as_numbers(query, "query", dtype)
    k = _as_numbers(key, "key", dtype)
    v = _as_numbers(value, "value", dtype)
    check_flag(enable_gqa, "enable_gqa")
    lead, L, S, E, _ = check_attention_shapes(q.shape, k.shape, v.shape, enable_gqa)
    scale = check_scale(scale, E)
    dropout_p = check_dropout_p(dropout_p)
    masked_rows = check_masked_rows(masked_rows)
    draws = _Draws(rng) if dropout_p > 0.0 else None
    mask = _check_mask_args(attn_mask, is_causal, dtype, tuple(lead) + (L, S))
    group = q.shape[-3] // k.shape[-3] if enable_gqa else 1
    return _attend(
        q,
        k,
        v,
        scale,
        mask,
        is_causal,
        masked_rows,
        dropout_p,
        draws,
        group,
        need_weights,
        block_size,
    )


# ---------------------------------------------------------------- multi-head


def _projection(w, name: str, rows: int, heads: int, dtype) -> np.ndarray | None:
    """Validate a projection matrix (rows, heads * d)."""
    if w is None:
        return None
    m = _as_numbers(w, name, dtype)
    if m.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D matrix (rows, columns), found shape {m.shape}")
    if m.shape[0] != rows:
        raise ValueError(
            f"{name}: expected {rows} rows to match the input width, found shape {m.shape}"
        )
    if m.shape[1] % heads:
        raise ValueError(
            f"{name}: {m.shape[1]} columns do not split into {heads} heads of equal width"
        )
    return m


def _bias(b, name: str, length: int, dtype) -> np.ndarray | None:
    """Validate a bias vector of a known length."""
    if b is None:
        return None
    vec = _as_numbers(b, name, dtype)
    if vec.shape != (length,):
        raise ValueError(f"{name}: expected shape ({length},), found shape {vec.shape}")
    return vec


def _project(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    """x @ w (+ b): (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out); x itself when no w."""
    if w is None:
        return x if b is None else x + b
    out = x @ w  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    return out if b is None else out + b


def _split_heads(m: np.ndarray, heads: int) -> np.ndarray:
    """(..., n, heads * d) -> (..., heads, n, d): head h is the column block h*d:(h+1)*d."""
    *lead, n, width = m.shape
    return np.swapaxes(m.reshape(*lead, n, heads, width // heads), -2, -3)


def _run_multi_head(
    query,
    key,
    value,
    w_q,
    w_k,
    w_v,
    w_o,
    *,
    num_heads,
    num_kv_heads,
    b_q,
    b_k,
    b_v,
    b_o,
    attn_mask,
    is_causal,
    scale,
    masked_rows,
    need_weights,
    dtype,
    block_size=None,
) -> dict:
    """Project, split heads, attend, concatenate, project out; every intermediate kept."""
    check_value_has_key(key, value)
    check_flag(need_weights, "need_weights")
    H, Hkv = check_head_counts(num_heads, num_kv_heads)
    masked_rows = check_masked_rows(masked_rows)
    check_flag(is_causal, "is_causal")
    dtype = _result_dtype(dtype, query, key, value, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)
    x = _as_numbers(query, "query", dtype)
    xk = x if key is None else _as_numbers(key, "key", dtype)
    xv = xk if value is None else _as_numbers(value, "value", dtype)
    for name, arr in (("query", x), ("key", xk), ("value", xv)):
        if arr.ndim < 2:
            raise ValueError(
                f"{name}: expected at least 2 dims (..., length, width), found {arr.shape}"
            )
    lead = x.shape[:-2]
    for name, arr in (("key", xk), ("value", xv)):
        if arr.shape[:-2] != lead:
            raise ValueError(
                f"{name}: leading dims must match query's {lead}, found shape {arr.shape}"
            )
    if xk.shape[-2] != xv.shape[-2]:
        raise ValueError(
            f"value: length must match key's (S = {xk.shape[-2]}), found shape {xv.shape}"
        )
    L, S = x.shape[-2], xk.shape[-2]
    wq = _projection(w_q, "w_q", x.shape[-1], H, dtype)
    wk = _projection(w_k, "w_k", xk.shape[-1], Hkv, dtype)
    wv = _projection(w_v, "w_v", xv.shape[-1], Hkv, dtype)
    bq = _bias(b_q, "b_q", x.shape[-1] if wq is None else wq.shape[1], dtype)
    bk = _bias(b_k, "b_k", xk.shape[-1] if wk is None else wk.shape[1], dtype)
    bv = _bias(b_v, "b_v", xv.shape[-1] if wv is None else wv.shape[1], dtype)
    # step 1: projections
    q = _project(x, wq, bq)  # (..., L, d_model) @ (d_model, H * d_head) -> (..., L, H * d_head)
    k = _project(xk, wk, bk)  # (..., S, d_kv) @ (d_kv, Hkv * d_head) -> (..., S, Hkv * d_head)
    v = _project(xv, wv, bv)  # (..., S, d_kv) @ (d_kv, Hkv * d_v) -> (..., S, Hkv * d_v)
    for name, m, heads in (("query", q, H), ("key", k, Hkv), ("value", v, Hkv)):
        if m.shape[-1] % heads:
            raise ValueError(f"{name}: width {m.shape[-1]} does not split into {heads} heads")
    d_head = q.shape[-1] // H
    if k.shape[-1] // Hkv != d_head:
        raise ValueError(
            f"w_k: key heads are {k.shape[-1] // Hkv} wide but query heads are {d_head} wide"
        )
    scale = check_scale(scale, d_head)
    mask = _check_mask_args(attn_mask, is_causal, dtype, lead + (H, L, S))
    # steps 2-6: split heads and attend          # (..., H, L, d_head), (..., Hkv, S, d_head)
    q_h, k_h, v_h = _split_heads(q, H), _split_heads(k, Hkv), _split_heads(v, Hkv)
    group = H // Hkv
    if need_weights:  # keep every intermediate for the trace
        k_r = np.repeat(k_h, group, axis=-3)  # (..., Hkv, S, d) -> (..., H, S, d)
        v_r = np.repeat(v_h, group, axis=-3)
        steps = _explicit_steps(q_h, k_r, v_r, scale, mask, is_causal, masked_rows, 0.0, None)
        kernel, run_detail = "explicit", ""
    else:
        out, detail = _chunked_output(
            np.ascontiguousarray(q_h),
            k_h,
            v_h,
            scale,
            mask,
            is_causal,
            masked_rows,
            0.0,
            None,
            group,
            block_size,
        )
        steps, kernel = {"output": out, "weights": None}, "chunked-online-softmax"
        run_detail = detail
    head_outputs = steps["output"]  # (..., H, L, d_v)
    # step 7: concatenate heads                  # (..., H, L, d_v) -> (..., L, H * d_v)
    concat = np.swapaxes(head_outputs, -2, -3).reshape(*lead, L, -1)
    output = concat
    wo = None
    if w_o is not None:
        wo = _as_numbers(w_o, "w_o", dtype)
        if wo.ndim != 2 or wo.shape[0] != concat.shape[-1]:
            raise ValueError(
                f"w_o: expected {concat.shape[-1]} rows (num_heads * d_v), found shape {wo.shape}"
            )
        bo = _bias(b_o, "b_o", wo.shape[1], dtype)
        # step 8: output projection              # (..., L, H * d_v) @ (H * d_v, d_out)
        output = _project(concat, wo, bo)
    elif b_o is not None:
        raise ValueError("b_o: given without w_o; expected w_o as well")
    return {
        "x": x,
        "w_q": wq,
        "w_k": wk,
        "w_v": wv,
        "q": q,
        "k": k,
        "v": v,
        "steps": steps,
        "head_outputs": head_outputs,
        "concat": concat,
        "w_o": wo,
        "output": output,
        "scale": scale,
        "mask": mask,
        "kernel": kernel,
        "detail": run_detail,
        "H": H,
        "Hkv": Hkv,
    }


def multi_head_attention(
    query,
    key,
    value,
    w_q,
    w_k,
    w_v,
    w_o=None,
    *,
    num_heads=1,
    num_kv_heads=None,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
    attn_mask=None,
    is_causal=False,
    scale=None,
    masked_rows="zero",
    need_weights=True,
    dtype=None,
    block_size=None,
) -> Result:
    """Multi-head (and grouped-query) attention in NumPy; weights (..., H, L, S) when wanted."""
    check_projections(w_q, w_k, w_v)
    run = _run_multi_head(
        query,
        key,
        value,
        w_q,
        w_k,
        w_v,
        w_o,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        b_q=b_q,
        b_k=b_k,
        b_v=b_v,
        b_o=b_o,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        masked_rows=masked_rows,
        need_weights=need_weights,
        dtype=dtype,
        block_size=block_size,
    )
    return Result(run["output"], run["steps"]["weights"], run["kernel"], run["detail"])


# ---------------------------------------------------------------- trace


def trace_attention(
    x,
    key=None,
    value=None,
    w_q=None,
    w_k=None,
    w_v=None,
    w_o=None,
    *,
    tokens=None,
    key_tokens=None,
    num_heads=1,
    num_kv_heads=None,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
    attn_mask=None,
    is_causal=False,
    scale=None,
    masked_rows="zero",
    dtype=None,
) -> Trace:
    """The ground truth's worked example, every step a NumPy array computed here."""
    check_value_has_key(key, value)
    run = _run_multi_head(
        x,
        key,
        value,
        w_q,
        w_k,
        w_v,
        w_o,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        b_q=b_q,
        b_k=b_k,
        b_v=b_v,
        b_o=b_o,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        masked_rows=masked_rows,
        need_weights=True,
        dtype=dtype,
    )
    if run["x"].ndim != 2:
        raise ValueError(
            f"x: a trace is one worked example, expected shape (L, d_model), "
            f"found {run['x'].ndim} dims"
        )
    # the numbers are all computed here; scratch.trace only names and describes them
    values = {name: run[name] for name in ("x", "q", "k", "v", "head_outputs", "concat")}
    values.update({name: run["steps"][name] for name in ("scores", "scaled", "masked", "weights")})
    values.update({name: run[name] for name in ("w_q", "w_k", "w_v", "w_o", "output")})
    if key is not None:
        values["key_input"] = _as_numbers(key, "key", run["x"].dtype)
    if value is not None and value is not key:
        values["value_input"] = _as_numbers(value, "value", run["x"].dtype)
    return layout_trace(
        values,
        num_heads=run["H"],
        num_kv_heads=run["Hkv"],
        given=given_arguments(
            key=key,
            value=None if value is key else value,
            w_q=w_q,
            w_k=w_k,
            w_v=w_v,
            w_o=w_o,
            b_q=b_q,
            b_k=b_k,
            b_v=b_v,
            b_o=b_o,
        ),
        tokens=tokens,
        key_tokens=key_tokens,
        scale_arg=scale,
        scale=run["scale"],
        attn_mask=attn_mask,
        is_causal=is_causal,
        is_bool=None if run["mask"] is None else bool(run["mask"].dtype == np.bool_),
        masked_rows=masked_rows,
        backend=NAME,
        dtype=run["x"].dtype.name,
    )

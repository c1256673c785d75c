"""PyTorch backend: the attention pipeline written out in torch, on CPU or CUDA.

Two kernels, chosen once per call and recorded in `Result.kernel`, never swapped silently:

- "explicit" (need_weights=True, and every trace): scores = q @ k^T, scale, mask, softmax with the
  row max subtracted, the masked_rows policy, dropout, then weights @ v. For float16/bfloat16 it
  does what fused GPU kernels do: q, k, v are widened to float32, scores and softmax are computed
  in float32, the weights are rounded to the storage dtype (these are the returned weights), and
  output = rounded weights @ v is accumulated in float32 and rounded to the storage dtype once.
- "torch-sdpa" (need_weights=False): `torch.nn.functional.scaled_dot_product_attention`, then the
  masked_rows policy applied to rows whose keys are all masked. On CPU, torch 2.13 already returns
  zeros for those rows (both its fused and its math kernel); "nan" and "uniform" are patched in.

Inputs may be nested lists, NumPy arrays or tensors; results are tensors on the backend's device
in the common floating dtype of the data inputs (nested lists count as float64; float64 when
there is no floating input) or in `dtype=`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from scratch import validate
from scratch.result import Result
from scratch.trace import Trace, given_arguments, layout_trace

NAME = "torch"
DTYPES = ("float64", "float32", "float16", "bfloat16")
KERNELS = ("explicit", "torch-sdpa")
NOTES = (
    "explicit: q @ k^T, softmax and weights @ v written out in torch (float32 math for "
    "float16/bfloat16); torch-sdpa: torch.nn.functional.scaled_dot_product_attention "
    "(need_weights=False) with the masked_rows policy applied afterwards"
)
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_FLOATS = {name: getattr(torch, name) for name in DTYPES}
_FLOAT_SET = frozenset(_FLOATS.values())


# ---------------------------------------------------------------- input conversion


def _check_dtype(dtype: object) -> torch.dtype | None:
    """`dtype=` as a torch dtype: a name from DTYPES, a torch dtype, or None (from the inputs)."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype) and dtype in _FLOATS.values():
        return dtype
    if isinstance(dtype, str) and dtype in _FLOATS:
        return _FLOATS[dtype]
    raise ValueError(f"dtype: expected None or one of {', '.join(DTYPES)}, found {dtype!r}")


def _is_numpy(obj: object) -> bool:
    """True for a NumPy array, without importing NumPy."""
    return type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape")


def _from_numpy(arr: object, name: str) -> torch.Tensor:
    """A NumPy array as a CPU tensor: native byte order, long double as float64, never read-only."""
    if not arr.dtype.isnative:  # torch refuses big-endian arrays
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:  # long double: torch has no twin
        arr = arr.astype("float64")
    if not (arr.flags.c_contiguous and arr.flags.writeable):  # negative strides; read-only warns
        arr = arr.copy()
    try:
        return torch.from_numpy(arr)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(
            f"{name}: cannot convert a NumPy array of dtype {arr.dtype} ({exc})"
        ) from exc


def _as_tensor(
    obj: object, name: str, device: torch.device, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """A numeric input as a tensor on `device` in `dtype` (None: floats keep theirs, else f64)."""
    validate.refuse_valueless_arrays(obj, name)  # meta tensors, NumPy masked arrays
    if _is_numpy(obj):
        if obj.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected a real numeric array, found dtype {obj.dtype}")
        obj = _from_numpy(obj, name)
    if isinstance(obj, torch.Tensor):
        if obj.dtype not in _FLOAT_SET and (obj.is_complex() or obj.dtype == torch.bool):
            raise TypeError(f"{name}: expected a real numeric tensor, found dtype {obj.dtype}")
        if obj.ndim == 0 or 0 in obj.shape:
            raise ValueError(f"{name}: expected a non-empty matrix, found shape {tuple(obj.shape)}")
        if dtype is None:
            dtype = obj.dtype if obj.dtype in _FLOAT_SET else torch.float64
        if obj.dtype != dtype or obj.device != device:  # no copy when nothing changes
            obj = _narrow(obj, name, device, dtype)
        return obj
    data, _ = validate.as_tensor(obj, name, min_dims=1)  # same checks and messages as the truth
    wide = torch.tensor(data, dtype=torch.float64, device=device)
    return wide if dtype in (None, torch.float64) else _narrow(wide, name, device, dtype)


def _narrow(t: torch.Tensor, name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """t on `device` in `dtype`; a finite value too large for `dtype` is a ValueError, not inf."""
    out = t.to(device=device, dtype=dtype)
    source_max = torch.finfo(t.dtype).max if t.is_floating_point() else math.inf
    if torch.finfo(dtype).max >= source_max or out.device.type == "meta":
        return out  # widening (or equal): nothing can overflow
    grew = out.isinf() & torch.isfinite(t).to(out.device)
    if bool(grew.any()):
        index = tuple(int(i) for i in grew.nonzero()[0])
        position = name + "".join(f"[{i}]" for i in index)
        raise ValueError(
            f"{name}: {t[index].item():.6g} at {position} is too large for "
            f"{str(dtype).removeprefix('torch.')} (largest {torch.finfo(dtype).max:.4g}); "
            f"pass dtype='float64'"
        )
    return out


def _as_mask(obj: object, device: torch.device) -> torch.Tensor:
    """attn_mask as a bool (True = may attend) or floating (added) tensor on `device`."""
    validate.refuse_valueless_arrays(obj, "attn_mask")
    if _is_numpy(obj) and obj.dtype.kind in "biuf":
        obj = _from_numpy(obj, "attn_mask")
    if isinstance(obj, torch.Tensor):
        if obj.dtype != torch.bool and not obj.is_floating_point():
            raise TypeError(
                f"attn_mask: found dtype {obj.dtype}, which is ambiguous; expected bools "
                f"(True = may attend) or floats (added to the scaled scores, -inf = masked)"
            )
        if obj.ndim == 0 or 0 in obj.shape:
            raise ValueError(
                f"attn_mask: expected a non-empty mask, found shape {tuple(obj.shape)}"
            )
        return obj if obj.device == device else obj.to(device)
    values, _, is_bool = validate.as_mask(obj, "attn_mask")
    return torch.tensor(values, dtype=torch.bool if is_bool else torch.float64, device=device)


def _common_dtype(raw: tuple, dtype: torch.dtype | None) -> torch.dtype:
    """`dtype` if given, else the promoted floating dtype of the data inputs (lists: float64)."""
    # the rule shared with the NumPy backend: float64 when any input is float64 or a list,
    # float32 when float32 meets a 16-bit dtype (or float16 meets bfloat16), a 16-bit dtype only
    # when every input has it; integer arrays count as float64, like lists (exact values)
    if dtype is not None:
        return dtype
    found = None
    for obj in raw:
        if obj is None:
            continue
        if isinstance(obj, torch.Tensor):
            kind = obj.dtype
        elif _is_numpy(obj):
            kind = _np_dtype(obj)
        else:  # nested lists (and other array-likes) are read as float64, like the truth's
            kind = torch.float64
        if kind not in _FLOAT_SET:
            kind = torch.float64
        found = kind if found is None or found == kind else torch.promote_types(found, kind)
    return torch.float64 if found is None else found


def _np_dtype(arr: object) -> torch.dtype:
    """The torch dtype matching a NumPy array's float dtype (integers: int64, not a float)."""
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind == "f":
        return {2: torch.float16, 4: torch.float32}.get(size, torch.float64)
    return torch.int64


def _compute_dtype(storage: torch.dtype) -> torch.dtype:
    """Math dtype: float32 for float16/bfloat16 (as fused kernels accumulate), else itself."""
    return torch.float32 if storage in _LOW_PRECISION else storage


def _generator(rng: object, device: torch.device) -> torch.Generator | None:
    """rng as a torch.Generator: None (global RNG), an int seed, or a Generator."""
    if rng is None or isinstance(rng, torch.Generator):
        return rng
    if isinstance(rng, bool) or not isinstance(rng, int):
        raise TypeError(f"rng: expected None, an int seed or a torch.Generator, found {rng!r}")
    gen = torch.Generator(device=device)
    gen.manual_seed(rng)
    return gen


def _cast_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A float mask in `dtype`, finite entries clamped to its range (-inf stays -inf)."""
    if mask.dtype == dtype:
        return mask
    top = torch.finfo(dtype).max
    if torch.finfo(mask.dtype).max > top:  # a narrower range: clamp what would overflow, or
        # -1e300 cast to float32 would become -inf, turning "very unlikely" into "masked"
        wide = mask.to(torch.promote_types(mask.dtype, dtype))  # where `top` is exact
        mask = torch.where(wide.isfinite(), wide.clamp(-top, top), wide)
    return mask.to(dtype)


# ---------------------------------------------------------------- the explicit pipeline


def _fully_masked(masked: torch.Tensor) -> torch.Tensor:
    """(..., L) True where every key of the row is -inf."""
    return torch.isneginf(masked).all(dim=-1)


def _dropout(weights: torch.Tensor, p: float, gen: torch.Generator | None) -> torch.Tensor:
    """Zero each weight with probability p and scale the kept ones by 1/(1-p)."""
    if p == 0.0:
        return weights
    where = gen.device if gen is not None else weights.device
    keep = torch.rand(weights.shape, generator=gen, device=where).to(weights.device) >= p
    return torch.where(keep, weights / (1.0 - p), torch.zeros((), dtype=weights.dtype))


def _explicit(q, k, v, mask, is_causal, scale, masked_rows, dropout_p=0.0, gen=None) -> dict:
    """Every intermediate of attention on (..., H, L, E) tensors, in q's dtype (already wide)."""
    L, S = q.shape[-2], k.shape[-2]
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:  # GQA: kv head h // group serves query head h
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)  # (..., Hkv, S, E) -> (..., Hq, S, E)
        v = v.repeat_interleave(group, dim=-3)  # (..., Hkv, S, Ev) -> (..., Hq, S, Ev)
    # step 2: raw scores, one dot product per (query, key) pair
    scores = q @ k.transpose(-1, -2)  # (..., L, E) @ (..., E, S) -> (..., L, S)
    # step 3: scale
    scaled = scores * scale  # (..., L, S)
    # step 4: mask -- -inf added where a key is excluded (False in a bool mask, -inf in a
    # float mask), as torch's reference does: a NaN or +inf score there still gives NaN
    if is_causal:
        allowed = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()  # top-left
        masked = torch.where(allowed, scaled, scaled - math.inf)
    elif mask is None:
        masked = scaled
    elif mask.dtype == torch.bool:
        masked = torch.where(mask, scaled, scaled - math.inf)  # (L, S) over (..., L, S)
    else:
        masked = scaled + _cast_mask(mask, scaled.dtype)
    # step 5: softmax each row (subtract the row max so exp never overflows)
    fully = _fully_masked(masked)  # (..., L)
    top = masked.amax(dim=-1, keepdim=True)  # (..., L, 1)
    top = torch.where(fully.unsqueeze(-1), torch.zeros((), dtype=top.dtype), top)
    e = torch.exp(masked - top)  # (..., L, S), each in [0, 1]
    weights = e / e.sum(dim=-1, keepdim=True)
    # step 5, then: rows with every key masked follow the policy instead of 0 / 0
    if bool(fully.any()):
        fill = {"zero": 0.0, "nan": math.nan, "uniform": 1.0 / S}[masked_rows]
        weights = weights.masked_fill(fully.unsqueeze(-1), fill)
    else:
        fully = None
    # step 5, then: dropout on the weights (the returned weights are the dropped ones)
    weights = _dropout(weights, dropout_p, gen)
    return {
        "k": k,
        "v": v,
        "scores": scores,
        "scaled": scaled,
        "masked": masked,
        "weights": weights,
        "fully": fully,
    }


def _zero_empty_rows(output: torch.Tensor, steps: dict, masked_rows: str) -> torch.Tensor:
    """Under "zero", rows with every key masked are exactly 0 even if v holds inf or NaN."""
    if masked_rows != "zero" or steps["fully"] is None:
        return output
    return output.masked_fill(steps["fully"].unsqueeze(-1), 0.0)  # (..., L, 1) over (..., L, Ev)


def _weighted_sum(weights: torch.Tensor, v: torch.Tensor, storage: torch.dtype):
    """Round the weights to storage, then output = weights @ v accumulated wide, rounded once."""
    weights = weights.to(storage)
    output = weights.to(v.dtype) @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    return weights, output.to(storage)


# ---------------------------------------------------------------- the fused path


def _sdpa(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, masked_rows, gen):
    """torch's fused SDPA, then the masked_rows policy on rows whose keys are all masked."""
    if is_causal and _rounds_to_nonpositive(scale, q.dtype):
        # torch 2.13's fused CPU kernel returns NaN rows for is_causal with scale <= 0 (it seems
        # to scale after masking: -inf * 0 = NaN), also for a tiny scale that rounds to 0 in its
        # compute dtype; the same causal mask passed explicitly is fine
        L, S = q.shape[-2], k.shape[-2]
        mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()  # top-left
        is_causal = False
    if mask is not None and mask.dtype != torch.bool:
        # torch's fused kernel requires mask dtype == q's dtype, so a wider float mask is rounded
        # to q's dtype here (e.g. float32 -> float16): that rounding is on top of what
        # scratch.tolerance bounds, which assumes the mask exactly as given
        mask = _cast_mask(mask, q.dtype)
    if mask is not None and mask.ndim < 2:
        # torch 2.13's fused kernel raises IndexError on a 1-D (S,) mask with 4-D input;
        # (1, S) broadcasts over (..., L, S) the same way
        mask = mask.unsqueeze(0)  # (S,) -> (1, S)
    if dropout_p > 0.0 and gen is not None:  # SDPA takes no generator: seed a forked global RNG
        seed = int(torch.randint(2**62, (1,), generator=gen, device=gen.device))
        devices = [q.device] if q.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=q.device.type):
            torch.manual_seed(seed)
            output = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )
    else:
        output = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=enable_gqa,
        )  # (..., L, Ev)
    if masked_rows == "zero" and _sdpa_zeroes_empty_rows(q.device, q.dtype):
        return output  # the kernel itself gives zero rows, whatever emptied them
    # top-left causal always leaves key 0 to row i, so a row is emptied by a user mask, or by
    # the data when a score can overflow to -inf (huge or non-finite q and k: rare, checked
    # in O((L + S) E) before any O(L S) work)
    from_data = _scores_may_overflow(q, k, scale)
    if mask is None and not from_data:
        return output
    fully = _empty_rows(q, k, mask, is_causal, scale) if from_data else _mask_empty_rows(mask)
    if fully is None:
        return output
    if masked_rows == "zero":
        return output.masked_fill(fully, 0.0)
    if masked_rows == "nan":
        return output.masked_fill(fully, math.nan)
    S = k.shape[-2]  # "uniform": weights 1/S over all keys (then dropout), output = weights @ v
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        v = v.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)  # (..., Hq, S, Ev)
    wide = _compute_dtype(v.dtype)
    uniform = torch.full((*output.shape[:-1], S), 1.0 / S, dtype=wide, device=v.device)
    row = (_dropout(uniform, dropout_p, gen) @ v.to(wide)).to(output.dtype)  # (..., L, Ev)
    return torch.where(fully, row, output)


def _mask_empty_rows(mask: torch.Tensor) -> torch.Tensor | None:
    """(..., L, 1) True where the mask leaves a row no key; None when no row is empty."""
    # one reduction over the mask (not the scores): a row's largest entry says if it is empty
    if mask.dtype == torch.bool:  # bool reductions are slow in torch: reduce the bytes instead
        row_max, empty = mask.view(torch.uint8).amax(dim=-1), 0  # (..., L)
    else:
        row_max, empty = mask.amax(dim=-1), -math.inf  # (..., L)
    if row_max.min().item() != empty:
        return None
    return (row_max == empty).unsqueeze(-1)  # (..., L, 1) broadcasts over (..., L, Ev)


def _scores_may_overflow(q: torch.Tensor, k: torch.Tensor, scale: float) -> bool:
    """Whether some |scale * q_i . k_j| may reach the compute dtype's largest finite value."""
    wide = torch.float64
    rows = q.to(wide).abs().sum(dim=-1).amax()  # max_i sum_c |q_ic|
    keys = k.to(wide).abs().amax()  # max_jc |k_jc|
    bound = abs(scale) * rows * keys  # >= every |scaled score| (NaN or inf if the data are)
    return not bool(bound < torch.finfo(_compute_dtype(q.dtype)).max)


def _empty_rows(q, k, mask, is_causal, scale) -> torch.Tensor | None:
    """(..., L, 1) True where every masked score is -inf, from the data or the mask."""
    wide = _compute_dtype(q.dtype)
    if is_causal:  # top-left, as SDPA's is_causal
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)  # (..., Hq, S, E)
    masked = (q.to(wide) @ k.to(wide).transpose(-2, -1)) * scale  # (..., L, S)
    if mask is not None:
        masked = masked.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else masked + mask
    fully = (masked == -math.inf).all(dim=-1, keepdim=True)  # (..., L, 1)
    return fully if bool(fully.any()) else None


def _rounds_to_nonpositive(scale: float, storage: torch.dtype) -> bool:
    """True when `scale` is <= 0 once rounded to the compute dtype of `storage` data."""
    return torch.tensor(scale, dtype=_compute_dtype(storage)).item() <= 0.0


_ZEROES_CACHE: dict = {}


def _sdpa_zeroes_empty_rows(device: torch.device, dtype: torch.dtype) -> bool:
    """Probe once per device type and dtype: does SDPA return exact zeros for empty rows?"""
    key = (device.type, dtype)
    if key not in _ZEROES_CACHE:
        if device.type != "cpu":  # GPU kernels differ by architecture: always check there
            _ZEROES_CACHE[key] = False
        else:
            q = torch.ones(1, 2, 3, 4, dtype=dtype)  # row 1 of the masks below is empty
            bool_mask = torch.tensor([[True, True], [False, False], [True, False]])
            float_mask = torch.zeros(3, 2, dtype=dtype).masked_fill(~bool_mask, -math.inf)
            rows = []
            for v in (q[:, :, :2], torch.ones(1, 2, 2, 3, dtype=dtype)):  # Ev = E: fused; else math
                for mask in (bool_mask, float_mask):
                    out = F.scaled_dot_product_attention(q, q[:, :, :2], v, attn_mask=mask)
                    rows.append(out[..., 1, :])
            _ZEROES_CACHE[key] = all(bool((row == 0).all()) for row in rows)
    return _ZEROES_CACHE[key]


# ---------------------------------------------------------------- public functions


def _prepare(
    query,
    key,
    value,
    attn_mask,
    dropout_p,
    is_causal,
    scale,
    enable_gqa,
    masked_rows,
    dtype,
    device,
):
    """Validate like the ground truth; return tensors in the storage dtype and the options."""
    dtype = _check_dtype(dtype)
    dropout_p = validate.check_dropout_p(dropout_p)
    is_causal = validate.check_flag(is_causal, "is_causal")
    enable_gqa = validate.check_flag(enable_gqa, "enable_gqa")
    masked_rows = validate.check_masked_rows(masked_rows)
    storage = _common_dtype((query, key, value), dtype)
    q, k, v = (
        _as_tensor(obj, name, device, storage)
        for obj, name in ((query, "query"), (key, "key"), (value, "value"))
    )
    qs, ks, vs = q.shape, k.shape, v.shape
    if (
        not enable_gqa
        and len(qs) == len(ks) == len(vs) >= 2
        and qs[:-2] == ks[:-2] == vs[:-2]
        and (qs[-1] == ks[-1] and ks[-2] == vs[-2])
    ):  # the common valid case, decided without the full check (which gives the messages)
        lead, L, S, E = tuple(qs[:-2]), qs[-2], ks[-2], qs[-1]
    else:
        lead, L, S, E, _ = validate.check_attention_shapes(
            tuple(qs), tuple(ks), tuple(vs), enable_gqa
        )
    scale = validate.check_scale(scale, E)
    mask = None
    if attn_mask is not None:
        if is_causal:
            raise ValueError("is_causal: cannot be combined with attn_mask; pass one or the other")
        mask = _as_mask(attn_mask, device)
        validate.check_mask_shape(tuple(mask.shape), (*lead, L, S))
    return q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, masked_rows, storage


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
    device="cpu",
) -> Result:
    """Attention in torch: explicit with weights, torch's fused SDPA without (see module doc)."""
    device = _device(device)
    q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, masked_rows, storage = _prepare(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        masked_rows,
        dtype,
        device,
    )
    gen = _generator(rng, device)
    if not validate.check_flag(need_weights, "need_weights"):
        output = _sdpa(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, masked_rows, gen)
        return Result(output, None, "torch-sdpa")
    wide = _compute_dtype(storage)
    steps = _explicit(
        q.to(wide), k.to(wide), v.to(wide), mask, is_causal, scale, masked_rows, dropout_p, gen
    )
    weights, output = _weighted_sum(steps["weights"], steps["v"], storage)
    return Result(_zero_empty_rows(output, steps, masked_rows), weights, "explicit")


def _check_weight(w, name: str, rows: int | None, device, storage) -> torch.Tensor:
    """A projection matrix (rows, cols) as a tensor; rows checked when known."""
    t = _as_tensor(w, name, device, storage)
    if t.ndim != 2:
        raise ValueError(
            f"{name}: expected a 2-D matrix (rows, columns), found shape {tuple(t.shape)}"
        )
    if rows is not None and t.shape[0] != rows:
        raise ValueError(
            f"{name}: expected {rows} rows to match the input's width, found shape {tuple(t.shape)}"
        )
    return t


def _check_bias(b, name: str, length: int, device, storage) -> torch.Tensor | None:
    """An optional bias of shape (length,)."""
    if b is None:
        return None
    t = _as_tensor(b, name, device, storage)
    if tuple(t.shape) != (length,):
        raise ValueError(f"{name}: expected shape ({length},), found shape {tuple(t.shape)}")
    return t


def _project(x, w, b, storage):
    """x @ w (+ b), accumulated wide and rounded to storage once, like a fused linear layer."""
    wide = _compute_dtype(storage)
    out = x.to(wide) @ w.to(wide)  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    if b is not None:
        out = out + b.to(wide)
    return out.to(storage)


def _split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(..., n, heads*d) -> (..., heads, n, d): head h is columns h*d:(h+1)*d."""
    *lead, n, width = t.shape
    return t.reshape(*lead, n, heads, width // heads).transpose(-3, -2)


def _mha_parts(
    query,
    key,
    value,
    w_q,
    w_k,
    w_v,
    w_o,
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
    dtype,
    device,
    need_x=False,
):
    """Validate multi-head inputs and project them; returns everything the pipeline needs."""
    dtype = _check_dtype(dtype)
    num_heads, num_kv_heads = validate.check_head_counts(num_heads, num_kv_heads)
    is_causal = validate.check_flag(is_causal, "is_causal")
    masked_rows = validate.check_masked_rows(masked_rows)
    storage = _common_dtype((query, key, value, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o), dtype)
    x = _as_tensor(query, "query", device, storage)
    kx = x if key is None else _as_tensor(key, "key", device, storage)
    vx = kx if value is None else _as_tensor(value, "value", device, storage)
    for name, t in (("query", x), ("key", kx), ("value", vx)):
        if t.ndim < 2:
            raise ValueError(
                f"{name}: expected at least 2 dims (..., length, width), found {tuple(t.shape)}"
            )
    if kx.shape[-2] != vx.shape[-2]:
        raise ValueError(
            f"value: length must match key's (S = {kx.shape[-2]}); key "
            f"{tuple(kx.shape)} vs value {tuple(vx.shape)}"
        )
    projected = {}
    for name, t, w, b, heads in (
        ("q", x, w_q, b_q, num_heads),
        ("k", kx, w_k, b_k, num_kv_heads),
        ("v", vx, w_v, b_v, num_kv_heads),
    ):
        if w is None:
            if not need_x:
                raise TypeError(f"w_{name}: expected a matrix, found None")
            projected[name] = (t, None, None)
            continue
        wt = _check_weight(w, f"w_{name}", t.shape[-1], device, storage)
        if wt.shape[1] % heads:
            raise ValueError(
                f"w_{name}: expected a column count divisible by {heads} heads, "
                f"found shape {tuple(wt.shape)}"
            )
        bt = _check_bias(b, f"b_{name}", wt.shape[1], device, storage)
        projected[name] = (_project(t, wt, bt, storage), wt, bt)
    q, k, v = (projected[n][0] for n in "qkv")
    for name, t, heads in (
        ("query", q, num_heads),
        ("key", k, num_kv_heads),
        ("value", v, num_kv_heads),
    ):
        if t.shape[-1] % heads:  # only without a projection: w_* widths were checked above
            raise ValueError(f"{name}: width {t.shape[-1]} does not split into {heads} heads")
    if q.shape[-1] // num_heads != k.shape[-1] // num_kv_heads:
        raise ValueError(
            f"w_k: head width {k.shape[-1] // num_kv_heads} differs from w_q's "
            f"{q.shape[-1] // num_heads}"
        )
    for name, a in (("key", kx), ("value", vx)):
        if tuple(a.shape[:-2]) != tuple(x.shape[:-2]):
            raise ValueError(
                f"{name}: leading dims must match query's {tuple(x.shape[:-2])}, "
                f"found shape {tuple(a.shape)}"
            )
    L, S = x.shape[-2], kx.shape[-2]
    d_head = q.shape[-1] // num_heads
    scale = validate.check_scale(scale, d_head)
    mask = None
    if attn_mask is not None:
        if is_causal:
            raise ValueError("is_causal: cannot be combined with attn_mask; pass one or the other")
        mask = _as_mask(attn_mask, device)
        validate.check_mask_shape(tuple(mask.shape), (*x.shape[:-2], num_heads, L, S))
    wo = bo = None
    if w_o is not None:
        wo = _check_weight(w_o, "w_o", num_heads * (v.shape[-1] // num_kv_heads), device, storage)
        bo = _check_bias(b_o, "b_o", wo.shape[1], device, storage)
    elif b_o is not None:
        raise ValueError("b_o: given without w_o; expected w_o as well")
    return dict(
        x=x,
        kx=kx,
        vx=vx,
        projected=projected,
        q=q,
        k=k,
        v=v,
        wo=wo,
        bo=bo,
        mask=mask,
        is_causal=is_causal,
        scale=scale,
        masked_rows=masked_rows,
        storage=storage,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
    )


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
    device="cpu",
) -> Result:
    """Project, split heads, attend (explicit or fused), concatenate, project out -- in torch."""
    validate.check_projections(w_q, w_k, w_v)
    validate.check_value_has_key(key, value)
    device = _device(device)
    p = _mha_parts(
        query,
        key,
        value,
        w_q,
        w_k,
        w_v,
        w_o,
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
        dtype,
        device,
    )
    need_weights = validate.check_flag(need_weights, "need_weights")
    storage, heads, kv_heads = p["storage"], p["num_heads"], p["num_kv_heads"]
    # split the projected q, k, v (step 1) into heads for steps 2-6
    q = _split_heads(p["q"], heads)  # (..., L, H*d) -> (..., H, L, d)
    k = _split_heads(p["k"], kv_heads)  # (..., S, Hkv*d) -> (..., Hkv, S, d)
    v = _split_heads(p["v"], kv_heads)  # (..., S, Hkv*dv) -> (..., Hkv, S, dv)
    # steps 2-6: attention per head
    if need_weights:
        wide = _compute_dtype(storage)
        steps = _explicit(
            q.to(wide),
            k.to(wide),
            v.to(wide),
            p["mask"],
            p["is_causal"],
            p["scale"],
            p["masked_rows"],
        )
        weights, heads_out = _weighted_sum(steps["weights"], steps["v"], storage)
        heads_out = _zero_empty_rows(heads_out, steps, p["masked_rows"])
        kernel = "explicit"
    else:
        heads_out = _sdpa(
            q,
            k,
            v,
            p["mask"],
            0.0,
            p["is_causal"],
            p["scale"],
            kv_heads != heads,
            p["masked_rows"],
            None,
        )
        weights, kernel = None, "torch-sdpa"
    # steps 7-8: concatenate heads and project out
    concat = heads_out.transpose(-3, -2).flatten(-2)  # (..., H, L, dv) -> (..., L, H*dv)
    output = concat if p["wo"] is None else _project(concat, p["wo"], p["bo"], storage)
    return Result(output, weights, kernel)


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
    device="cpu",
    backend_name: str = "torch-cpu",
) -> Trace:
    """Every intermediate of one worked example as tensors: the truth's steps, names and axes."""
    validate.check_value_has_key(key, value)
    device = _device(device)
    p = _mha_parts(
        x,
        key,
        value,
        w_q,
        w_k,
        w_v,
        w_o,
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
        dtype,
        device,
        need_x=True,
    )
    if p["x"].ndim != 2:
        raise ValueError(
            f"x: a trace is one worked example, expected shape (L, d_model), "
            f"found {p['x'].ndim} dims"
        )
    storage, H, Hkv = p["storage"], p["num_heads"], p["num_kv_heads"]
    # steps 2-6: split heads and attend, every intermediate kept (float32 math for half dtypes)
    wide = _compute_dtype(storage)
    q = _split_heads(p["q"], H).to(wide)  # (L, H*d) -> (H, L, d)
    k = _split_heads(p["k"], Hkv).to(wide)  # (S, Hkv*d) -> (Hkv, S, d)
    v = _split_heads(p["v"], Hkv).to(wide)  # (S, Hkv*dv) -> (Hkv, S, dv)
    s = _explicit(q, k, v, p["mask"], p["is_causal"], p["scale"], p["masked_rows"])
    weights, heads_out = _weighted_sum(s["weights"], s["v"], storage)  # (H, L, S), (H, L, dv)
    heads_out = _zero_empty_rows(heads_out, s, p["masked_rows"])
    # steps 7-8: concatenate heads and project out
    concat = heads_out.transpose(-3, -2).flatten(-2)  # (H, L, dv) -> (L, H*dv)
    multi = H > 1 or p["wo"] is not None
    if not multi:
        output = heads_out[0]
    elif p["wo"] is None:
        output = concat
    else:
        output = _project(concat, p["wo"], p["bo"], storage)
    # the numbers are all computed here; scratch.trace only names and describes them
    values = {
        "x": p["x"],
        "q": p["q"],
        "k": p["k"],
        "v": p["v"],
        "head_outputs": heads_out,
        "concat": concat,
        "w_o": p["wo"],
        "output": output,
        "weights": weights,
    }
    values.update({name: s[name].to(storage) for name in ("scores", "scaled", "masked")})
    values.update({f"w_{name}": p["projected"][name][1] for name in ("q", "k", "v")})
    if key is not None:
        values["key_input"] = p["kx"]
    if value is not None and value is not key:
        values["value_input"] = p["vx"]
    return layout_trace(
        values,
        num_heads=H,
        num_kv_heads=Hkv,
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
        scale=p["scale"],
        attn_mask=attn_mask,
        is_causal=p["is_causal"],
        is_bool=None if p["mask"] is None else p["mask"].dtype == torch.bool,
        masked_rows=p["masked_rows"],
        backend=backend_name,
        dtype=str(storage).removeprefix("torch."),
    )


def _device(device: object) -> torch.device:
    """A torch.device with its index filled in for CUDA (so tensors already there match it)."""
    if isinstance(device, torch.device) and (device.type == "cpu" or device.index is not None):
        return device
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def functions(device: str = "cpu") -> dict[str, Callable]:
    """The three public functions bound to one device ("cpu" or "cuda")."""
    name = f"torch-{torch.device(device).type}"
    device = _device(device)
    return {
        "scaled_dot_product_attention": partial(scaled_dot_product_attention, device=device),
        "multi_head_attention": partial(multi_head_attention, device=device),
        "trace_attention": partial(trace_attention, device=device, backend_name=name),
    }

"""Torch backend, floor 2: torch's fused SDPA and what torch 2.13 needs around it.

`fused` calls `torch.nn.functional.scaled_dot_product_attention` and then applies the masked_rows
policy to rows whose keys are all masked. On CPU, torch 2.13 already returns zeros for those rows
(both its fused and its math kernel); "nan" and "uniform" are patched in. The helpers below find
those rows cheaply and work around the fused kernel's corner cases (causal with scale <= 0, 1-D
masks, float masks of another dtype, no generator argument).

`fused_with_lse` also returns each row's log-sum-exp. torch 2.13 has no public fused call that
returns it on CPU (flex_attention's lse is public, but in eager mode it builds the whole score
matrix), so it asks the op that torch's CPU SDPA runs for 4-D inputs,
`aten._scaled_dot_product_flash_attention_for_cpu` (returns (output, logsumexp), natural log,
float32 for 16-bit inputs; 0 on fully masked rows, made -inf here), where that op exists and
takes the call, and otherwise falls back to SDPA for the output and `torch.logsumexp` over query
chunks of the scores for the lse.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from scratch.backends.torch_inputs import cast_mask, compute_dtype
from scratch.backends.torch_math import (
    Heads,
    add_mask,
    causal_grid,
    dropout,
    fused_causal,
    repeat_kv,
)
from scratch.core.options import Options


def fused(heads: Heads) -> torch.Tensor:
    """torch's fused SDPA (causal by its own flag, `mask` None), then the masked_rows policy."""
    q, k, v, mask, scale = heads.q, heads.k, heads.v, heads.mask, heads.scale
    options, gen, is_causal = heads.options, heads.gen, fused_causal(heads.options)
    if is_causal and _rounds_to_nonpositive(scale, q.dtype):
        # torch 2.13's fused CPU kernel returns NaN rows for is_causal with scale <= 0 (it seems
        # to scale after masking: -inf * 0 = NaN), also for a tiny scale that rounds to 0 in its
        # compute dtype; the same causal mask passed explicitly is fine
        mask = causal_grid(q.shape[-2], k.shape[-2], q.device)  # top-left
        is_causal = False
    if mask is not None and mask.dtype != torch.bool:
        # torch's fused kernel requires mask dtype == q's dtype, so a wider float mask is rounded
        # to q's dtype here (e.g. float32 -> float16): that rounding is on top of what
        # scratch.tolerance bounds, which assumes the mask exactly as given
        mask = cast_mask(mask, q.dtype)
    if mask is not None and mask.ndim < 2:
        # torch 2.13's fused kernel raises IndexError on a 1-D (S,) mask with 4-D input;
        # (1, S) broadcasts over (..., L, S) the same way
        mask = mask.unsqueeze(0)  # (S,) -> (1, S)
    p = options.dropout_p
    call = dict(
        attn_mask=mask, dropout_p=p, is_causal=is_causal, scale=scale, enable_gqa=heads.group > 1
    )
    if p > 0.0 and gen is not None:  # SDPA takes no generator: seed a forked global RNG
        seed = int(torch.randint(2**62, (1,), generator=gen, device=gen.device))
        devices = [q.device] if q.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=q.device.type):
            torch.manual_seed(seed)
            output = F.scaled_dot_product_attention(q, k, v, **call)
    else:
        output = F.scaled_dot_product_attention(q, k, v, **call)  # (..., L, Ev)
    return _empty_rows_policy(output, q, k, v, mask, is_causal, scale, options, gen)


_FLASH_CPU = "_scaled_dot_product_flash_attention_for_cpu"  # private: looked up, never assumed
LSE_CHUNK = 256  # query rows per torch.logsumexp in the fallback: O(LSE_CHUNK * S) memory


def fused_with_lse(heads: Heads) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(output, lse (..., L), how the lse was found): `fused`, plus the log-sum-exp of each row
    of the masked scores in the compute dtype (-inf on rows with every key masked).

    With 4-D inputs SDPA itself runs the CPU flash op, so its output is taken with the lse
    (the same numbers as without return_lse). With 2-D or 3-D inputs SDPA runs its math kernel:
    the output comes from `fused` as without return_lse, the lse from the op on a 4-D view."""
    q, k, v, mask, scale = heads.q, heads.k, heads.v, heads.mask, heads.scale
    options = heads.options
    found = _flash_cpu(q, k, v, mask, scale, options)
    if found is None:
        output = fused(heads)
        lse = _lse_by_chunks(q, k, mask, fused_causal(options), scale)
        return output, lse, "lse by torch.logsumexp over query chunks of the scores"
    output, lse = found
    if q.ndim == 4:
        output = _empty_rows_policy(
            output, q, k, v, mask, fused_causal(options), scale, options, heads.gen
        )
    else:
        output = fused(heads)
    fully = mask_empty_rows(mask) if mask is not None else None
    if fully is not None:  # the op reports 0 there; the sum of exp is 0, its log -inf
        lse = lse.masked_fill(fully.squeeze(-1), -math.inf)
    return output, lse, f"lse from torch's fused CPU kernel (aten.{_FLASH_CPU})"


def _flash_cpu(q, k, v, mask, scale, options: Options):
    """(output, lse) from torch's CPU flash op on 4-D views, or None where the op is absent or
    cannot be used: not CPU, dropout, E != Ev, more than 4 dims, huge data (rows the data may
    empty), or the op refusing the call (a private op may change between versions)."""
    op = getattr(torch.ops.aten, _FLASH_CPU, None)
    usable = (
        op is not None
        and q.device.type == "cpu"
        and options.dropout_p == 0.0
        and q.shape[-1] == v.shape[-1]
        and q.ndim <= 4
        and (mask is None or mask.ndim <= 4)
        and _scores_surely_finite(q, k, scale)
        and not (fused_causal(options) and _rounds_to_nonpositive(scale, q.dtype))
    )
    if not usable:
        return None
    k, v = repeat_kv(k, q), repeat_kv(v, q)  # GQA: (..., Hkv, S, .) -> (..., Hq, S, .)
    lead = q.shape[:-2]
    q4, k4, v4 = (t.reshape((1,) * (4 - t.ndim) + tuple(t.shape)) for t in (q, k, v))
    m4 = None
    if mask is not None:  # the op takes a float mask of q's dtype with 2 or 4 dims
        m4 = cast_mask(mask, q.dtype) if mask.dtype != torch.bool else None
        if m4 is None:  # True = attend -> 0, False -> -inf
            m4 = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
                ~mask, -math.inf
            )
        m4 = m4.reshape((1,) * (4 - m4.ndim) + tuple(m4.shape))
    try:
        output, lse = op(q4, k4, v4, 0.0, fused_causal(options), attn_mask=m4, scale=scale)
    except (RuntimeError, TypeError, ValueError):
        return None
    return output.reshape(*lead, *output.shape[-2:]), lse.reshape(*lead, lse.shape[-1])


def _scores_surely_finite(q: torch.Tensor, k: torch.Tensor, scale: float) -> bool:
    """|scale| E max|q| max|k| below the compute dtype's largest value: no score overflows (a
    looser bound than _scores_may_overflow's, one pass over q and k, no float64 copies)."""
    top = abs(scale) * q.shape[-1] * float(q.abs().amax()) * float(k.abs().amax())
    return top < torch.finfo(compute_dtype(q.dtype)).max  # False for NaN and inf too


def _lse_by_chunks(q, k, mask, is_causal, scale) -> torch.Tensor:
    """log sum_j exp(masked_ij) per row in the compute dtype, LSE_CHUNK query rows at a time."""
    wide = compute_dtype(q.dtype)
    k = repeat_kv(k, q)  # (..., Hq, S, E)
    L, S = q.shape[-2], k.shape[-2]
    kt = k.to(wide).transpose(-2, -1)  # (..., E, S)
    if is_causal:  # top-left, as SDPA's is_causal
        mask = causal_grid(L, S, q.device)
    parts = []
    for i0 in range(0, L, LSE_CHUNK):
        rows = slice(i0, min(L, i0 + LSE_CHUNK))
        m = mask if mask is None or mask.ndim < 2 or mask.shape[-2] == 1 else mask[..., rows, :]
        # (..., c, E) @ (..., E, S) -> (..., c, S), then the mask
        masked = add_mask((q[..., rows, :].to(wide) @ kt) * scale, m)
        parts.append(torch.logsumexp(masked, dim=-1))  # (..., c); -inf where all are -inf
    return torch.cat(parts, dim=-1)  # (..., L)


def _empty_rows_policy(output, q, k, v, mask, is_causal, scale, options, gen) -> torch.Tensor:
    """The masked_rows policy on the rows of `output` whose keys are all masked."""
    masked_rows = options.masked_rows
    if masked_rows == "zero" and _sdpa_zeroes_empty_rows(q.device, q.dtype):
        return output  # the kernel itself gives zero rows, whatever emptied them
    # top-left causal always leaves key 0 to row i, so a row is emptied by a user mask, or by
    # the data when a score can overflow to -inf (huge or non-finite q and k: rare, checked
    # in O((L + S) E) before any O(L S) work)
    from_data = _scores_may_overflow(q, k, scale)
    if mask is None and not from_data:
        return output
    fully = _empty_rows(q, k, mask, is_causal, scale) if from_data else mask_empty_rows(mask)
    if fully is None:
        return output
    if masked_rows == "zero":
        return output.masked_fill(fully, 0.0)
    if masked_rows == "nan":
        return output.masked_fill(fully, math.nan)
    S = k.shape[-2]  # "uniform": weights 1/S over all keys (then dropout), output = weights @ v
    v = repeat_kv(v, q)  # (..., Hq, S, Ev)
    wide = compute_dtype(v.dtype)
    uniform = torch.full((*output.shape[:-1], S), 1.0 / S, dtype=wide, device=v.device)
    row = (dropout(uniform, options.dropout_p, gen) @ v.to(wide)).to(output.dtype)  # (..., L, Ev)
    return torch.where(fully, row, output)


def mask_empty_rows(mask: torch.Tensor) -> torch.Tensor | None:
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
    return not bool(bound < torch.finfo(compute_dtype(q.dtype)).max)


def _empty_rows(q, k, mask, is_causal, scale) -> torch.Tensor | None:
    """(..., L, 1) True where every masked score is -inf, from the data or the mask."""
    wide = compute_dtype(q.dtype)
    if is_causal:  # top-left, as SDPA's is_causal
        mask = causal_grid(q.shape[-2], k.shape[-2], q.device)
    k = repeat_kv(k, q)  # (..., Hq, S, E)
    masked = (q.to(wide) @ k.to(wide).transpose(-2, -1)) * scale  # (..., L, S)
    if mask is not None:
        masked = masked.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else masked + mask
    fully = (masked == -math.inf).all(dim=-1, keepdim=True)  # (..., L, 1)
    return fully if bool(fully.any()) else None


def _rounds_to_nonpositive(scale: float, storage: torch.dtype) -> bool:
    """True when `scale` is <= 0 once rounded to the compute dtype of `storage` data."""
    return torch.tensor(scale, dtype=compute_dtype(storage)).item() <= 0.0


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


__all__ = ["fused", "fused_with_lse", "mask_empty_rows"]

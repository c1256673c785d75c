"""Torch backend, floor 1: the explicit pipeline (mask, scores, softmax, dropout, weights @ v).

For float16/bfloat16 it does what fused GPU kernels do: q, k, v are widened to float32, scores and
softmax are computed in float32, the weights are rounded to the storage dtype (these are the
returned weights), and output = rounded weights @ v is accumulated in float32 and rounded once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from scratch.backends.array_common import Steps as Attended  # the explicit kernel's steps
from scratch.backends.torch_inputs import Placement, as_mask, cast_mask
from scratch.core.options import Options
from scratch.core.variant_support import sdpa_variant
from scratch.ops import validate
from scratch.variants import Causal


def build_mask(
    options: Options, target: tuple, device: torch.device, fused: bool = False
) -> torch.Tensor | None:
    """The mask of `options`' variant for scores of shape `target`: bool (True = may attend),
    float (added), or None. A new variant is one more branch here, in both kernels."""
    L, S = target[-2:]
    variant = sdpa_variant(options, "the torch backend's scaled_dot_product_attention")
    if isinstance(variant, Causal):  # PyTorch's top-left causal mask
        if fused:
            return None  # torch's fused kernel builds it itself from is_causal=True
        return variant.tensor(L, S, device)  # (L, S)
    if variant is not None:  # a given attn_mask, as the user's array or tensor
        mask = as_mask(variant.attn_mask, device)
        validate.check_mask_shape(tuple(mask.shape), target)
        return mask
    return None


def fused_causal(options: Options) -> bool:
    """Whether torch's fused kernel gets is_causal=True (its own top-left mask, `mask` None)."""
    return isinstance(options.attention_variant, Causal)


def causal_grid(L: int, S: int, device: torch.device) -> torch.Tensor:
    """PyTorch's top-left causal mask (L, S), True = may attend, built on `device`."""
    return Causal(0).tensor(L, S, device)


def repeat_kv(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(..., Hkv, n, c) -> (..., Hq, n, c) for GQA: query head h of `q` reads kv head
    h // (Hq // Hkv); `x` itself when the head counts agree or there is no head axis."""
    if q.ndim < 3 or x.shape[-3] == q.shape[-3]:
        return x
    return x.repeat_interleave(q.shape[-3] // x.shape[-3], dim=-3)


def dropout(weights: torch.Tensor, p: float, gen: torch.Generator | None) -> torch.Tensor:
    """Drop each weight with probability p (times 0: a NaN weight stays NaN, as in torch's own
    dropout) and scale the kept ones by 1/(1-p)."""
    if p == 0.0:
        return weights
    where = gen.device if gen is not None else weights.device
    keep = torch.rand(weights.shape, generator=gen, device=where).to(weights.device) >= p
    return torch.where(keep, weights / (1.0 - p), weights * 0)


def add_mask(scaled: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """masked = scaled + mask: -inf added where a key is excluded (False in a bool mask, -inf in
    a float mask, cast to scaled's dtype), as torch's reference does: a NaN or +inf score there
    gives NaN. scaled itself without a mask."""
    if mask is None:
        return scaled
    if mask.dtype == torch.bool:
        return torch.where(mask, scaled, scaled - math.inf)
    return scaled + cast_mask(mask, scaled.dtype)


@dataclass(frozen=True)
class Heads:
    """One call's attention inputs as tensors: what the explicit and the fused kernels read."""

    q: torch.Tensor  # (..., H, L, E) or (..., L, E)
    k: torch.Tensor  # (..., Hkv, S, E)
    v: torch.Tensor  # (..., Hkv, S, Ev)
    mask: torch.Tensor | None  # broadcasts to (..., L, S); None: no mask, or causal for fused
    scale: float
    options: Options
    group: int = 1  # query heads per key/value head (the plan's)
    gen: torch.Generator | None = None  # dropout's generator; None: torch's global one


def attend(heads: Heads, place: Placement) -> Attended:
    """Attention on (..., H, L, E) tensors in the storage dtype, every intermediate kept."""
    mask, scale, options, gen = heads.mask, heads.scale, heads.options, heads.gen
    q, k, v = heads.q.to(place.wide), heads.k.to(place.wide), heads.v.to(place.wide)
    k, v = repeat_kv(k, q), repeat_kv(v, q)  # (..., Hkv, S, .) -> (..., Hq, S, .)
    # step 2: scores = q @ k^T, one dot product per (query, key) pair
    scores = q @ k.transpose(-1, -2)  # (..., L, E) @ (..., E, S) -> (..., L, S)
    # step 3: scaled = scores * scale
    scaled = scores * scale  # (..., L, S)
    # step 4: masked = scaled + mask
    masked = add_mask(scaled, mask)  # (L, S) over (..., L, S)
    # step 5: weights = softmax of each row (subtract the row max so exp never overflows)
    fully = torch.isneginf(masked).all(dim=-1)  # (..., L) True where every key is -inf
    top = masked.amax(dim=-1, keepdim=True)  # (..., L, 1)
    top = torch.where(fully.unsqueeze(-1), torch.zeros((), dtype=top.dtype), top)
    e = torch.exp(masked - top)  # (..., L, S), each in [0, 1]
    total = e.sum(dim=-1, keepdim=True)  # (..., L, 1), 0 on fully masked rows
    # 0 / 1 there, not 0 / 0: the policy fills those rows below, and autograd through this
    # division stays finite (0 / 0 would send NaN back to q and k from rows that use nothing)
    weights = e / torch.where(fully.unsqueeze(-1), torch.ones((), dtype=total.dtype), total)
    # the log of softmax's denominator, log sum_j exp(masked_ij) = max + log(sum), -inf on
    # fully masked rows (top 0 there, log 0 = -inf); before dropout
    lse = (top + torch.log(total)).squeeze(-1) if options.return_lse else None
    # step 5, then: rows with every key masked follow the policy instead of 0 / 0
    empty = bool(fully.any())
    if empty:
        fill = {"zero": 0.0, "nan": math.nan, "uniform": 1.0 / k.shape[-2]}[options.masked_rows]
        weights = weights.masked_fill(fully.unsqueeze(-1), fill)
    # step 5, then: dropout on the weights (the returned weights are the dropped ones)
    weights = dropout(weights, options.dropout_p, gen).to(place.storage)
    # step 6: output = rounded weights @ v, accumulated wide and rounded once
    output = (weights.to(v.dtype) @ v).to(place.storage)  # (..., L, S) @ (..., S, Ev)
    if empty and options.masked_rows == "zero":  # exactly 0 even if v holds inf or NaN
        output = output.masked_fill(fully.unsqueeze(-1), 0.0)  # (..., L, 1) over (..., L, Ev)
    return Attended(scores, scaled, masked, weights, output, lse)


def project(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, place: Placement):
    """x @ w (+ b), accumulated wide and rounded to storage once, like a fused linear layer."""
    out = x.to(place.wide) @ w.to(place.wide)  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    if b is not None:
        out = out + b.to(place.wide)
    return out.to(place.storage)


__all__ = [
    "Attended",
    "add_mask",
    "attend",
    "build_mask",
    "dropout",
    "project",
    "repeat_kv",
]

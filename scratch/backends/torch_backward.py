"""The backward pass of attention in PyTorch: autograd, and the same steps written out.

- `autograd`: torch.autograd.grad through F.scaled_dot_product_attention (with dropout, through
  an explicit differentiable forward, since SDPA's dropout mask cannot be reused). Rows whose
  keys are all masked are made safe before softmax (a 0/0 there would put NaN into every
  gradient) and then given the policy's value, so that autograd sees the ground truth's
  decisions: "zero" passes no gradient, "uniform" passes dO/S to v only, "nan" passes NaN.
- `explicit`: dV = P_d^T dO, dP = dO V^T (times the dropout factors), D = rowsum(dO * O),
  dS = P * (dP - D), dQ = scale * dS K, dK = scale * dS^T Q, GQA summed over each group.
16-bit inputs: sums in float32, P and dS rounded to the 16-bit dtype before their matmuls, each
gradient rounded once at the end (scratch/bounds/grad_tolerance.py bounds exactly this).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from scratch.backends.torch_compat import mask_empty_rows
from scratch.backends.torch_math import add_mask, build_mask, repeat_kv
from scratch.core.front_doors import backward_door
from scratch.core.options import Options
from scratch.ops.plan import plan_attention
from scratch.ops.validate import check_choice, dtype_of

KERNELS = ("autograd", "explicit")
DTYPES = ("float16", "bfloat16", "float32", "float64")
_WIDE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _tensor(x: object, name: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """x as a finite float tensor with at least 2 axes; errors name the argument."""
    try:
        t = torch.as_tensor(x.detach() if isinstance(x, torch.Tensor) else x)
        if isinstance(x, (list, tuple)) and t.is_floating_point():
            t = torch.as_tensor(x, dtype=torch.float64)  # not torch's float32 default
    except (ValueError, TypeError, RuntimeError) as exc:
        raise ValueError(f"{name}: expected a regular (rectangular) array of numbers") from exc
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name}: expected real numbers, found a tensor of dtype {t.dtype}")
    if t.ndim < 2 or t.numel() == 0:
        raise ValueError(
            f"{name}: expected a non-empty (..., length, width) array, found shape {tuple(t.shape)}"
        )
    t = t.to(device=device, dtype=dtype)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: expected finite numbers, found inf or NaN")
    return t


def _keep(rng: object, shape: tuple, p: float, dtype, device) -> torch.Tensor | None:
    """Dropout factors (0 or 1/(1-p)): drawn from an int seed, a torch.Generator (the torch
    backend's rule) or a random.Random (the ground truth's stream, row-major)."""
    if p == 0.0:
        return None
    if isinstance(rng, int) and not isinstance(rng, bool):
        rng = torch.Generator().manual_seed(rng)
    if rng is None or isinstance(rng, torch.Generator):
        draws = torch.rand(shape, generator=rng, dtype=torch.float64)
    elif callable(getattr(rng, "random", None)):
        n = math.prod(shape)
        draws = torch.tensor([rng.random() for _ in range(n)], dtype=torch.float64).reshape(shape)
    else:
        raise TypeError(
            f"rng: expected None, an int seed, a torch.Generator or a random.Random, "
            f"found {type(rng).__name__}"
        )
    factor = torch.full((), 1.0 / (1.0 - p), dtype=torch.float64)  # not a float32 default
    return torch.where(draws >= p, factor, 0.0).to(device=device, dtype=dtype)


def _sum_groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """(..., Hq, n, c) -> (..., Hkv, n, c): a kv gradient sums its group's query heads."""
    return x.unflatten(-3, (-1, group)).sum(-3) if group > 1 else x


def _safe_softmax(q, kr, scale, mask, full, masked_rows) -> torch.Tensor:
    """softmax of each row; fully masked rows get the policy's value without a 0/0 anywhere.

    On an empty row the unmasked scores stand in for the -inf ones: finite, and under "nan"
    the NaN they are multiplied by flows back to q and k as it does through a textbook softmax.
    """
    scaled = (q @ kr.transpose(-1, -2)) * scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
    masked = add_mask(scaled, mask)  # (..., L, S)
    P = torch.softmax(torch.where(full, scaled, masked), dim=-1)
    if masked_rows == "zero":
        return torch.where(full, torch.zeros_like(P), P)
    if masked_rows == "uniform":
        return torch.where(full, torch.full_like(P, 1.0 / kr.shape[-2]), P)
    # NaN only on empty rows (a where(full, P * nan, P) would send 0 * NaN to every row)
    return P * torch.where(full, math.nan, 1.0).to(P.dtype)


def _autograd(q, k, v, g, mask, scale, masked_rows, keep):
    """torch.autograd.grad of the forward at dO = g."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        kr, vr = repeat_kv(k, q), repeat_kv(v, q)
        full = None if mask is None else mask_empty_rows(mask)  # (..., L, 1) or None
        full = None if full is None else full.expand(q.shape[:-1] + (1,))
        if keep is not None or full is not None and masked_rows == "nan":
            full = full if full is not None else torch.zeros((), dtype=torch.bool)
            P = _safe_softmax(q, kr, scale, mask, full, masked_rows)
            out = (P if keep is None else P * keep) @ vr  # (..., L, S) @ (..., S, Ev)
        else:
            safe = mask
            if full is not None:  # every key allowed on an empty row: finite, then replaced
                safe = mask | full if mask.dtype == torch.bool else mask.masked_fill(full, 0.0)
            out = F.scaled_dot_product_attention(
                q, kr, vr, attn_mask=safe, scale=scale
            )  # (..., L, Ev)
            if full is not None and masked_rows == "zero":
                out = torch.where(full, torch.zeros_like(out), out)
            elif full is not None:  # "uniform": the mean of the values, no gradient to q, k
                out = torch.where(full, vr.mean(dim=-2, keepdim=True), out)
        return torch.autograd.grad(out, (q, k, v), g)


def _explicit(q, k, v, g, mask, scale, group, masked_rows, keep, storage):
    """The backward written out, step by step, in q's (wide) dtype."""
    kr, vr = repeat_kv(k, q), repeat_kv(v, q)  # (..., Hq, S, E), (..., Hq, S, Ev)
    S = k.shape[-2]
    # S = scale * q k^T + mask            (..., L, E) @ (..., E, S) -> (..., L, S)
    masked = add_mask((q @ kr.transpose(-1, -2)) * scale, mask)
    full = torch.isneginf(masked).all(-1, keepdim=True)  # (..., L, 1)
    # step 0: the forward's P (rounded to storage for 16-bit), P_d and O = P_d V
    top = masked.amax(-1, keepdim=True).masked_fill(full, 0.0)
    e = torch.exp(masked - top)
    P = e / e.sum(-1, keepdim=True).masked_fill(full, 1.0)
    fill = {"zero": 0.0, "nan": math.nan, "uniform": 1.0 / S}[masked_rows]
    P = P.masked_fill(full.expand_as(P), fill).to(storage).to(q.dtype)
    Pd = P if keep is None else P * keep
    O = Pd @ vr  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    if masked_rows == "zero":
        O = O.masked_fill(full, 0.0)
    # step 1: dV = P_d^T dO                  (..., S, L) @ (..., L, Ev) -> (..., S, Ev)
    grad_value = Pd.transpose(-1, -2) @ g
    # step 2: dP = dO V^T, times the forward's dropout factors   (..., L, S)
    grad_weights = g @ vr.transpose(-1, -2)
    if keep is not None:
        grad_weights = grad_weights * keep
    # step 3: D_i = sum_c dO_ic O_ic         (..., L, 1)
    row_dot = (g * O).sum(-1, keepdim=True)
    # step 4: dS = P * (dP - D); constant rows ("zero", "uniform") get none
    grad_scores = P * (grad_weights - row_dot)
    if masked_rows != "nan":
        grad_scores = grad_scores.masked_fill(full, 0.0)
    grad_scores = grad_scores.to(storage).to(q.dtype)
    # step 5: dQ = scale * dS K              (..., L, S) @ (..., S, E) -> (..., L, E)
    grad_query = (grad_scores @ kr) * scale
    # step 6: dK = scale * dS^T Q            (..., S, L) @ (..., L, E) -> (..., S, E)
    grad_key = (grad_scores.transpose(-1, -2) @ q) * scale
    return grad_query, _sum_groups(grad_key, group), _sum_groups(grad_value, group)


def gradients_of(
    query, key, value, grad_output, options: Options, *, rng=None, dtype=None, device="cpu",
    kernel="autograd",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(grad_query, grad_key, grad_value) in torch, the ground truth's arguments and meanings.

    `kernel` is "autograd" or "explicit"; `rng` (int seed, torch.Generator or random.Random)
    gives the dropout mask the forward drew from the same state.
    """
    check_choice(kernel, "kernel", KERNELS)
    device = torch.device(device)
    storage = getattr(torch, dtype_of(dtype, (query, key, value), DTYPES))
    wide = _WIDE.get(storage, storage)
    q, k, v = (
        _tensor(x, n, storage, device).to(wide)
        for x, n in ((query, "query"), (key, "key"), (value, "value"))
    )
    plan = plan_attention(tuple(q.shape), tuple(k.shape), tuple(v.shape), options.enable_gqa)
    scale, masked_rows = options.scale_for(plan.E), options.masked_rows
    g = _tensor(grad_output, "grad_output", storage, device).to(wide)
    plan.check_grad_output(tuple(g.shape))
    mask = build_mask(options, plan.scores_shape, device)
    if mask is not None and mask.ndim < 2:
        # torch's SDPA (the autograd kernel's forward) raises IndexError on a 1-D (S,) mask
        # with 4-D input; (1, S) broadcasts over (..., L, S) the same way
        mask = mask.unsqueeze(0)  # (S,) -> (1, S)
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(wide)
    keep = _keep(rng, plan.scores_shape, options.dropout_p, wide, device)
    if kernel == "autograd":
        grads = _autograd(q, k, v, g, mask, scale, masked_rows, keep)
    else:
        grads = _explicit(q, k, v, g, mask, scale, plan.group, masked_rows, keep, storage)
    return tuple(x.to(storage) for x in grads)


scaled_dot_product_attention_backward = backward_door(gradients_of, own_rng=True)

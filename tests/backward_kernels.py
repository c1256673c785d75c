"""Backward kernels for the backward checker's tests: correct ones, and one per planted mistake.

`numpy_backward(mistake=None)` and `torch_backward(mistake=None)` return a backward function
with the signature check_backward calls: (q, k, v, grad_output, attn_mask=None,
is_causal=False, scale=None, enable_gqa=False, dropout_p=0.0, dropout_mask=None) -> (dq, dk, dv).
Written out here on purpose, not taken from the checker: a bug shared with the checker's own
reference kernels would be invisible.
"""

from __future__ import annotations

import math

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None


def _np_grads(q, k, v, dO, attn_mask, is_causal, scale, enable_gqa, dropout_p, dropout_mask, bug):
    """One numpy backward (float32 or float64 as the inputs), with `bug` planted."""
    dt = q.dtype
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    kv_heads = k.shape[-3] if k.ndim >= 3 else 1
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        if bug == "gqa_interleaved":
            reps = [1] * k.ndim
            reps[-3] = group
            k, v = np.tile(k, reps), np.tile(v, reps)
        else:
            k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * dt.type(scale)  # (..., L, E) @ (..., E, S)
    allowed = None
    if is_causal:
        allowed = np.tril(np.ones((L, S), dtype=bool))
    elif attn_mask is not None and attn_mask.dtype == bool:
        allowed = attn_mask
    elif attn_mask is not None:
        s = s + attn_mask
    if allowed is not None and bug != "mask_dropped":
        s = np.where(allowed, s, -np.inf)
    with np.errstate(all="ignore"):
        top = np.max(s, axis=-1, keepdims=True)
        e = np.exp(s - (top if bug == "nan_rows" else np.where(np.isfinite(top), top, 0)))
        total = np.sum(e, axis=-1, keepdims=True)
        P = (
            e / total
            if bug == "nan_rows"
            else np.where(total > 0, e / np.where(total > 0, total, 1), 0)
        )
        if bug == "block_softmax":  # softmax within each key block of 16
            parts = []
            for j in range(0, S, 16):
                b = s[..., j : j + 16]
                t = np.max(b, axis=-1, keepdims=True)
                eb = np.exp(b - np.where(np.isfinite(t), t, 0))
                tb = np.sum(eb, axis=-1, keepdims=True)
                parts.append(np.where(tb > 0, eb / np.where(tb > 0, tb, 1), 0))
            P = np.concatenate(parts, axis=-1)
        keep = None
        if dropout_mask is not None and bug != "dropout_none":
            factor = 1.0 if bug == "dropout_unscaled" else 1.0 / (1.0 - dropout_p)
            keep = np.where(dropout_mask, dt.type(factor), dt.type(0))
        if bug == "fresh_dropout" and dropout_mask is not None:
            fresh = np.random.default_rng().random(dropout_mask.shape) >= dropout_p
            keep = np.where(fresh, dt.type(1.0 / (1.0 - dropout_p)), dt.type(0))
        Pd = P if keep is None else P * keep
        O = Pd @ v  # (..., L, S) @ (..., S, Ev)
        dV = np.swapaxes(Pd, -1, -2) @ dO  # (..., S, L) @ (..., L, Ev)
        dPd = dO @ np.swapaxes(v, -1, -2)  # (..., L, Ev) @ (..., Ev, S)
        dP = dPd if keep is None or bug == "dropout_dp" else dPd * keep
        D = np.sum(dO * O, axis=-1, keepdims=True)
        if bug == "no_d":
            D = dt.type(0)
        elif bug == "d_before_dropout":
            D = np.sum(P * dPd, axis=-1, keepdims=True)
        elif bug == "d_elementwise":
            D = P * dP
        elif bug == "d_over_queries":
            D = np.sum(P * dP, axis=-2, keepdims=True)
        dS = P * (D - dP) if bug == "sign" else P * (dP - D)
        dS_q = np.swapaxes(dS, -1, -2) if bug == "ds_transposed" else dS
        dS_k = dS if bug == "ds_transposed" else np.swapaxes(dS, -1, -2)
        sq = {"no_scale_dq": 1.0, "no_scale": 1.0, "scale_twice_dq": scale * scale}
        sk = {"no_scale_dk": 1.0, "no_scale": 1.0, "scale_twice_dk": scale * scale}
        dQ = dS_q @ (v if bug == "dq_from_v" else k) * dt.type(sq.get(bug, scale))
        dK = dS_k @ q * dt.type(sk.get(bug, scale))
    if k.ndim >= 3 and k.shape[-3] != kv_heads:
        H = k.shape[-3]
        group = H // kv_heads
        if bug == "gqa_first_head":
            dK, dV = dK[..., ::group, :, :], dV[..., ::group, :, :]
        elif bug == "gqa_interleaved":
            dK = dK.reshape(dK.shape[:-3] + (group, kv_heads) + dK.shape[-2:]).sum(axis=-4)
            dV = dV.reshape(dV.shape[:-3] + (group, kv_heads) + dV.shape[-2:]).sum(axis=-4)
        elif bug == "gqa_not_summed":
            pass  # dK, dV keep the query's head count
        else:
            dK = dK.reshape(dK.shape[:-3] + (kv_heads, group) + dK.shape[-2:]).sum(axis=-3)
            dV = dV.reshape(dV.shape[:-3] + (kv_heads, group) + dV.shape[-2:]).sum(axis=-3)
            if bug == "gqa_mean":
                dK, dV = dK / group, dV / group
    if bug == "swapped":
        return dQ.astype(dt), dV.astype(dt), dK.astype(dt)
    return dQ.astype(dt), dK.astype(dt), dV.astype(dt)


def numpy_backward(bug: str | None = None):
    """A numpy backward kernel with `bug` planted (None: correct)."""

    def backward(
        q,
        k,
        v,
        grad_output,
        attn_mask=None,
        is_causal=False,
        scale=None,
        enable_gqa=False,
        dropout_p=0.0,
        dropout_mask=None,
    ):
        if bug == "in_place":
            q *= 1.0
            grad_output *= 2.0
        args = (attn_mask, is_causal, scale, enable_gqa, dropout_p, dropout_mask, bug)
        return _np_grads(q, k, v, grad_output, *args)

    backward.__name__ = backward.__qualname__ = f"numpy_backward_{bug or 'correct'}"
    return backward


def _torch_scores(q, k, v, attn_mask, is_causal, scale, enable_gqa):
    """(masked scaled scores, k, v with GQA heads repeated) in q's dtype."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    if enable_gqa and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    s = q @ k.transpose(-1, -2) * scale  # (..., L, E) @ (..., E, S)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        s = s.masked_fill(~attn_mask, -math.inf)
    elif attn_mask is not None:
        s = s + attn_mask.to(s.dtype)
    return s, k, v, scale


def torch_explicit_backward(
    q,
    k,
    v,
    grad_output,
    attn_mask=None,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    dropout_p=0.0,
    dropout_mask=None,
):
    """The backward written out in torch: sums in float32 for 16-bit inputs, outputs stored."""
    dt = q.dtype
    wide = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    kv_heads = k.shape[-3] if k.dim() >= 3 else 1
    q, k, v, dO = (x.to(wide) for x in (q, k, v, grad_output))
    s, k, v, scale = _torch_scores(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    top = s.amax(dim=-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    total = e.sum(dim=-1, keepdim=True)
    P = torch.where(total > 0, e / torch.where(total > 0, total, torch.ones_like(total)), 0.0)
    keep = None
    if dropout_mask is not None:
        keep = dropout_mask.to(wide) / (1.0 - dropout_p)
    Pd = P if keep is None else P * keep
    O = (Pd @ v).to(dt).to(wide)  # the forward's output, as stored
    dV = Pd.transpose(-1, -2) @ dO  # (..., S, L) @ (..., L, Ev)
    dP = dO @ v.transpose(-1, -2)  # (..., L, Ev) @ (..., Ev, S)
    if keep is not None:
        dP = dP * keep
    D = (dO * O).sum(dim=-1, keepdim=True)
    dS = P * (dP - D)
    dQ = dS @ k * scale
    dK = dS.transpose(-1, -2) @ q * scale
    if k.dim() >= 3 and k.shape[-3] != kv_heads:
        group = k.shape[-3] // kv_heads
        dK = dK.reshape(dK.shape[:-3] + (kv_heads, group) + dK.shape[-2:]).sum(dim=-3)
        dV = dV.reshape(dV.shape[:-3] + (kv_heads, group) + dV.shape[-2:]).sum(dim=-3)
    return dQ.to(dt), dK.to(dt), dV.to(dt)


def torch_manual_forward(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """A textbook torch forward (for autograd): softmax(q k^T scale + mask) v."""
    s, k, v, _ = _torch_scores(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    wide = s.float() if s.dtype in (torch.float16, torch.bfloat16) else s  # float32 sums
    w = torch.softmax(wide, dim=-1)
    w = torch.nan_to_num(w, nan=0.0).to(q.dtype)  # a fully masked row: zero weights
    return w @ v


# module-level kernels for the command line (`--backward tests.backward_kernels:NAME`)
correct_numpy_backward = numpy_backward()
no_d_numpy_backward = numpy_backward("no_d")

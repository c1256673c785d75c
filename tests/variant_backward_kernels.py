"""Variant backward kernels in outside styles, one mistake per `bug` (None: correct).

A FlashAttention-2 tiled backward taking FlashAttention's keywords (a forward pass for O and
lse, then key tiles outer, query tiles inner, P recomputed from lse, D = rowsum(dO * O)), and
torch autograd through an explicit torch attention that calls FlexAttention-style mods on
broadcast index tensors (FlexAttention itself has no backward on CPU in torch 2.13).
"""

from __future__ import annotations

import math

import numpy as np

from tests.variant_kernels import rope_inputs, turn


def _tile_scores(q, k, i0, i1, j0, j1, L, S, sm, causal, window, softcap, slopes, doc, shift,
                 bug):  # fmt: skip
    """(raw scaled scores, scores after softcap / ALiBi and the mask) of one tile."""
    rows = np.arange(i0, i1)[:, None] + shift
    cols = np.arange(j0, j1)[None, :]
    raw = q[..., i0:i1, :] @ np.swapaxes(k[..., j0:j1, :], -1, -2) * q.dtype.type(sm)
    s = raw
    if softcap:
        s = softcap * np.tanh(raw / softcap)
    if slopes is not None:
        sign = -1 if bug == "alibi-sign" else 1
        s = s + sign * slopes[None, :, None, None] * (cols - rows).astype(q.dtype)
    left, right = window
    if causal:
        right = 0
    ok = np.ones((i1 - i0, j1 - j0), dtype=bool)
    if left >= 0:
        ok &= (cols > rows - left) if bug == "window-left-short" else (cols >= rows - left)
    if right >= 0:
        ok &= cols <= rows + right
    if doc is not None:
        ok &= doc[cols] == doc[rows]
    return raw, np.where(ok, s, -np.inf)


def flash2_variants_backward(q, k, v, grad_output, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, sinks=None, cu_seqlens_q=None,
                             cu_seqlens_k=None, rotary_cos=None, rotary_sin=None,
                             rotary_interleaved=False, *, bq=16, bk=16, bug=None):  # fmt: skip
    """(dq, dk, dv[, dsinks]): FlashAttention-2's backward, tile by tile."""
    q0, k0, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q0.dtype.type
    do = np.asarray(grad_output)
    q, k = rope_inputs(q0, k0, rotary_cos, rotary_sin, rotary_interleaved, None)
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    g = H // Hkv
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    sm = 1.0 / math.sqrt(E)
    shift = 0 if bug == "decode-top-left" else S - L
    doc = None
    if cu_seqlens_k is not None:
        doc = np.searchsorted(np.asarray(cu_seqlens_k), np.arange(S), side="right") - 1
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, dtype=dt)
    args = (L, S, sm, causal, window_size, softcap, slopes, doc, shift, bug)
    with np.errstate(all="ignore"):
        # forward: O and lse per row (the sink counts in lse)
        _, s = _tile_scores(q, k, 0, L, 0, S, *args)
        m = s.max(-1, keepdims=True)
        if sinks is not None and bug != "sink-out":
            m = np.maximum(m, np.asarray(sinks, dtype=dt)[None, :, None, None])
        total = np.exp(s - m).sum(-1, keepdims=True)
        if sinks is not None and bug != "sink-out":
            total = total + np.exp(np.asarray(sinks, dtype=dt)[None, :, None, None] - m)
        lse = m + np.log(total)
        o = np.exp(s - lse) @ v
        D = (do * o).sum(-1, keepdims=True)  # (B, H, L, 1)
        dq = np.zeros_like(q)
        dk, dv = np.zeros_like(k), np.zeros_like(v)
        for j0 in range(0, S, bk):
            j1 = min(j0 + bk, S)
            for i0 in range(0, L, bq):
                i1 = min(i0 + bq, L)
                raw, s = _tile_scores(q, k, i0, i1, j0, j1, *args)
                p = np.exp(s - lse[..., i0:i1, :])  # (B, H, Bq, Bk), P from the stored lse
                dv[..., j0:j1, :] += np.swapaxes(p, -1, -2) @ do[..., i0:i1, :]
                dp = do[..., i0:i1, :] @ np.swapaxes(v[..., j0:j1, :], -1, -2)
                ds = p * (dp - D[..., i0:i1, :])
                if softcap and bug != "softcap-grad":
                    ds = ds * (1 - np.tanh(raw / softcap) ** 2)
                dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * dt(sm)
                dk[..., j0:j1, :] += np.swapaxes(ds, -1, -2) @ q[..., i0:i1, :] * dt(sm)
        dk = dk.reshape(B, Hkv, g, S, E).sum(2)
        dv = dv.reshape(B, Hkv, g, S, v.shape[-1]).sum(2)
        if rotary_cos is not None and bug != "rope-unturned":  # turn back by -angle
            first = S - L
            inter = bool(rotary_interleaved)
            dq = turn(dq, rotary_cos[first:], -rotary_sin[first:], inter)
            dk = turn(dk, rotary_cos[:S], -rotary_sin[:S], inter)
        if sinks is None:
            return dq, dk, dv
        p_sink = np.exp(np.asarray(sinks, dtype=dt)[None, :, None, None] - lse)
        return dq, dk, dv, -(p_sink * D).sum(axis=(0, 2, 3))


def torch_autograd_backward(q, k, v, grad_output, score_mod=None, mask_mod=None, sinks=None,
                            rotary_cos=None, rotary_sin=None, rotary_interleaved=False,
                            enable_gqa=False, *, bug=None):  # fmt: skip
    """torch.autograd.grad through softmax(score_mod(q k^T scale), masked by mask_mod) @ v."""
    import torch

    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    sink = None if sinks is None else sinks.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        q1, k1 = rope_inputs(leaves[0], leaves[1], rotary_cos, rotary_sin, rotary_interleaved,
                             bug)  # fmt: skip
        B, H, L, E = q1.shape
        S = k1.shape[2]
        g = H // k1.shape[1]
        kk, vv = k1.repeat_interleave(g, dim=1), leaves[2].repeat_interleave(g, dim=1)
        s = q1 @ kk.transpose(-1, -2) / math.sqrt(E)  # (B, H, L, S)
        b = torch.arange(B).view(B, 1, 1, 1)
        h = torch.arange(H).view(1, H, 1, 1)
        i = torch.arange(L).view(1, 1, L, 1)
        j = torch.arange(S).view(1, 1, 1, S)
        if score_mod is not None:
            s = score_mod(s, b, h, i, j)
        if mask_mod is not None:
            s = s.masked_fill(~mask_mod(b, h, i, j).expand(s.shape), float("-inf"))
        if sink is not None:
            s = torch.cat([s, sink.view(1, H, 1, 1).expand(B, H, L, 1)], dim=-1)
        w = torch.softmax(s, dim=-1)[..., :S]
        out = w @ vv
        wanted = leaves + ([] if sink is None else [sink])
        return torch.autograd.grad(out, wanted, grad_output)

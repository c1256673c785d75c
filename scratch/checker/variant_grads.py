"""A variant case's gradients in NumPy (dq, dk, dv, dsinks), correct or with one mistake
planted: variant_numpy's forward written backward, the same Planted changes. In float64 the
backward diagnosis's family; in the checked dtype the correct reference backward kernels
(FlashAttention-2's 16-bit roundings: P and dS rounded before their gemms, or eager's).
"""

from __future__ import annotations

import numpy as np

from scratch.bounds.tolerance import ACCUMULATE
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_numpy import (
    CORRECT,
    Planted,
    VariantData,
    keep,
    narrowed,
    scores,
    turn_pair,
    turned,
)

GRADS = ("grad_query", "grad_key", "grad_value", "grad_sinks")


def grads(
    case: VariantCase,
    d: VariantData,
    d_out: np.ndarray,
    p: Planted = CORRECT,
    *,
    dtype: str = "float64",
    d_from_output: bool = True,
    eager: bool = False,
) -> list[np.ndarray]:
    """[dq (1, H, L, E), dk (1, Hkv, S, E), dv (1, Hkv, S, Ev)] (+ dsinks (H,)) as float64.

    P recomputed from the scores (the case's mask, score changes and sinks), then
        dV = P^T dO          dP = dO V^T          D = rowsum(dO * O) (= rowsum(P * dP))
        dS = P (dP - D)      dR = dS * score_mod'(raw)    (softcap: 1 - tanh^2(raw / cap))
        dQ = scale dR K      dK = scale dR^T Q    dsink[h] = -sum_i p_sink[i] D[i]
    with RoPE's gradients turned back by -angle; GQA heads summed into their kv head. In a
    16-bit dtype P and dS are rounded before their gemms and O, the forward's, is stored in 16
    bits (FlashAttention-2); `eager` rounds every intermediate (torch autograd in 16 bits)."""
    acc = np.dtype(ACCUMULATE[dtype]).type
    narrow = narrowed(dtype)
    step = narrow if eager else None  # where eager attention also rounds
    with np.errstate(all="ignore"):
        s, v = scores(case, d, p, acc, step)  # (1, H, L, S) masked, v repeated to H heads
        q, k = turned(case, d, p, acc, step)
        H, Hkv = q.shape[1], k.shape[1]
        group = H // Hkv
        k = np.repeat(k, group, axis=1)
        scale = acc(d.scale if p.scale is None else p.scale)
        raw = keep(keep(q @ np.swapaxes(k, -1, -2), step) * scale, step)  # before score changes
        top = s.max(-1, keepdims=True)
        sink = None
        if d.sinks is not None and not p.sink_out:
            sink = d.sinks.astype(acc)[None, :, None, None]  # (1, H, 1, 1)
            top = np.maximum(top, sink)
        total = np.exp(s - top).sum(-1, keepdims=True)
        if sink is not None:
            total = total + np.exp(sink - top)
        lse = top + np.log(total)
        w = keep(np.exp(s - lse), narrow)  # (1, H, L, S): weights, 0 where masked
        dout = d_out.astype(acc)
        out = keep(w @ v, narrow)  # (1, H, L, S) @ (1, H, S, Ev): the forward's output
        dp = keep(dout @ np.swapaxes(v, -1, -2), step)  # (1, H, L, Ev) @ (1, H, Ev, S)
        D = (
            (dout * out).sum(-1, keepdims=True)
            if d_from_output
            else (w * dp).sum(-1, keepdims=True)
        )
        ds = keep(w * (dp - D), step)
        cap = case.softcap if p.cap is None else p.cap
        if case.softcap is not None and not p.no_softcap and p.softcap_grad:
            ds = ds * keep(1 - keep(np.tanh(keep(raw / acc(cap), step)), step) ** 2, step)
        ds = keep(ds, narrow)  # dS fed to the dq and dk gemms in the kernel's dtype
        dq = (ds @ k) * scale  # (1, H, L, S) @ (1, H, S, E)
        dk = (np.swapaxes(ds, -1, -2) @ q) * scale  # (1, H, S, L) @ (1, H, L, E)
        dv = np.swapaxes(w, -1, -2) @ dout  # (1, H, S, L) @ (1, H, L, Ev)
        fold = lambda x: x.reshape((x.shape[0], Hkv, group) + x.shape[2:]).sum(2)  # noqa: E731
        dk, dv = fold(dk), fold(dv)
        if p.rope_grad:
            dq, dk = turn_pair(case, d, p, acc, *keep((dq, dk), step), sign=-1.0, narrow=step)
        found = [dq, dk, dv]
        if d.sinks is not None:
            p_sink = np.zeros_like(D) if sink is None else np.exp(sink - lse)
            found.append((-(p_sink * D)).sum(axis=(0, 2, 3)))  # (H,)
        return [keep(g, narrow).astype(np.float64) for g in found]


__all__ = ["GRADS", "grads"]

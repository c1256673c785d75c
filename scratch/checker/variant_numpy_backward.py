"""A variant case's gradients in NumPy, correct or with one mistake planted (`Planted`).

For one case: P recomputed from the scores (the case's mask, score changes and sinks), then
    dV = P^T dO          dP = dO V^T          D = rowsum(dO * O) (= rowsum(P * dP))
    dS = P (dP - D)      dR = dS * score_mod'(raw)    (softcap: 1 - tanh^2(raw / cap))
    dQ = scale dR K      dK = scale dR^T Q    dsink[h] = -sum_i p_sink[i] D[i]
with RoPE's gradients turned back by -angle; GQA heads summed into their kv head.
"""

from __future__ import annotations

import numpy as np

from .variant_cases import VariantCase
from .variant_numpy import CORRECT, Planted, VariantData, scores, turn_pair, turned

GRADS = ("grad_query", "grad_key", "grad_value", "grad_sinks")


def grads(
    case: VariantCase,
    d: VariantData,
    d_out: np.ndarray,
    p: Planted = CORRECT,
    *,
    dtype: str = "float64",
    d_from_output: bool = True,
) -> list[np.ndarray]:
    """[dq (1, H, L, E), dk (1, Hkv, S, E), dv (1, Hkv, S, Ev)] (+ dsinks (H,)) as float64."""
    acc = np.float64 if dtype == "float64" else np.float32
    with np.errstate(all="ignore"):
        s, v = scores(case, d, p, acc)  # (1, H, L, S) masked, v repeated to H heads
        q, k = turned(case, d, p, acc)
        H, Hkv = q.shape[1], k.shape[1]
        group = H // Hkv
        k = np.repeat(k, group, axis=1)
        raw = (q @ np.swapaxes(k, -1, -2)) * acc(d.scale)  # (1, H, L, S) before score changes
        top = s.max(-1, keepdims=True)
        sink = None
        if d.sinks is not None and not p.sink_out:
            sink = d.sinks.astype(acc)[None, :, None, None]  # (1, H, 1, 1)
            top = np.maximum(top, sink)
        total = np.exp(s - top).sum(-1, keepdims=True)
        if sink is not None:
            total = total + np.exp(sink - top)
        lse = top + np.log(total)
        w = np.exp(s - lse)  # (1, H, L, S): weights, 0 where masked
        dout = d_out.astype(acc)
        out = w @ v  # (1, H, L, S) @ (1, H, S, Ev)
        dp = dout @ np.swapaxes(v, -1, -2)  # (1, H, L, Ev) @ (1, H, Ev, S)
        D = (
            (dout * out).sum(-1, keepdims=True)
            if d_from_output
            else (w * dp).sum(-1, keepdims=True)
        )
        ds = w * (dp - D)
        cap = case.softcap if p.cap is None else p.cap
        if case.softcap is not None and not p.no_softcap and p.softcap_grad:
            ds = ds * (1 - np.tanh(raw / acc(cap)) ** 2)
        dq = (ds @ k) * acc(d.scale)  # (1, H, L, S) @ (1, H, S, E)
        dk = (np.swapaxes(ds, -1, -2) @ q) * acc(d.scale)  # (1, H, S, L) @ (1, H, L, E)
        dv = np.swapaxes(w, -1, -2) @ dout  # (1, H, S, L) @ (1, H, L, Ev)
        fold = lambda x: x.reshape((1, Hkv, group) + x.shape[2:]).sum(2)  # noqa: E731
        dk, dv = fold(dk), fold(dv)
        if p.rope_grad:
            dq, dk = turn_pair(case, d, p, acc, dq, dk, sign=-1.0)
        found = [dq, dk, dv]
        if d.sinks is not None:
            p_sink = np.zeros_like(D) if sink is None else np.exp(sink - lse)
            found.append((-(p_sink * D)).sum(axis=(0, 2, 3)))  # (H,)
        return [g.astype(np.float64) for g in found]


__all__ = ["GRADS", "grads"]

"""The ground truth's FlexAttention backward: dQ, dK, dV (and d sinks) for any variant, exact.

For one query row, with p = weights, s = scores after score_mod and r = raw scaled scores:
  dV[j]  += p[j] * dO                 dP[j] = dO . v[j]
  D       = sum_j p[j] * dP[j]        (= dO . output; the sink has no value, so no dP term)
  dS[j]   = p[j] * (dP[j] - D)        softmax's backward
  dR[j]   = dS[j] * score_mod'(r[j])  the score change's derivative, by dual numbers (dual.py)
  dQ     += scale * sum_j dR[j] k[j]  dK[j] += scale * dR[j] q
  dsink[h] += -p_sink * D             the sink is a column with score sink[h] and value 0
Every sum is one math.fsum over all its terms (for dK and dV: over every query row, and every
query head of a GQA group). Masked keys and rows that see nothing get gradient 0.
"""

from __future__ import annotations

from collections.abc import Callable
from math import fsum

from .flex import BlockMask, head, prepare, row
from .validate import as_tensor
from .variants.dual import derivative


def flex_attention_backward(
    query: object,
    key: object,
    value: object,
    grad_output: object,
    score_mod: Callable[..., float] | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    sinks: object = None,
) -> tuple:
    """(grad_query, grad_key, grad_value), plus grad_sinks (one per head) when sinks are given."""
    x = prepare(query, key, value, score_mod, block_mask, scale, enable_gqa, sinks)
    B, H, Hkv, L, S, E, Ev = x.shape
    d_out, ds = as_tensor(grad_output, "grad_output", min_dims=0)
    if ds != (B, H, L, Ev):
        raise ValueError(f"grad_output: expected the output's shape {(B, H, L, Ev)}, found {ds}")
    grad_q = [[[None] * L for _ in range(H)] for _ in range(B)]
    dk_terms = [[[[[] for _ in range(E)] for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]
    dv_terms = [[[[[] for _ in range(Ev)] for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]
    sink_terms = [[] for _ in range(H)]
    for b in range(B):
        for h in range(H):
            kv, steps = h // x.group, head(x, b, h)
            for i in range(L):
                r, d_o, q_i = row(steps, i, x.scale), d_out[b][h][i], x.q[b][h][i]
                d_p = [fsum(a * c for a, c in zip(d_o, x.v[b][kv][j])) for j in r.keys]
                D = fsum(p * dp for p, dp in zip(r.weights, d_p))
                d_r = []
                for p, dp, raw, j in zip(r.weights, d_p, r.raw, r.keys):
                    grad = 1.0 if x.score_mod is None else derivative(x.score_mod, raw, b, h, i, j)
                    d_r.append(p * (dp - D) * grad)
                for dr, p, j in zip(d_r, r.weights, r.keys):
                    for c in range(E):
                        dk_terms[b][kv][j][c].append(dr * q_i[c])
                    for c in range(Ev):
                        dv_terms[b][kv][j][c].append(p * d_o[c])
                grad_q[b][h][i] = [
                    x.scale * fsum(dr * x.k[b][kv][j][c] for dr, j in zip(d_r, r.keys))
                    for c in range(E)
                ]
                if x.sinks is not None:
                    sink_terms[h].append(-r.sink_weight * D)
    grad_k = [
        [[[x.scale * fsum(t) for t in key_j] for key_j in head] for head in batch]
        for batch in dk_terms
    ]
    grad_v = [
        [[[fsum(t) for t in key_j] for key_j in head] for head in batch] for batch in dv_terms
    ]
    if x.sinks is None:
        return grad_q, grad_k, grad_v
    return grad_q, grad_k, grad_v, [fsum(t) for t in sink_terms]


__all__ = ["flex_attention_backward"]

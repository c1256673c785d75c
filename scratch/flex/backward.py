"""The ground truth's FlexAttention backward: dQ, dK, dV (and d sinks) for any variant, exact.

Each head's gradients come from the head kernel's backward (scratch.core.attention.attend_backward,
flex=True) on its forward (scratch.flex.forward.head). For one query row, with p = weights, s =
scores
after score_mod and r = raw scaled scores, over the keys the row saw:
  dV[j]  += p[j] * dO                 dP[j] = dO . v[j]
  D       = sum_j p[j] * dP[j]        (the sink has no value, so no dP term)
  dS[j]   = p[j] * (dP[j] - D)        softmax's backward
  dR[j]   = dS[j] * score_mod'(r[j])  the score change's derivative, by dual numbers (dual.py)
  dQ     += scale * sum_j dR[j] k[j]  dK[j] += scale * dR[j] q
  dsink[h] += -p_sink * D             the sink is a column with score sink[h] and value 0
Every sum is one math.fsum over all its terms (for dK and dV: over every query row, and every
query head of a GQA group; for d sink: over every batch and row). Masked keys and rows that see
nothing get gradient 0.
"""

from __future__ import annotations

from math import fsum

from scratch.core.attention import attend_backward, key_value_grads
from scratch.core.front_doors import flex_backward_door
from scratch.core.options import FlexOptions
from scratch.flex.forward import head, prepare
from scratch.ops.validate import as_tensor, check_grad_output


def gradients_of(
    query: object, key: object, value: object, grad_output: object, options: FlexOptions
) -> tuple:
    """The gradients of flex_attention's inputs for grad_output, in plain Python.

    Returns:
        (grad_query (B, H, L, E), grad_key (B, Hkv, S, E), grad_value (B, Hkv, S, Ev)), plus
        grad_sinks (one per head) when sinks are given.
    """
    x = prepare(query, key, value, options)
    B, H, Hkv, L, _, _, Ev = x.shape
    d_out, ds = as_tensor(grad_output, "grad_output", min_dims=0)
    check_grad_output(ds, (B, H, L, Ev))
    grad_q, grad_k, grad_v, sink_terms = [], [], [], [[] for _ in range(H)]
    for b in range(B):
        heads = []  # one Gradients per query head of batch b
        for h in range(H):
            kv = h // x.group
            q, k, v = x.q[b][h], x.k[b][kv], x.v[b][kv]
            steps = head(x, b, h)
            heads.append(
                attend_backward(
                    steps, q, k, v, d_out[b][h], x.scale, b=b, h=h, score_mod=x.score_mod,
                    flex=True,
                )
            )  # fmt: skip
            if x.sinks is not None:
                sink_terms[h].extend(heads[-1].grad_sink)
        grad_q.append([g.grad_query for g in heads])
        # a kv head's dK and dV: one fsum over every row of every query head in its group
        kv_grads = [key_value_grads(heads[g * x.group : (g + 1) * x.group], x.scale)
                    for g in range(Hkv)]  # fmt: skip
        grad_k.append([dK for dK, _ in kv_grads])
        grad_v.append([dV for _, dV in kv_grads])
    if x.sinks is None:
        return grad_q, grad_k, grad_v
    return grad_q, grad_k, grad_v, [fsum(t) for t in sink_terms]


flex_attention_backward = flex_backward_door(gradients_of)


__all__ = ["flex_attention_backward"]

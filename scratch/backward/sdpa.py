"""The backward pass of scaled dot-product attention in plain Python: exact gradients.

The forward, for one head (attention.py): S = scale * Q K^T + mask, P = softmax(S), P_d = P
after dropout (kept entries times 1 / (1 - p)), O = P_d V. Given dO, the gradient of a loss
with respect to O, the chain rule gives (the notation of FlashAttention-2's backward):

    dV = P_d^T dO            the value rows, weighted by how much each query used them
    dP_d = dO V^T            how the loss changes with each weight after dropout
    dP = dP_d * keep / (1-p) dropout's own mask and scale, reused from the forward
    D_i = sum_c dO_ic O_ic   one number per query row (= sum_j P_ij dP_ij)
    dS = P * (dP - D)        softmax's Jacobian applied row by row; 0 wherever P is 0
    dQ = scale * dS K
    dK = scale * dS^T Q

With grouped-query attention, dK and dV of one key/value head sum the contributions of every
query head that reads it. Every sum is an `fsum`, so each gradient entry is the correctly
rounded sum of its (individually rounded) terms.

Rows whose keys are all masked follow `masked_rows`, as in the forward:
- "zero": P = 0, so the row contributes nothing anywhere (its dQ is 0, never NaN);
- "uniform": P = 1/S is a constant (what a finite -1e9 fill gives: no gradient reaches the
  filled scores), so dS = 0 for the row and dV still receives dO_i / S;
- "nan": P is NaN and so are dQ_i and, through the sums over rows, every entry of dK and dV
  (IEEE arithmetic, what autograd through a textbook softmax of all -inf gives).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import product

from scratch.core.attention import (
    Gradients,
    Head,
    Matrix,
    attend,
    attend_backward,
    dropout_keep,
    key_value_grads,
    prepare,
)
from scratch.core.front_doors import backward_door
from scratch.core.masks import Mask
from scratch.core.options import Options
from scratch.ops.nested import at, stack
from scratch.ops.validate import as_tensor

NO_OPTIONS = Options()  # no mask kind, no dropout, masked_rows "zero"


def backward_head(
    head: Head,
    grad_output: Matrix,
    scale: float,
    mask: Mask | None = None,
    options: Options = NO_OPTIONS,
) -> Gradients:
    """Gradients of one head on validated head.q (L, E), head.k (S, E), head.v (S, Ev) and
    grad_output (L, Ev): the head kernel's forward (no dropout), dropout's factors drawn again
    from options.rng, then its backward (scratch.core.attention.attend_backward)."""
    q, k, v, masked_rows = head.q, head.k, head.v, options.masked_rows
    added = mask is not None and not mask.is_bool
    forward = attend(q, k, v, scale, head.mask_rows, masked_rows, added=added)  # P, no dropout
    keep = dropout_keep(len(q), len(k), options.dropout_p, options.rng)
    return attend_backward(forward, q, k, v, grad_output, scale, masked_rows, keep)


def backward_heads(
    heads: Iterable[tuple[Head, Matrix]], scale: float, mask: Mask | None, options: Options
) -> tuple[list[Gradients], dict[tuple[int, ...], tuple[Matrix, Matrix]]]:
    """backward_head for each (head, dO) in order (the order the forward drew its dropout in),
    and each kv head's (dK, dV): one fsum over the rows of every query head that reads it."""
    grads, shares = [], {}
    for head, grad_output in heads:
        grads.append(backward_head(head, grad_output, scale, mask, options))
        shares.setdefault(head.kv, []).append(grads[-1])
    return grads, {kv: key_value_grads(group, scale) for kv, group in shares.items()}


def gradients_of(
    query: object, key: object, value: object, grad_output: object, options: Options
) -> tuple[list, list, list]:
    """The gradients of scaled_dot_product_attention's inputs for grad_output, in plain Python.

    Same arguments as the forward; the same `rng` state reproduces the forward's dropout mask.

    Returns:
        (grad_query (..., L, E), grad_key (..., S, E), grad_value (..., S, Ev)).
    """
    p = prepare(query, key, value, options)
    plan = p.plan
    g, g_shape = as_tensor(grad_output, "grad_output", min_dims=2)
    plan.check_grad_output(g_shape)
    heads = ((h, at(g, h.index)) for h in p.heads())  # dO (L, Ev) of each head, row-major
    grads, kv = backward_heads(heads, p.scale, p.mask, options)
    kv_heads = [kv[i] for i in product(*map(range, plan.kv_lead))]  # each read by >= 1 head
    grad_key, grad_value = [dK for dK, _ in kv_heads], [dV for _, dV in kv_heads]
    grad_query = stack([h.grad_query for h in grads], plan.lead)
    return grad_query, stack(grad_key, plan.kv_lead), stack(grad_value, plan.kv_lead)


scaled_dot_product_attention_backward = backward_door(gradients_of)

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

import random
from dataclasses import dataclass
from itertools import product

from .attention import Head, attend, prepare
from .front_doors import backward_door
from .linalg import dot, matmul_nt, transpose_rows
from .masks import Mask
from .nested import at, stack
from .options import Options
from .validate import as_tensor

Matrix = list[list[float]]
NO_OPTIONS = Options()  # no mask kind, no dropout, masked_rows "zero"


@dataclass
class Gradients:
    """The backward steps of one (L, S) head, named as in the module doc."""

    query: Matrix  # Q (L, E)
    weights: Matrix  # P (L, S), before dropout
    dropped: Matrix  # P_d (L, S), after dropout
    output: Matrix  # O (L, Ev)
    grad_output: Matrix  # dO (L, Ev)
    grad_value: Matrix  # dV (S, Ev), this query head's share
    grad_weights: Matrix  # dP (L, S)
    row_dot: list[float]  # D (L,)
    grad_scores: Matrix  # dS (L, S), with respect to the masked, scaled scores
    grad_query: Matrix  # dQ (L, E)
    grad_key: Matrix  # dK (S, E), this query head's share
    live: list[int]  # the rows that take part (all but fully masked rows under "zero")
    grad_dropped: Matrix | None = None  # dP_d = dO V^T (L, S), before dropout's factors

    def rows(self) -> tuple:
        """(P_d, dO, dS, Q, live rows): what key_value_grads needs from this head."""
        return self.dropped, self.grad_output, self.grad_scores, self.query, self.live


def _dropout_keep(
    L: int, S: int, dropout_p: float, rng: random.Random | None
) -> list[list[float]] | None:
    """The forward's dropout factors (0 or 1/(1-p)), drawn in the forward's row-major order."""
    if dropout_p == 0.0:
        return None
    rng = rng if rng is not None else random
    keep = 1.0 / (1.0 - dropout_p)
    return [[0.0 if rng.random() < dropout_p else keep for _ in range(S)] for _ in range(L)]


def backward_head(
    head: Head,
    grad_output: Matrix,
    scale: float,
    mask: Mask | None = None,
    options: Options = NO_OPTIONS,
) -> Gradients:
    """Gradients of one head on validated head.q (L, E), head.k (S, E), head.v (S, Ev) and
    grad_output (L, Ev); `options` gives masked_rows and the dropout (dropout_p, drawn from rng).
    """
    q, k, v, mask_rows, masked_rows = head.q, head.k, head.v, head.mask_rows, options.masked_rows
    added = mask is not None and not mask.is_bool
    forward = attend(q, k, v, scale, mask_rows, masked_rows, added=added)  # P without dropout
    P, full = forward.weights, forward.fully_masked  # (L, S), (L,)
    L, S = len(P), len(P[0])
    keep = _dropout_keep(L, S, options.dropout_p, options.rng)
    # a fully masked row under "zero" takes no part in the backward at all (never NaN)
    silent = [f and masked_rows == "zero" for f in full]
    # the forward's P_d and O = P_d V        (L, S) @ (S, Ev) -> (L, Ev)
    if keep is None:  # P_d = P: the forward's own output is O (zero on silent rows already)
        Pd, O = P, forward.output
    else:  # the forward above ran without dropout, so O = P_d V is one more product
        Pd = [[p * f for p, f in zip(r, kr)] for r, kr in zip(P, keep)]
        O = matmul_nt(Pd, transpose_rows(v))
        O = [[0.0] * len(row) if s else row for row, s in zip(O, silent)]
    # step 2: dP_d = dO V^T                  (L, Ev) @ (Ev, S) -> (L, S)
    grad_dropped = matmul_nt(grad_output, v)
    # step 3: dP = dP_d * keep / (1 - p)     (L, S); the forward's dropout mask, reused
    grad_weights = grad_dropped
    if keep is not None:
        grad_weights = [[g * f for g, f in zip(r, kr)] for r, kr in zip(grad_dropped, keep)]
    # step 4: D_i = sum_c dO_ic O_ic         (L,); equals sum_j P_ij dP_ij
    row_dot = [dot(g, o) for g, o in zip(grad_output, O)]
    # step 5: dS = P * (dP - D)              (L, S); a constant row (zero, uniform) gets 0
    grad_scores = [
        [0.0] * S if f and masked_rows != "nan" else [p * (g - d) for p, g in zip(Prow, grow)]
        for Prow, grow, d, f in zip(P, grad_weights, row_dot, full)
    ]
    # step 6: dQ = scale * dS K              (L, S) @ (S, E) -> (L, E)
    grad_query = [[scale * x for x in row] for row in matmul_nt(grad_scores, transpose_rows(k))]
    grad_query = [[0.0] * len(row) if s else row for row, s in zip(grad_query, silent)]
    # steps 1 and 7: dV = P_d^T dO and dK = scale * dS^T Q (this head's share of each)
    live = [i for i in range(L) if not silent[i]]
    grad_key, grad_value = key_value_grads([(Pd, grad_output, grad_scores, q, live)], scale)
    return Gradients(
        q,
        P,
        Pd,
        O,
        grad_output,
        grad_value,
        grad_weights,
        row_dot,
        grad_scores,
        grad_query,
        grad_key,
        live,
        grad_dropped,
    )


def key_value_grads(heads: list[tuple], scale: float) -> tuple[Matrix, Matrix]:
    """dK = scale * dS^T Q and dV = P_d^T dO summed over every query head that reads one kv head.

    `heads` holds (P_d, dO, dS, q, live rows) per query head; the rows of all of them are
    stacked first, so each entry is one fsum over every (head, row) term, not a sum of sums.
    """
    Pd = [P[i] for P, _, _, _, live in heads for i in live]  # (L', S)
    dO = [g[i] for _, g, _, _, live in heads for i in live]  # (L', Ev)
    dS = [d[i] for _, _, d, _, live in heads for i in live]  # (L', S)
    q = [x[i] for _, _, _, x, live in heads for i in live]  # (L', E)
    S, E, Ev = len(heads[0][0][0]), len(heads[0][3][0]), len(heads[0][1][0])
    if not Pd:  # every row silent ("zero" policy, all masked): no gradient reaches k or v
        return [[0.0] * E for _ in range(S)], [[0.0] * Ev for _ in range(S)]
    # (S, L') @ (L', Ev) -> (S, Ev)
    grad_value = matmul_nt(transpose_rows(Pd), transpose_rows(dO))
    # (S, L') @ (L', E) -> (S, E), then the scale (one more rounding, as in the forward)
    grad_key = [
        [scale * x for x in row] for row in matmul_nt(transpose_rows(dS), transpose_rows(q))
    ]
    return grad_key, grad_value


def gradients_of(
    query: object, key: object, value: object, grad_output: object, options: Options
) -> tuple[list, list, list]:
    """(grad_query, grad_key, grad_value) of scaled_dot_product_attention for grad_output.

    Same arguments as the forward; the same `rng` state reproduces the forward's dropout mask.
    """
    p = prepare(query, key, value, options)
    plan = p.plan
    g, g_shape = as_tensor(grad_output, "grad_output", min_dims=2)
    plan.check_grad_output(g_shape)
    grad_query = []
    kv_shares: dict[tuple[int, ...], list[Gradients]] = {}  # kv head -> its query heads
    for h in p.heads():  # row-major, as the forward draws its dropout
        head = backward_head(h, at(g, h.index), p.scale, p.mask, options)  # dO (L, Ev)
        grad_query.append(head.grad_query)
        kv_shares.setdefault(h.kv, []).append(head)
    grad_key, grad_value = [], []
    for i in product(*map(range, plan.kv_lead)):  # every kv head is read by >= 1 query head
        shares = kv_shares[i]
        if len(shares) == 1:
            dK, dV = shares[0].grad_key, shares[0].grad_value
        else:  # grouped-query attention: one fsum over the rows of every head in the group
            dK, dV = key_value_grads([h.rows() for h in shares], p.scale)
        grad_key.append(dK)
        grad_value.append(dV)
    kv_lead = plan.kv_lead
    return stack(grad_query, plan.lead), stack(grad_key, kv_lead), stack(grad_value, kv_lead)


scaled_dot_product_attention_backward = backward_door(gradients_of)

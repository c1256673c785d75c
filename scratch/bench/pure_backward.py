"""The plain-Python backward's rows: the ground truth's backward and its fsum kernel limit.

The limit is the sums no exact plain-Python backward can avoid (the weights recomputed from
q @ k^T, O = P @ v for D_i = sum_c dO_ic O_ic, dP, dQ, dK, dV), one fsum per entry; like the
forward's limit it leaves out softmax and the elementwise steps.
"""

from __future__ import annotations

from collections.abc import Callable
from math import fsum
from operator import mul

TRUTH_ROW = "ground truth backward (scratch)"
LIMIT_ROW = "pure-Python backward kernel limit"
PYTHON_BACKWARD_PAIR = (TRUTH_ROW, LIMIT_ROW)
GOAL = 0.85  # the ground truth's backward at >= this x its limit's speed, at L = 256


def python_backward_limit(q: list, k: list, v: list, dO: list, P: list, dS: list) -> list:
    """The six matrix products and D of the backward, as fsum dot products (one head)."""
    scores = [[fsum(map(mul, q_i, k_j)) for k_j in k] for q_i in q]  # (L, E) @ (E, S)
    v_t = list(zip(*v))  # (Ev, S)
    output = [[fsum(map(mul, p_i, v_c)) for v_c in v_t] for p_i in P]  # (L, S) @ (S, Ev)
    row_dot = [fsum(map(mul, g_i, o_i)) for g_i, o_i in zip(dO, output)]  # (L,)
    grad_weights = [[fsum(map(mul, g_i, v_j)) for v_j in v] for g_i in dO]  # (L, Ev) @ (Ev, S)
    k_t = list(zip(*k))  # (E, S)
    grad_query = [[fsum(map(mul, d_i, k_c)) for k_c in k_t] for d_i in dS]  # (L, S) @ (S, E)
    q_t, dO_t = list(zip(*q)), list(zip(*dO))  # (E, L), (Ev, L)
    grad_key = [[fsum(map(mul, d_j, q_c)) for q_c in q_t] for d_j in zip(*dS)]  # (S, L) @ (L, E)
    grad_value = [[fsum(map(mul, p_j, g_c)) for g_c in dO_t] for p_j in zip(*P)]  # (S, L) @ (L, Ev)
    return [scores, output, row_dot, grad_weights, grad_query, grad_key, grad_value]


def backward_contenders(q: list, k: list, v: list, dO: list) -> list[tuple[str, Callable, str]]:
    """The two rows on one head's lists; the limit multiplies the ground truth's own P and dS."""
    import scratch
    from scratch.backward.sdpa import backward_head
    from scratch.core.attention import Head
    from scratch.core.options import Options

    scale = Options().scale_for(len(q[0]))  # the default 1/sqrt(E), as the timed call uses
    head = backward_head(Head((), (), q, k, v, None), dO, scale)
    P, dS = head.weights, head.grad_scores
    return [
        (TRUTH_ROW, lambda: scratch.scaled_dot_product_attention_backward(q, k, v, dO), "n/a"),
        (LIMIT_ROW, lambda: python_backward_limit(q, k, v, dO, P, dS), "n/a"),
    ]

"""The ground truth's backward, entry by entry, against its definition in exact arithmetic.

Every sum of the backward is the correctly rounded sum of its (individually rounded) products
(scratch.backward.sdpa's module doc). Here each one is recomputed as a Fraction (exact) and rounded
once by float(), independently of scratch.ops.linalg; the elementwise steps (dropout's factors,
dS = P * (dP - D), the scale) are the same float operations. So any change to how the backward
computes (issue 24: its hot loops rewritten for speed) must keep every entry equal.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

import scratch


def exact_dot(a, b) -> float:
    """The correctly rounded sum of the rounded products a_l * b_l."""
    return float(sum((Fraction(x * y) for x, y in zip(a, b)), Fraction(0)))


def gauss(rng, rows, cols):
    return [[rng.gauss(0.0, 1.0) for _ in range(cols)] for _ in range(rows)]


def head_terms(q, k, v, g, P, keep, silent, scale, full, masked_rows):
    """(dQ, and per kv head the rows it sums: Pd, dS, q, dO) of one query head, by definition."""
    L, S, Ev = len(q), len(k), len(v[0])
    Pd = P if keep is None else [[p * f for p, f in zip(r, kr)] for r, kr in zip(P, keep)]
    v_cols = list(zip(*v))
    O = [[0.0] * Ev if silent[i] else [exact_dot(Pd[i], c) for c in v_cols] for i in range(L)]
    D = [exact_dot(g[i], O[i]) for i in range(L)]
    dP = [[exact_dot(g[i], v[j]) for j in range(S)] for i in range(L)]
    if keep is not None:
        dP = [[x * f for x, f in zip(r, kr)] for r, kr in zip(dP, keep)]
    dS = [
        [0.0] * S
        if full[i] and masked_rows != "nan"
        else [P[i][j] * (dP[i][j] - D[i]) for j in range(S)]
        for i in range(L)
    ]
    k_cols = list(zip(*k))
    dQ = [[0.0] * len(k[0]) if silent[i] else [scale * exact_dot(dS[i], c) for c in k_cols]
          for i in range(L)]  # fmt: skip
    live = [i for i in range(L) if not silent[i]]
    return dQ, [(Pd[i], dS[i], q[i], g[i]) for i in live]


def key_value(rows, S, E, Ev, scale):
    """dK and dV of one kv head: one exact sum over every (query head, live row) term."""
    dK = [[scale * exact_dot([r[1][j] for r in rows], [r[2][c] for r in rows]) for c in range(E)]
          for j in range(S)]  # fmt: skip
    dV = [[exact_dot([r[0][j] for r in rows], [r[3][c] for r in rows]) for c in range(Ev)]
          for j in range(S)]  # fmt: skip
    return dK, dV


def by_definition(q, k, v, g, mask, full, masked_rows="zero", dropout_p=0.0, seed=0, group=1):
    """(dQ per query head, dK, dV per kv head) for lists of heads q[h], k[h // group], ..."""
    scale = 1.0 / math.sqrt(len(q[0][0]))  # the default scale, as check_scale makes it
    draw = random.Random(seed)
    dQ, shares = [], {}
    for h, (qh, gh) in enumerate(zip(q, g)):
        kh, vh = k[h // group], v[h // group]
        P = scratch.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, masked_rows=masked_rows
        )[1]  # the forward's weights: not what this test is about
        keep = None
        if dropout_p:  # the forward's draws, head after head in row-major order
            f = 1.0 / (1.0 - dropout_p)
            keep = [[0.0 if draw.random() < dropout_p else f for _ in kh] for _ in qh]
        silent = [x and masked_rows == "zero" for x in full]
        dq, rows = head_terms(qh, kh, vh, gh, P, keep, silent, scale, full, masked_rows)
        dQ.append(dq)
        shares.setdefault(h // group, []).extend(rows)
    S, E, Ev = len(k[0]), len(k[0][0]), len(v[0][0])
    kv = [key_value(shares[n], S, E, Ev, scale) for n in range(len(k))]
    return dQ, [a for a, _ in kv], [b for _, b in kv]


CASES = {  # (L, S, E, Ev, heads, kv heads, mask kind, masked_rows, dropout_p)
    "plain": (5, 7, 4, 3, 1, 1, None, "zero", 0.0),
    "square": (6, 6, 5, 5, 1, 1, None, "zero", 0.0),
    "causal": (6, 6, 3, 2, 1, 1, "causal", "zero", 0.0),
    "bool mask, empty row": (5, 6, 3, 4, 1, 1, "empty-row", "zero", 0.0),
    "uniform policy": (5, 6, 3, 4, 1, 1, "empty-row", "uniform", 0.0),
    "dropout": (5, 6, 3, 3, 1, 1, None, "zero", 0.3),
    "dropout, empty row": (4, 5, 3, 2, 1, 1, "empty-row", "zero", 0.25),
    "gqa": (4, 5, 3, 2, 4, 2, None, "zero", 0.0),
    "gqa, dropout": (3, 5, 2, 2, 2, 1, "causal", "zero", 0.2),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_every_gradient_entry_is_its_correctly_rounded_definition(name, seed):
    L, S, E, Ev, H, Hkv, kind, masked_rows, p = CASES[name]
    rng = random.Random(f"{name}:{seed}")
    q = [gauss(rng, L, E) for _ in range(H)]
    k, v = [gauss(rng, S, E) for _ in range(Hkv)], [gauss(rng, S, Ev) for _ in range(Hkv)]
    g = [gauss(rng, L, Ev) for _ in range(H)]
    mask, full = None, [False] * L
    if kind == "causal":
        mask = [[j <= i for j in range(S)] for i in range(L)]
    elif kind == "empty-row":
        mask = [[rng.random() < 0.6 or j == i for j in range(S)] for i in range(L)]
        mask[1] = [False] * S
        full[1] = True
    want = by_definition(q, k, v, g, mask, full, masked_rows, p, seed + 50, H // Hkv)
    got = scratch.scaled_dot_product_attention_backward(
        [q], [k], [v], [g], attn_mask=mask, masked_rows=masked_rows, dropout_p=p,
        rng=random.Random(seed + 50) if p else None, enable_gqa=Hkv < H,
    )  # fmt: skip
    for what, ours, exact in zip(("grad_query", "grad_key", "grad_value"), got, want):
        assert ours[0] == exact, f"{name}: {what} differs from its exact definition"


def test_a_sum_rounded_twice_is_caught():
    """The comparison sees one ulp: dV summed head by head (a sum of rounded sums) under GQA
    differs from the one correctly rounded sum in some entry, and the test would say so."""
    rng = random.Random(3)
    q = [gauss(rng, 4, 3) for _ in range(3)]
    k, v, g = [gauss(rng, 6, 3)], [gauss(rng, 6, 2)], [gauss(rng, 4, 2) for _ in range(3)]
    _, _, dV = scratch.scaled_dot_product_attention_backward([q], [k], [v], [g], enable_gqa=True)
    per_head = [
        scratch.scaled_dot_product_attention_backward(q[h], k[0], v[0], g[h])[2] for h in range(3)
    ]
    twice = [[sum(vals) for vals in zip(*rows)] for rows in zip(*per_head)]  # rounded twice
    exact = by_definition(q, k, v, g, None, [False] * 4, group=3)[2][0]
    assert dV[0][0] == exact and twice != exact

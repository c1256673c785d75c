"""How far a correct backward kernel may land from the ground truth: a bound per gradient.

`gradient_tolerance(...)` gives, for every backward step (dV, dP, D, dS, dQ, dK), a per-element
bound on |kernel - ground truth| for a kernel computing in `dtype`; `compare` applies one bound.
Standard library only (plain Python, fsum), like the ground truth it is measured against.

Derivation, for one head; u = unit roundoff of the precision sums are taken in (float32 for
float16/bfloat16), u_s the 16-bit storage rounding (0 for float32/float64), g(n) = n*u/(1-n*u),
f = 1/(1-dropout_p) (dropped weights are only ever smaller: the bound needs no dropout mask).
Every term is a sum of absolute values (what rounding errors scale with, since dS = P(dP - D)
cancels and may be far smaller than the errors of its terms).

1. P: the forward's weights, relative error r_i = R(delta_i) from tolerance.Rounding.factor, with
   delta_i = g(E+4) S_i + 2u (S_i + ln S + 1): the score error of the forward plus the rounding
   of a stored log-sum-exp when a tiled kernel recomputes P = exp(s - lse) (|lse| <= S_i + ln S);
   plus u_s (P stored in 16 bits) and a subnormal floor w per weight.
2. dP_ij = f sum_c dO_ic V_jc:  e_dP <= (g(Ev+1) + u_s) A_ij,  A_ij = f sum_c |dO_ic||V_jc|.
3. D_i = sum_c dO_ic O_ic, with O the forward's output (error e_O = f (r_i P|V| + w sum|V|) + o):
   e_D <= (g(Ev) + u_s) sum_c |dO_ic| |O|_ic + sum_c |dO_ic| e_O_ic,  |O| <= f P|V|.
4. dS_ij = P_ij (dP_ij - D_i), M_ij = A_ij + |D|_i bounds |dP_ij - D_i|:
   e_dS <= (r_i + g(2) + u_s) P_ij M_ij + w M_ij + P_ij (e_dP_ij + e_D_i).
5. dQ_ic = scale sum_j dS_ij K_jc:  e_dQ <= |scale| (sum_j e_dS_ij |K_jc|
   + (g(S+1) + u_s) sum_j P_ij M_ij |K_jc|) + (S+1) tiny.
6. dK_jc = scale sum_i dS_ij Q_ic over the L' = L * group rows reading key j (GQA sums heads):
   e_dK <= |scale| (sum_i e_dS_ij |Q_ic| + (g(L'+1) + u_s) sum_i P_ij M_ij |Q_ic|) + (L'+1) tiny.
7. dV_jc = sum_i P_d,ij dO_ic:  e_dV <= f (sum_i (r_i P_ij + w) |dO_ic|
   + (g(L'+1) + u_s) sum_i P_ij |dO_ic|) + (L'+1) tiny.
The ground truth's own error (float64, fsum) obeys the float64 bound, which is added, as in
tolerance.py. The 16-bit policy: inputs, P and dS stored in the 16-bit dtype, every sum and dot
product taken in float32, each gradient rounded once to the 16-bit dtype at the end.
Rows with no live key: "zero" gives bound 0 (the row's gradients must be exactly 0; its keys get
nothing from it); "uniform" has P = 1/S and dS = 0 exactly (bound 0 on dS and dQ of the row);
"nan" makes the row's dP-chain NaN: NaN positions must match and their bound is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from scratch.bounds.tolerance import SMALLEST_SUBNORMAL, Rounding, _row_size, check_dtype, gamma
from scratch.core.attention import attend, prepare
from scratch.core.front_doors import backward_door
from scratch.core.options import Options
from scratch.ops.nested import at, stack
from scratch.ops.validate import as_tensor

NAMES = ("grad_value", "grad_weights", "row_dot", "grad_scores", "grad_query", "grad_key")


@dataclass(frozen=True)
class GradientTolerance:
    """Per-element bounds on every backward step, each shaped like the step itself."""

    grad_value: list  # dV (..., Hkv, S, Ev)
    grad_weights: list  # dP (..., L, S)
    row_dot: list  # D (..., L)
    grad_scores: list  # dS (..., L, S)
    grad_query: list  # dQ (..., L, E)
    grad_key: list  # dK (..., Hkv, S, E)

    def __getitem__(self, name: str) -> list:
        """The bound of one step by name ("grad_query", ...)."""
        if name not in NAMES:
            raise KeyError(f"name: expected one of {', '.join(NAMES)}, found {name!r}")
        return getattr(self, name)


def _tiny(r: Rounding) -> float:
    """One product's underflow: a subnormal, and one more when the result is stored in 16 bits."""
    return SMALLEST_SUBNORMAL[r.dtype] + (SMALLEST_SUBNORMAL[r.dtype] if r.u_store else 0.0)


def _head_terms(q, k, v, g, scale, mask, mask_rows, masked_rows, f, r: Rounding):
    """The per-head bound pieces of steps 1-5 (and the row terms steps 6-7 sum over)."""
    u, us = r.u_acc, r.u_store
    fw = attend(q, k, v, scale, mask_rows, masked_rows, added=mask is not None and not mask.is_bool)
    P, full = fw.weights, fw.fully_masked
    L, S, E, Ev = len(q), len(k), len(q[0]), len(v[0])
    tiny = _tiny(r)
    w, o = r.weight_floor, r.output_floor
    added = mask is not None and not mask.is_bool  # a float mask adds |mask_ij| to a score
    absv = [[abs(x) for x in row] for row in v]
    v_sum = [math.fsum(row[c] for row in absv) for c in range(Ev)]
    rows = []  # per query row: (P, r_i, M, e_dS, dead) ...
    grad_weights, row_dot, grad_scores, grad_query = [], [], [], []
    for i in range(L):
        nan_row = full[i] and masked_rows == "nan"
        silent = full[i] and masked_rows == "zero"
        P_i = [0.0] * S if nan_row or silent else P[i]
        # step 1: the relative error of P on this row (score error + stored lse)
        S_i = 0.0 if full[i] else _row_size(q[i], k, P_i, scale, mask_rows[i] if added else None)
        delta = r.score_gamma * S_i + 2 * u * (S_i + math.log(S) + 1)
        r_i = r.factor(delta) + us
        # step 2: dP
        dO_abs = [abs(x) for x in g[i]]
        A = [f * math.fsum(a * b for a, b in zip(dO_abs, absv[j])) for j in range(S)]
        e_dP = [(gamma(Ev + 1, u) + us) * a for a in A]
        # step 3: D
        pv = [math.fsum(p * absv[j][c] for j, p in enumerate(P_i)) for c in range(Ev)]
        O_abs = [f * x for x in pv]
        e_O = [f * (r_i * x + w * vs) + o for x, vs in zip(pv, v_sum)]
        D_abs = math.fsum(a * b for a, b in zip(dO_abs, O_abs))
        e_D = (gamma(Ev, u) + us) * D_abs + math.fsum(a * b for a, b in zip(dO_abs, e_O))
        # step 4: dS
        M = [a + D_abs for a in A]
        if full[i]:  # a constant row: dS is exactly 0 (or NaN, compared by position)
            e_dS = [0.0] * S
        else:
            e_dS = [
                (r_i + gamma(2, u) + us) * p * m + w * m + p * (edp + e_D)
                for p, m, edp in zip(P_i, M, e_dP)
            ]
        # step 5: dQ
        if full[i]:
            e_dQ = [0.0] * E
        else:
            gs = gamma(S + 1, u) + us
            e_dQ = [
                abs(scale)
                * math.fsum(
                    (e + gs * p * m) * abs(k[j][c]) for j, (e, p, m) in enumerate(zip(e_dS, P_i, M))
                )
                + (S + 1) * tiny
                for c in range(E)
            ]
        zero = silent or nan_row
        grad_weights.append(e_dP)  # dO V^T: finite even on a NaN row
        row_dot.append(0.0 if zero else e_D)
        grad_scores.append(e_dS)
        grad_query.append([0.0] * E if zero else e_dQ)
        dS_mag = [0.0] * S if full[i] else [p * m for p, m in zip(P_i, M)]
        rows.append((P_i if not silent else [0.0] * S, r_i, dS_mag, e_dS, dO_abs, q[i], silent))
    return (
        grad_weights,
        row_dot,
        grad_scores,
        grad_query,
        rows,
        any(f_ and masked_rows == "nan" for f_ in full),
    )


def _key_value(rows, S, E, Ev, scale, f, r: Rounding):
    """Steps 6 and 7 over every (head, row) reading one kv head."""
    w = r.weight_floor
    live = [row for row in rows if not row[-1]]
    n = len(live)
    g = gamma(n + 1, r.u_acc) + r.u_store

    def summed(c: float, width: int, pair) -> list:
        """c * sum over the live rows of pair(row, j, col)'s two terms, + (n + 1) tiny."""
        return [
            [c * math.fsum(t for row in live for t in pair(*row, j, col)) + (n + 1) * _tiny(r)
             for col in range(width)]
            for j in range(S)
        ]  # fmt: skip

    grad_key = summed(abs(scale), E, lambda P_i, r_i, dS_mag, e_dS, dO_abs, q_i, _, j, c: (
        e_dS[j] * abs(q_i[c]), g * dS_mag[j] * abs(q_i[c])))  # fmt: skip
    grad_value = summed(f, Ev, lambda P_i, r_i, dS_mag, e_dS, dO_abs, q_i, _, j, c: (
        (r_i * P_i[j] + w) * dO_abs[c], g * P_i[j] * dO_abs[c]))  # fmt: skip
    return grad_key, grad_value


def tolerance_of(
    query: object,
    key: object,
    value: object,
    grad_output: object,
    options: Options,
    *,
    dtype: object = "float32",
) -> GradientTolerance:
    """Per-element bounds on |gradient - ground truth| of every backward step, for `dtype`.

    The inputs are the kernel's own (already rounded) query, key, value and grad_output, with
    the arguments of scaled_dot_product_attention_backward (rng is not read: the bounds hold
    for any dropout mask), and `dtype` (keyword: the kernel's dtype, default "float32"); the
    module doc derives each bound.

    Returns:
        A GradientTolerance: the bound of each backward step (grad_query, grad_key,
        grad_value among them), each the shape of its gradient.
    """
    dtype = check_dtype(dtype)
    p = prepare(query, key, value, options)
    plan = p.plan
    g, g_shape = as_tensor(grad_output, "grad_output", min_dims=2)
    plan.check_grad_output(g_shape)
    f = 1.0 / (1.0 - options.dropout_p)
    parts = [Rounding(d, plan.E, plan.S) for d in (dtype, "float64")]
    steps = {name: [] for name in ("grad_weights", "row_dot", "grad_scores", "grad_query")}
    kv_rows: dict[tuple, list] = {}
    kv_nan: dict[tuple, bool] = {}
    for h in p.heads():
        kv, g_h = h.kv, at(g, h.index)  # g_h (L, Ev)
        head = (h.q, h.k, h.v, g_h, p.scale, p.mask, h.mask_rows, p.masked_rows, f)
        per_part = [_head_terms(*head, r) for r in parts]
        for n, name in enumerate(steps):
            steps[name].append(_add(per_part[0][n], per_part[1][n]))
        kv_rows.setdefault(kv, [[], []])
        for slot, terms in zip(kv_rows[kv], per_part):
            slot.extend(terms[4])
        kv_nan[kv] = kv_nan.get(kv, False) or per_part[0][5]
    grad_key, grad_value = [], []
    for kv in product(*map(range, plan.kv_lead)):
        pieces = [
            _key_value(rows, plan.S, plan.E, plan.Ev, p.scale, f, r)
            for rows, r in zip(kv_rows[kv], parts)
        ]
        dK, dV = _add(pieces[0][0], pieces[1][0]), _add(pieces[0][1], pieces[1][1])
        if kv_nan[kv]:  # NaN reaches every entry through the sums: compared by position
            dK = [[0.0] * plan.E for _ in range(plan.S)]
            dV = [[0.0] * plan.Ev for _ in range(plan.S)]
        grad_key.append(dK)
        grad_value.append(dV)
    return GradientTolerance(
        grad_value=stack(grad_value, plan.kv_lead),
        grad_weights=stack(steps["grad_weights"], plan.lead),
        row_dot=stack(steps["row_dot"], plan.lead),
        grad_scores=stack(steps["grad_scores"], plan.lead),
        grad_query=stack(steps["grad_query"], plan.lead),
        grad_key=stack(grad_key, plan.kv_lead),
    )


gradient_tolerance = backward_door(tolerance_of)


def _add(a: list | float, b: list | float) -> list | float:
    """Element-wise sum of two equally nested lists."""
    if isinstance(a, list):
        return [_add(x, y) for x, y in zip(a, b)]
    return a + b


@dataclass(frozen=True)
class Comparison:
    """One gradient against the ground truth: ok, worst |error| / bound, where, NaN mismatches."""

    ok: bool
    worst_ratio: float
    worst_index: tuple[int, ...] | None
    nan_mismatches: int


def compare(computed: object, truth: object, bound: object) -> Comparison:
    """Whether |computed - truth| <= bound everywhere and NaN sits exactly where truth has NaN.

    All three have the same shape (nested lists or arrays). `worst_ratio` is the largest
    |error| / bound (inf where the bound is 0 and the error is not).
    """
    flat = [_flat_indexed(x) for x in (computed, truth, bound)]
    if not len(flat[0]) == len(flat[1]) == len(flat[2]):
        raise ValueError(
            f"computed, truth, bound: expected equal sizes, found "
            f"{len(flat[0])}, {len(flat[1])}, {len(flat[2])}"
        )
    worst, where, nan_bad = 0.0, None, 0
    for (index, a), (_, t), (_, b) in zip(*flat):
        if math.isnan(a) or math.isnan(t):
            if math.isnan(a) != math.isnan(t):
                nan_bad += 1
                worst, where = math.inf, index
            continue
        err = 0.0 if a == t else abs(a - t)
        ratio = err / b if b > 0 else (0.0 if err == 0 else math.inf)
        if math.isnan(ratio):  # inf - inf
            ratio = math.inf
        if ratio > worst:
            worst, where = ratio, index
    return Comparison(worst <= 1.0 and nan_bad == 0, worst, where, nan_bad)


def _flat_indexed(x: object) -> list[tuple[tuple[int, ...], float]]:
    """(index, value) for every entry of nested lists or an array, row-major."""
    x = x.tolist() if hasattr(x, "tolist") else x
    level: list = [((), x)]
    while level and isinstance(level[0][1], (list, tuple)):
        level = [(ix + (n,), y) for ix, row in level for n, y in enumerate(row)]
    return [(ix, float(y)) for ix, y in level]

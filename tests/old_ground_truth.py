"""The ground truth's three attention copies as they were before one head kernel replaced them
(scratch/core/attention.py `attend`, scratch/core/variant_steps.py `attend_head`,
scratch/flex/forward.py `row` and
`flex_attention`, at main feff91f), and the backward's copies (scratch/backward/sdpa.py
`backward_head`,
`key_value_grads` and `gradients_of`, scratch/backward/multihead.py `run_backward`'s head loop,
scratch/flex/backward.py `flex_attention_backward`, at main 92d44a4), frozen here ONLY so
tests/test_one_head.py can show the one kernel and its backward give every public entry the same
bits. Not product code; do not import it elsewhere. Steps come back as SimpleNamespace objects
with the same names."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from math import exp, fsum, inf, log
from types import SimpleNamespace

from scratch.core.masks import Mask
from scratch.core.options import FlexOptions, Options
from scratch.core.variant_steps import Pieces, parts_of, pieces
from scratch.flex.forward import BlockMask, FlexInputs, prepare
from scratch.ops.linalg import dot, matmul_nt, transpose_rows
from scratch.ops.nested import at
from scratch.ops.softmax import softmax_row
from scratch.ops.validate import check_flag
from scratch.variants import Rotary

Matrix = list[list[float]]


def attend(
    q: Matrix,
    k: Matrix,
    v: Matrix,
    scale: float,
    mask: Mask | None = None,
    mask_rows: list[list] | None = None,
    masked_rows: str = "zero",
    dropout_p: float = 0.0,
    rng: random.Random | None = None,
) -> SimpleNamespace:
    """One head of attention on validated matrices q (L, E), k (S, E), v (S, Ev)."""
    # step 2: scores = q @ k^T            (L, E) @ (E, S) -> (L, S); rows of k are k^T's columns
    scores = matmul_nt(q, k)
    # step 3: scaled = scores * scale     (L, S)
    scaled = [[s * scale for s in row] for row in scores]
    # step 4: masked = scaled + mask      (L, S); -inf where a key may not be attended
    if mask is None:
        masked = scaled
    elif mask.is_bool:  # adds -inf, as torch's reference does: a NaN or +inf score stays NaN
        masked = [
            [x if a else x - inf for x, a in zip(row, allow)]
            for row, allow in zip(scaled, mask_rows)
        ]
    else:
        masked = [[x + a for x, a in zip(row, add)] for row, add in zip(scaled, mask_rows)]
    # a row is fully masked when every entry is -inf, whether the mask or the data put it there
    fully_masked = [all(x == -inf for x in row) for row in masked]
    # step 5: weights = softmax(masked)   (L, S), each row: exp(x - max) / fsum
    weights = [softmax_row(row, masked_rows, full) for row, full in zip(masked, fully_masked)]
    # step 5, then: dropout on weights   (L, S), kept entries scaled by 1 / (1 - p), dropped
    # ones multiplied by 0 (as torch's dropout does: a NaN weight stays NaN, so does its row)
    if dropout_p > 0.0:
        draw = (rng if rng is not None else random).random
        keep = 1.0 / (1.0 - dropout_p)
        weights = [[w * (0.0 if draw() < dropout_p else keep) for w in row] for row in weights]
    # step 6: output = weights @ v        (L, S) @ (S, Ev) -> (L, Ev)
    output = matmul_nt(weights, transpose_rows(v))
    if masked_rows == "zero":  # zero weights must give zero output even if v holds inf or NaN
        Ev = len(v[0])
        output = [[0.0] * Ev if full else row for row, full in zip(output, fully_masked)]
    return SimpleNamespace(
        scores=scores, scaled=scaled, masked=masked, weights=weights, output=output,
        fully_masked=fully_masked,
        q_rotated=None, k_rotated=None, sink_weights=None,  # the kernel's Steps: no variant here
    )  # fmt: skip


def attend_all(
    q: list,
    k: list,
    v: list,
    lead: tuple[int, ...],
    scale: float,
    mask: Mask | None,
    masked_rows: str,
    dropout_p: float = 0.0,
    rng: random.Random | None = None,
    group: int = 1,
) -> list[SimpleNamespace]:
    """attend() for every leading index, row-major; query head h reads kv head h // group."""
    results = []
    for index in product(*map(range, lead)):
        kv_index = index
        if group > 1:  # grouped-query attention: the head axis is the last leading axis
            kv_index = index[:-1] + (index[-1] // group,)
        mask_rows = mask.slice(index) if mask is not None else None
        results.append(
            attend(
                at(q, index),
                at(k, kv_index),
                at(v, kv_index),
                scale,
                mask,
                mask_rows,
                masked_rows,
                dropout_p,
                rng,
            )
        )
    return results


def weights_with_sink(row: list[float], sink: float) -> tuple[list[float], float]:
    """Softmax of a row with one more term, the sink logit, in the denominator (no value)."""
    top = max(max(row, default=-inf), sink)  # subtract the max (sink included): exp <= 1
    e = [exp(x - top) for x in row]
    s = exp(sink - top)
    total = fsum(e + [s])
    return [x / total for x in e], s / total


def attend_head(
    q: Matrix,
    k: Matrix,
    v: Matrix,
    h: int,
    scale: float,
    p: Pieces,
    masked_rows: str,
    rows: tuple[list[int], int] | None = None,
) -> SimpleNamespace:
    """Steps 1.5-6 for query head h, q (L, E), k (S, E), v (S, Ev) of its kv head.

    rows = (indices, L): q holds only those query rows of L, and the steps are theirs (rows
    are independent: each is exactly that row of the full steps)."""
    S = len(k)
    L, at = (len(q), range(len(q))) if rows is None else (rows[1], rows[0])  # at: q's indices
    q_rot = k_rot = None
    if p.rotary is not None:  # step 1.5: RoPE, queries at positions i + S - L, keys at j
        q_pos, k_pos = Rotary.positions(L, S)
        q_rot, k_rot = p.rotary.turn(q, [q_pos[i] for i in at]), p.rotary.turn(k, k_pos)
        q, k = q_rot, k_rot
    # step 2: scores = q @ k^T            (L, E) @ (E, S) -> (L, S)
    scores = matmul_nt(q, k)
    # step 3: scaled = score_mod(scores * scale)   (L, S)
    score_mod = None if p.rule is None else p.rule.score_mod
    scaled = [[x * scale for x in row] for row in scores]
    if score_mod is not None:
        scaled = [
            [score_mod(x, 0, h, i, j) for j, x in enumerate(row)] for i, row in zip(at, scaled)
        ]
    # step 4: masked = scaled with -inf where mask_mod says "not seen" (x - inf: NaN stays NaN)
    mask_mod = None if p.rule is None else p.rule.mask_mod
    masked = scaled
    if mask_mod is not None:
        masked = [
            [x if mask_mod(0, h, i, j) else x - inf for j, x in enumerate(row)]
            for i, row in zip(at, scaled)
        ]
    fully_masked = [all(x == -inf for x in row) for row in masked]
    # step 5: weights = softmax(masked) along each row, the sink in the denominator when given
    sink_weights = None
    if p.sinks is None:
        weights = [softmax_row(row, masked_rows, full) for row, full in zip(masked, fully_masked)]
    else:
        pairs = [weights_with_sink(row, p.sinks.logits[h]) for row in masked]
        weights, sink_weights = [w for w, _ in pairs], [s for _, s in pairs]
    # step 6: output = weights @ v        (L, S) @ (S, Ev) -> (L, Ev)
    output = matmul_nt(weights, transpose_rows(v))
    if masked_rows == "zero" or p.sinks is not None:  # zero weights: zero output, inf in v too
        Ev = len(v[0])
        output = [[0.0] * Ev if full else row for row, full in zip(output, fully_masked)]
    return SimpleNamespace(
        scores=scores, scaled=scaled, masked=masked, weights=weights, output=output,
        fully_masked=fully_masked, q_rotated=q_rot, k_rotated=k_rot, sink_weights=sink_weights,
    )  # fmt: skip


def attend_variant_all(
    q: list,
    k: list,
    v: list,
    head_lead: tuple[int, ...],
    scale: float,
    options: Options,
    group: int,
) -> list[SimpleNamespace]:
    """attend_head for every head of one example: q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev)."""
    if len(head_lead) != 1:
        raise ValueError(
            "variant: the ground truth traces a variant for one example (L, d_model), "
            f"found {len(head_lead) - 1} batch dims"
        )
    if options.dropout_p:
        raise ValueError("dropout_p: a variant's trace has no dropout; expected 0.0")
    H = head_lead[0]
    p = pieces(options)
    L, S = len(q[0]), len(k[0])
    for part in parts_of(options.attention_variant):
        part.check(1, H, L, S)
    return [
        attend_head(q[h], k[h // group], v[h // group], h, scale, p, options.masked_rows)
        for h in range(H)
    ]


@dataclass(frozen=True)
class Row:
    """One query row's forward: the keys seen, their raw and modified scores, weights, lse."""

    keys: list[int]
    raw: list[float]  # scale * q . k before score_mod
    scores: list[float]  # after score_mod
    weights: list[float]  # exp(score - lse)
    sink_weight: float  # exp(sink - lse), 0 without sinks
    lse: float


def modified(score_mod: Callable[..., float], score: float, b: int, h: int, i: int, j: int):
    """score_mod's answer as a float (TypeError naming score_mod and the cell otherwise)."""
    s = score_mod(score, b, h, i, j)
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        raise TypeError(
            f"score_mod: expected a number for (b, h, q_idx, kv_idx) = {(b, h, i, j)}, "
            f"found {type(s).__name__} {s!r}"
        )
    return float(s)


def row(x: FlexInputs, b: int, h: int, i: int) -> Row:
    """Steps 1-3 for query i of head h in batch b."""
    kv = h // x.group
    q_i = x.q[b][h][i]
    keys = range(x.shape[4]) if x.block_mask is None else x.block_mask.keys(b, h, i)
    seen, raw, scores = [], [], []
    for j in keys:
        # step 1: the scaled score (one rounding for the fsum, one for the scale)
        r = x.scale * fsum(a * c for a, c in zip(q_i, x.k[b][kv][j]))
        # step 2: the score change; -inf from a score_mod masks the key as the mask would
        s = r if x.score_mod is None else modified(x.score_mod, r, b, h, i, j)
        if s != -inf:
            seen.append(j)
            raw.append(r)
            scores.append(s)
    sink = None if x.sinks is None else x.sinks[h]
    terms = scores + ([] if sink is None else [sink])
    if not terms:  # no key seen and no sink: output 0, lse -inf (as FlexAttention)
        return Row([], [], [], [], 0.0, -inf)
    # step 3: lse; subtract the row max so exp never overflows
    top = max(terms)
    lse = top + log(fsum(exp(s - top) for s in terms))
    weights = [exp(s - lse) for s in scores]
    sink_weight = 0.0 if sink is None else exp(sink - lse)
    return Row(seen, raw, scores, weights, sink_weight, lse)


def flex_attention(
    query: object,
    key: object,
    value: object,
    score_mod: Callable[..., float] | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    *,
    sinks: object = None,
) -> list | tuple[list, list]:
    """FlexAttention in plain Python: output (B, H, L, Ev), and lse (B, H, L) with return_lse.

    `sinks`: one learned sink logit per query head (gpt-oss), added to each row's denominator.
    """
    x = flex_inputs(query, key, value, score_mod, block_mask, scale, enable_gqa, sinks)
    B, H, _, L, _, _, Ev = x.shape
    check_flag(return_lse, "return_lse")
    output, lse = [], []
    for b in range(B):
        out_b, lse_b = [], []
        for h in range(H):
            kv, out_h, lse_h = h // x.group, [], []
            for i in range(L):
                r = row(x, b, h, i)
                # step 4: output[c] = sum_j weights[j] * v[j][c]  (Ev sums of len(keys) terms)
                out_h.append(
                    [
                        fsum(w * x.v[b][kv][j][c] for w, j in zip(r.weights, r.keys))
                        for c in range(Ev)
                    ]
                )
                lse_h.append(r.lse)
            out_b.append(out_h)
            lse_b.append(lse_h)
        output.append(out_b)
        lse.append(lse_b)
    return (output, lse) if return_lse else output


# ---- the backward's copies (main 92d44a4) ----


def dropout_keep(L: int, S: int, dropout_p: float, rng: random.Random | None) -> list | None:
    """The forward's dropout factors (0 or 1/(1-p)), drawn in the forward's row-major order."""
    if dropout_p == 0.0:
        return None
    rng = rng if rng is not None else random
    keep = 1.0 / (1.0 - dropout_p)
    return [[0.0 if rng.random() < dropout_p else keep for _ in range(S)] for _ in range(L)]


def backward_head(q, k, v, mask, mask_rows, grad_output, scale, masked_rows, dropout_p, rng):
    """scratch.backward.sdpa.backward_head: one head's gradients as a SimpleNamespace."""
    forward = attend(q, k, v, scale, mask, mask_rows, masked_rows)  # P without dropout
    P, full = forward.weights, forward.fully_masked  # (L, S), (L,)
    L, S = len(P), len(P[0])
    keep = dropout_keep(L, S, dropout_p, rng)
    silent = [f and masked_rows == "zero" for f in full]
    if keep is None:
        Pd, O = P, forward.output
    else:
        Pd = [[p * f for p, f in zip(r, kr)] for r, kr in zip(P, keep)]
        O = matmul_nt(Pd, transpose_rows(v))
        O = [[0.0] * len(row) if s else row for row, s in zip(O, silent)]
    grad_dropped = matmul_nt(grad_output, v)
    grad_weights = grad_dropped
    if keep is not None:
        grad_weights = [[g * f for g, f in zip(r, kr)] for r, kr in zip(grad_dropped, keep)]
    row_dot = [dot(g, o) for g, o in zip(grad_output, O)]
    grad_scores = [
        [0.0] * S if f and masked_rows != "nan" else [p * (g - d) for p, g in zip(Prow, grow)]
        for Prow, grow, d, f in zip(P, grad_weights, row_dot, full)
    ]
    grad_query = [[scale * x for x in row] for row in matmul_nt(grad_scores, transpose_rows(k))]
    grad_query = [[0.0] * len(row) if s else row for row, s in zip(grad_query, silent)]
    live = [i for i in range(L) if not silent[i]]
    rows = (Pd, grad_output, grad_scores, q, live)
    grad_key, grad_value = key_value_grads([rows], scale)
    return SimpleNamespace(
        query=q, weights=P, dropped=Pd, output=O, grad_output=grad_output, grad_value=grad_value,
        grad_weights=grad_weights, row_dot=row_dot, grad_scores=grad_scores,
        grad_query=grad_query, grad_key=grad_key, live=live, grad_dropped=grad_dropped, rows=rows,
    )  # fmt: skip


def key_value_grads(heads: list[tuple], scale: float) -> tuple[Matrix, Matrix]:
    """scratch.backward.sdpa.key_value_grads: one fsum over every (head, live row) of a kv head."""
    Pd = [P[i] for P, _, _, _, live in heads for i in live]
    dO = [g[i] for _, g, _, _, live in heads for i in live]
    dS = [d[i] for _, _, d, _, live in heads for i in live]
    q = [x[i] for _, _, _, x, live in heads for i in live]
    S, E, Ev = len(heads[0][0][0]), len(heads[0][3][0]), len(heads[0][1][0])
    if not Pd:
        return [[0.0] * E for _ in range(S)], [[0.0] * Ev for _ in range(S)]
    grad_value = matmul_nt(transpose_rows(Pd), transpose_rows(dO))
    grad_key = [
        [scale * x for x in row] for row in matmul_nt(transpose_rows(dS), transpose_rows(q))
    ]
    return grad_key, grad_value


def sdpa_backward(query, key, value, grad_output, options: Options) -> tuple:
    """scratch.backward.sdpa.gradients_of: (grad_query, grad_key, grad_value) of SDPA."""
    from scratch.core.attention import prepare as prepare_sdpa
    from scratch.ops.nested import stack
    from scratch.ops.validate import as_tensor

    p = prepare_sdpa(query, key, value, options)
    plan = p.plan
    g, g_shape = as_tensor(grad_output, "grad_output", min_dims=2)
    plan.check_grad_output(g_shape)
    grad_query, kv_shares = [], {}
    for index in product(*map(range, plan.lead)):
        kv = plan.kv_index(index)
        mask_rows = p.mask.slice(index) if p.mask is not None else None
        head = backward_head(
            at(p.q, index), at(p.k, kv), at(p.v, kv), p.mask, mask_rows, at(g, index), p.scale,
            p.masked_rows, options.dropout_p, options.rng,
        )  # fmt: skip
        grad_query.append(head.grad_query)
        kv_shares.setdefault(kv, []).append(head)
    grad_key, grad_value = [], []
    for i in product(*map(range, plan.kv_lead)):
        shares = kv_shares[i]
        if len(shares) == 1:
            dK, dV = shares[0].grad_key, shares[0].grad_value
        else:
            dK, dV = key_value_grads([h.rows for h in shares], p.scale)
        grad_key.append(dK)
        grad_value.append(dV)
    kv_lead = plan.kv_lead
    return stack(grad_query, plan.lead), stack(grad_key, kv_lead), stack(grad_value, kv_lead)


def multi_head_heads(run, grad_output, rng=None) -> tuple:
    """scratch.backward.multihead.run_backward's head loop: (heads, dq, dk, dv), the rows of
    every leading index stacked, from d_concat = dO (no w_o) or dO @ w_o^T."""
    from scratch.core.multihead import split_heads
    from scratch.ops.nested import rows, unrows
    from scratch.ops.validate import as_tensor

    plan, params = run.plan, run.params
    lead, H, Hkv, L, S = plan.lead, plan.num_heads, plan.num_kv_heads, plan.L, plan.S
    dO, _ = as_tensor(grad_output, "grad_output", min_dims=2)
    d_concat = rows(dO, lead)
    if "w_o" in params:
        d_concat = matmul_nt(d_concat, params["w_o"])
    d_concat = unrows(d_concat, lead, L)
    qkv = (
        split_heads(run.q, lead, H),
        split_heads(run.k, lead, Hkv),
        split_heads(run.v, lead, Hkv),
    )
    dO_heads = split_heads(d_concat, lead, H)
    heads, dq_blocks, dk_blocks, dv_blocks = [], [], [], []
    for index in product(*map(range, lead)):
        per_head, groups = [], {}
        for h in range(H):
            head_index, kv_index = index + (h,), index + (h // plan.group,)
            mask_rows = run.mask.slice(head_index) if run.mask is not None else None
            q_h, k_h, v_h = (at(m, i) for m, i in zip(qkv, (head_index, kv_index, kv_index)))
            head = backward_head(
                q_h, k_h, v_h, run.mask, mask_rows, at(dO_heads, head_index), run.scale,
                run.options.masked_rows, run.options.dropout_p, rng,
            )  # fmt: skip
            heads.append(head)
            per_head.append(head.grad_query)
            groups.setdefault(h // plan.group, []).append(head)
        dq_blocks.append([[c for h in per_head for c in h[i]] for i in range(L)])
        kv = [key_value_grads([h.rows for h in groups[g]], run.scale) for g in range(Hkv)]
        dk_blocks.append([[c for dK, _ in kv for c in dK[j]] for j in range(S)])
        dv_blocks.append([[c for _, dV in kv for c in dV[j]] for j in range(S)])
    dq, dk, dv = (sum(blocks, []) for blocks in (dq_blocks, dk_blocks, dv_blocks))
    return heads, dq, dk, dv


def flex_attention_backward(
    query, key, value, grad_output, score_mod=None, block_mask=None, scale=None,
    enable_gqa=False, *, sinks=None,
) -> tuple:  # fmt: skip
    """scratch.flex.backward.flex_attention_backward, row by row with `row` above."""
    from scratch.ops.validate import as_tensor
    from scratch.variants.dual import derivative

    x = flex_inputs(query, key, value, score_mod, block_mask, scale, enable_gqa, sinks)
    B, H, Hkv, L, S, E, Ev = x.shape
    d_out, _ = as_tensor(grad_output, "grad_output", min_dims=0)
    grad_q = [[[None] * L for _ in range(H)] for _ in range(B)]
    dk_terms = [[[[[] for _ in range(E)] for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]
    dv_terms = [[[[[] for _ in range(Ev)] for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]
    sink_terms = [[] for _ in range(H)]
    for b in range(B):
        for h in range(H):
            kv = h // x.group
            for i in range(L):
                r, d_o, q_i = row(x, b, h, i), d_out[b][h][i], x.q[b][h][i]
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


def flex_inputs(query, key, value, score_mod, block_mask, scale, enable_gqa, sinks) -> FlexInputs:
    """scratch.flex.forward.prepare on the call's keywords (where this file meets its signature)."""
    return prepare(
        query, key, value, FlexOptions(score_mod, block_mask, scale, enable_gqa, False, sinks)
    )

"""The ground truth's three attention copies as they were before one head kernel replaced them
(scratch/attention.py `attend`, scratch/variant_steps.py `attend_head`, scratch/flex.py `row` and
`flex_attention`, at main feff91f), frozen here ONLY so tests/test_one_head.py can show the one
kernel gives every public entry the same bits. Not product code; do not import it elsewhere.
Steps come back as SimpleNamespace objects with the same names."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from math import exp, fsum, inf, log
from types import SimpleNamespace

from scratch.flex import BlockMask, FlexInputs, prepare
from scratch.linalg import matmul_nt, transpose_rows
from scratch.masks import Mask
from scratch.nested import at
from scratch.options import Options
from scratch.softmax import softmax_row
from scratch.validate import check_flag
from scratch.variant_steps import Pieces, parts_of, pieces
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
    x = prepare(query, key, value, score_mod, block_mask, scale, enable_gqa, sinks)
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

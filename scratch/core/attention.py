"""Scaled dot-product attention in plain Python: the ground truth every backend is checked against.

`attend` is the one head kernel: scaled_dot_product_attention, multi_head_attention, the traced
pipeline (with or without a variant), the sampled rows, flex_attention and decode all compute
each head with it (steps numbered as below; flex=True is FlexAttention's form of steps 5-6).

Semantics follow `torch.nn.functional.scaled_dot_product_attention`:

    output = softmax(q @ k^T * scale + mask) @ v

- `attn_mask` is bool (True = may attend) or float (added to the scaled scores, -inf = masked),
  of shape (L, S) or anything that broadcasts to (..., L, S). Python ints are refused as
  ambiguous. `is_causal=True` is PyTorch's top-left causal mask `tril(ones(L, S))`.
- A row in which every key is masked (every entry of `masked` is -inf, whether the mask or
  the data put it there, as fused kernels see it) follows `masked_rows`: "zero" (zero weights,
  zero output: PyTorch >= 2.5 and FlashAttention), "nan" (the textbook 0/0) or "uniform"
  (weights 1/S, what a finite -1e9 fill gives).
- Dropout acts on the weights after softmax (kept values scaled by 1/(1-p), dropped ones
  multiplied by 0, decided in row-major order by `rng.random() < p`); the returned weights are
  the ones after dropout, so `output == weights @ v` always holds. As in torch's dropout,
  NaN * 0 = NaN: a row the policy (or the data) makes NaN stays NaN, whatever is dropped.
- `return_lse=True` returns `(output, lse)` instead: lse (..., L) is the natural-log
  log-sum-exp of each row of `masked`, the log of softmax's denominator (PyTorch's flash and
  flex kernels' convention), taken before dropout; -inf on fully masked rows whatever
  `masked_rows` says, since their sum of exp is 0 (the policy only replaces the 0/0 weights).
- Every dot product and softmax denominator is an `fsum`: each entry of `scores` and of
  `output` is the correctly rounded sum of its (individually rounded) products, so the only
  errors are one rounding per product and one per sum, whatever the length or the order.
- NaN and inf in the data propagate as IEEE arithmetic would: a NaN or +inf score makes its
  whole row of weights NaN, and inf - inf inside a dot product is NaN. Masks add -inf, as
  torch's reference implementation does, so this holds at masked positions too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import product
from math import inf

from scratch.core.front_doors import forward_door
from scratch.core.masks import Mask
from scratch.core.options import Options
from scratch.core.variant_support import sdpa_variant
from scratch.ops.linalg import dot, matmul_nt, transpose_rows
from scratch.ops.nested import at, stack
from scratch.ops.plan import AttentionPlan, kv_index, plan_attention
from scratch.ops.softmax import flex_weights, log_sum_exp_row, softmax_row, weights_with_sink
from scratch.ops.validate import as_tensor
from scratch.variants import Causal, GivenMask, Rotary
from scratch.variants.dual import derivative

Matrix = list[list[float]]


@dataclass
class Steps:
    """Every intermediate matrix of one (L, S) attention, named as in the notebooks."""

    scores: Matrix  # (L, S)
    scaled: Matrix  # (L, S)
    masked: Matrix  # (L, S), -inf where masked
    weights: Matrix  # (L, S)
    output: Matrix  # (L, Ev)
    fully_masked: list[bool]  # (L,)
    q_rotated: Matrix | None = None  # (L, E) when the variant holds RoPE
    k_rotated: Matrix | None = None  # (S, E) of the kv head this head reads
    sink_weights: list[float] | None = None  # (L,) when the variant holds learned sinks
    lse: list[float] | None = None  # (L,) in FlexAttention's form (flex=True)


def attend(
    q: Matrix,
    k: Matrix,
    v: Matrix,
    scale: float,
    mask_rows: list[list] | None = None,
    masked_rows: str = "zero",
    dropout_p: float = 0.0,
    rng: random.Random | None = None,
    *,
    added: bool = False,
    b: int = 0,
    h: int = 0,
    rotary: Rotary | None = None,
    score_mod: Callable[..., float] | None = None,
    mask_mod: Callable[..., bool] | None = None,
    sink: float | None = None,
    rows: tuple[list[int], int] | None = None,
    keys: Callable[[int], Iterable[int]] | None = None,
    flex: bool = False,
) -> Steps:
    """One head of attention, the one kernel of every public entry: q (L, E), k (S, E), v (S, Ev).

    mask_rows (L, S): bools (True = may attend), or floats added at step 4 when `added`. A
    variant's hooks for head h of example b: rotary (RoPE), score_mod(score, b, h, i, j),
    mask_mod(b, h, i, j), sink (its learned sink logit). rows = (indices, L): q holds only those
    query rows of L, and the steps are theirs (each exactly that row of the full steps).
    flex=True is FlexAttention's form: only the keys a row sees take part (`keys(i)`, its block
    mask's keys, are the only ones computed; a score of -inf is not seen), weights are
    exp(masked - lse) and output sums the seen keys alone (SDPA's form: exp(x - max) / fsum and
    weights @ v over every key); lse is kept."""
    S = len(k)
    L, at = (len(q), range(len(q))) if rows is None else (rows[1], rows[0])  # at: q's indices
    q_rot = k_rot = None
    if rotary is not None:  # step 1.5: RoPE, queries at positions i + S - L, keys at j
        q_pos, k_pos = Rotary.positions(L, S)
        q_rot, k_rot = rotary.turn(q, [q_pos[i] for i in at]), rotary.turn(k, k_pos)
        q, k = q_rot, k_rot
    visits = [range(S)] * len(q) if keys is None else [list(keys(i)) for i in at]
    # step 2: scores = q @ k^T            (L, E) @ (E, S) -> (L, S); rows of k are k^T's columns
    # step 3: scaled = scores * scale     (L, S), then the variant's score_mod, if any
    if keys is None:
        scores = matmul_nt(q, k)
        scaled = [[s * scale for s in row] for row in scores]
    else:  # keys a row does not visit are never computed: -inf in scores and scaled
        scores, scaled = [[-inf] * S for _ in q], [[-inf] * S for _ in q]
        for q_i, seen, score, scale_row in zip(q, visits, scores, scaled):
            for j in seen:
                score[j] = dot(q_i, k[j])
                scale_row[j] = score[j] * scale
    if score_mod is not None:  # only on the keys visited, row by row
        for i, seen, row in zip(at, visits, scaled):
            for j in seen:
                row[j] = score_mod(row[j], b, h, i, j)
    # step 4: masked = scaled + mask      (L, S); -inf where a key may not be attended
    if mask_mod is not None:  # the variant's rule, asked cell by cell
        mask_rows = [[mask_mod(b, h, i, j) for j in range(S)] for i in at]
    if mask_rows is None:
        masked = scaled
    elif not added:  # adds -inf, as torch's reference does: a NaN or +inf score stays NaN
        masked = [
            [x if a else x - inf for x, a in zip(row, allow)]
            for row, allow in zip(scaled, mask_rows)
        ]
    else:
        masked = [[x + a for x, a in zip(row, add)] for row, add in zip(scaled, mask_rows)]
    # a row is fully masked when every entry is -inf, whether the mask or the data put it there
    fully_masked = [all(x == -inf for x in row) for row in masked]
    # step 5: weights = softmax(masked)   (L, S), each row: exp(x - max) / fsum; with a learned
    # sink, its exp joins the denominator and sink_weights is its column
    sink_weights = lse = None
    if flex:  # FlexAttention's form: lse over the seen keys (and sink), weights exp(x - lse)
        found = [flex_weights(row, sink) for row in masked]
        weights, lse = [w for w, _, _ in found], [x for _, _, x in found]
        sink_weights = None if sink is None else [s for _, s, _ in found]
    elif sink is None:
        weights = [softmax_row(row, masked_rows, full) for row, full in zip(masked, fully_masked)]
    else:
        pairs = [weights_with_sink(row, sink) for row in masked]
        weights, sink_weights = [w for w, _ in pairs], [s for _, s in pairs]
    # step 5, then: dropout on weights   (L, S), kept entries scaled by 1 / (1 - p), dropped
    # ones multiplied by 0 (as torch's dropout does: a NaN weight stays NaN, so does its row)
    keep = dropout_keep(len(weights), S, dropout_p, rng)
    if keep is not None:
        weights = [[w * f for w, f in zip(row, fs)] for row, fs in zip(weights, keep)]
    # step 6: output = weights @ v        (L, S) @ (S, Ev) -> (L, Ev); flex: over seen keys only
    Ev = len(v[0])
    if flex:
        output = [seen_output(w, row, v, Ev) for w, row in zip(weights, masked)]
    else:
        output = matmul_nt(weights, transpose_rows(v))
    if masked_rows == "zero" or sink is not None:  # zero weights: zero output, inf in v too
        output = [[0.0] * Ev if full else row for row, full in zip(output, fully_masked)]
    return Steps(
        scores, scaled, masked, weights, output, fully_masked, q_rot, k_rot, sink_weights, lse
    )


def seen_output(weights: list[float], row: list[float], v: Matrix, Ev: int) -> list[float]:
    """sum_j weights[j] * v[j] over the keys whose score is not -inf: (Ev,)."""
    seen = [j for j, x in enumerate(row) if x != -inf]
    if not seen:
        return [0.0] * Ev
    w = [weights[j] for j in seen]
    return [dot(w, column) for column in zip(*(v[j] for j in seen))]


def dropout_keep(L: int, S: int, dropout_p: float, rng: random.Random | None) -> Matrix | None:
    """Dropout's factors (L, S): 0 where `rng.random() < dropout_p` drops the weight, else
    1 / (1 - p), drawn in row-major order (None without dropout); the backward draws them again
    from an rng in the forward's state."""
    if dropout_p == 0.0:
        return None
    draw = (rng if rng is not None else random).random
    keep = 1.0 / (1.0 - dropout_p)
    return [[0.0 if draw() < dropout_p else keep for _ in range(S)] for _ in range(L)]


@dataclass
class Gradients:
    """The backward steps of one (L, S) head (attend_backward), named as scratch.backward.sdpa's."""

    query: Matrix  # Q (L, E), as the forward read it
    weights: Matrix  # P (L, S), before dropout
    dropped: Matrix  # P_d (L, S), after dropout
    output: Matrix  # O (L, Ev)
    grad_output: Matrix  # dO (L, Ev)
    grad_value: Matrix  # dV (S, Ev), this query head's share
    grad_weights: Matrix  # dP (L, S)
    row_dot: list[float]  # D (L,)
    grad_scores: Matrix  # dS (L, S), with respect to the scaled scores (through score_mod)
    grad_query: Matrix  # dQ (L, E)
    grad_key: Matrix  # dK (S, E), this query head's share
    live: list[int]  # the rows that take part (all but fully masked rows under "zero")
    grad_dropped: Matrix  # dP_d = dO V^T (L, S), before dropout's factors
    seen: list[list[int]] | None = None  # flex: the keys each row saw (None: every key)
    grad_sink: list[float] | None = None  # (L,) each row's term of d sink: -p_sink * D


def attend_backward(
    steps: Steps,
    q: Matrix,
    k: Matrix,
    v: Matrix,
    grad_output: Matrix,
    scale: float,
    masked_rows: str = "zero",
    keep: Matrix | None = None,
    *,
    b: int = 0,
    h: int = 0,
    score_mod: Callable[..., float] | None = None,
    flex: bool = False,
) -> Gradients:
    """The backward of `attend`: its steps mirrored, last first, for dO = grad_output (L, Ev).

    `steps` is attend's forward without dropout (P = steps.weights); `keep` holds dropout's
    factors (dropout_keep). score_mod is the variant's (unchecked) score change: its derivative
    comes from dual numbers. flex=True mirrors attend's flex form: only the keys a row saw take
    part in any sum, and D_i = sum_j P_ij dP_ij over them (SDPA's form: D_i = dO_i . O_i).
    Every sum is one fsum (scratch.backward.sdpa's module doc has the formulas)."""
    P, full = steps.weights, steps.fully_masked  # (L, S), (L,)
    L, S = len(P), len(k)
    seen = [[j for j, x in enumerate(row) if x != -inf] for row in steps.masked] if flex else None
    # a fully masked row under "zero" takes no part in the backward at all (never NaN)
    silent = [f and masked_rows == "zero" and not flex for f in full]
    # the forward's P_d and O = P_d V        (L, S) @ (S, Ev) -> (L, Ev)
    if keep is None:  # P_d = P: the forward's own output is O (zero on silent rows already)
        Pd, O = P, steps.output
    else:  # the forward ran without dropout, so O = P_d V is one more product
        Pd = [[p * f for p, f in zip(r, kr)] for r, kr in zip(P, keep)]
        O = matmul_nt(Pd, transpose_rows(v))
        O = [[0.0] * len(row) if s else row for row, s in zip(O, silent)]
    # step 6 back: dP_d = dO V^T             (L, Ev) @ (Ev, S) -> (L, S); flex: seen keys only
    if seen is None:
        grad_dropped = matmul_nt(grad_output, v)
    else:
        grad_dropped = [[0.0] * S for _ in range(L)]
        for g_i, row, keys in zip(grad_output, grad_dropped, seen):
            for j in keys:
                row[j] = dot(g_i, v[j])
    # step 5 back, dropout: dP = dP_d * keep (L, S); the forward's dropout mask, reused
    grad_weights = grad_dropped
    if keep is not None:
        grad_weights = [[g * f for g, f in zip(r, kr)] for r, kr in zip(grad_dropped, keep)]
    # step 5 back, softmax: D_i = sum_c dO_ic O_ic (L,), or sum_j P_ij dP_ij over seen keys
    if seen is None:
        row_dot = [dot(g, o) for g, o in zip(grad_output, O)]
    else:
        row_dot = [
            dot([p[j] for j in keys], [g[j] for j in keys])
            for p, g, keys in zip(P, grad_weights, seen)
        ]
    # dS = P * (dP - D)                      (L, S); a constant row (zero, uniform) gets 0
    grad_scores = [
        [0.0] * S if f and masked_rows != "nan" else [p * (g - d) for p, g in zip(Prow, grow)]
        for Prow, grow, d, f in zip(P, grad_weights, row_dot, full)
    ]
    # step 3 back: through score_mod, dS * score_mod'(scaled) (dual numbers), on the keys seen
    if score_mod is not None:
        for i, row, score in zip(range(L), grad_scores, steps.scores):
            for j in range(S) if seen is None else seen[i]:
                row[j] *= derivative(score_mod, score[j] * scale, b, h, i, j)
    # step 2 back: dQ = scale * dS K         (L, S) @ (S, E) -> (L, E)
    if seen is None:
        grad_query = matmul_nt(grad_scores, transpose_rows(k))
    else:
        columns = [[k_j[c] for k_j in k] for c in range(len(k[0]))]  # (E, S)
        grad_query = [
            [dot([d[j] for j in keys], [col[j] for j in keys]) for col in columns]
            for d, keys in zip(grad_scores, seen)
        ]
    grad_query = [[scale * x for x in row] for row in grad_query]
    grad_query = [[0.0] * len(row) if s else row for row, s in zip(grad_query, silent)]
    # the learned sink: a column with score sink and no value, so d sink = -p_sink * D per row
    grad_sink = None
    if flex and steps.sink_weights is not None:
        grad_sink = [-p_sink * d for p_sink, d in zip(steps.sink_weights, row_dot)]
    live = [i for i in range(L) if not silent[i]]
    grads = Gradients(
        q, P, Pd, O, grad_output, [], grad_weights, row_dot, grad_scores, grad_query, [], live,
        grad_dropped, seen, grad_sink,
    )  # fmt: skip
    # step 6 and step 2 back for k and v: dV = P_d^T dO, dK = scale * dS^T Q (this head's share)
    grads.grad_key, grads.grad_value = key_value_grads([grads], scale)
    return grads


def key_value_grads(heads: list[Gradients], scale: float) -> tuple[Matrix, Matrix]:
    """dK = scale * dS^T Q and dV = P_d^T dO summed over every query head that reads one kv head.

    The live rows of all `heads` are stacked first, so each entry is one fsum over every
    (head, row) term, not a sum of sums; with flex heads a key sums only the rows that saw it.
    A lone head's share, once attend_backward has summed it, is returned as it is.
    """
    first = heads[0]
    if len(heads) == 1 and first.grad_key:  # one head: the share attend_backward summed
        return first.grad_key, first.grad_value
    S, E, Ev = len(first.weights[0]), len(first.query[0]), len(first.grad_output[0])
    rows = [(g, i) for g in heads for i in g.live]
    if not rows:  # every row silent ("zero" policy, all masked): no gradient reaches k or v
        return [[0.0] * E for _ in range(S)], [[0.0] * Ev for _ in range(S)]
    if all(g.seen is None for g in heads):  # every row sees every key: two matrix products
        Pd = [g.dropped[i] for g, i in rows]  # (L', S)
        dO = [g.grad_output[i] for g, i in rows]  # (L', Ev)
        dS = [g.grad_scores[i] for g, i in rows]  # (L', S)
        q = [g.query[i] for g, i in rows]  # (L', E)
        # (S, L') @ (L', Ev) -> (S, Ev)
        grad_value = matmul_nt(transpose_rows(Pd), transpose_rows(dO))
        # (S, L') @ (L', E) -> (S, E), then the scale (one more rounding, as in the forward)
        dK = matmul_nt(transpose_rows(dS), transpose_rows(q))
        return [[scale * x for x in row] for row in dK], grad_value
    seeing = [[] for _ in range(S)]  # key j -> the (head, row) pairs that saw it
    for g, i in rows:
        for j in range(S) if g.seen is None else g.seen[i]:
            seeing[j].append((g, i))
    grad_key, grad_value = [], []
    for j, pairs in enumerate(seeing):
        dS, Pd = [g.grad_scores[i][j] for g, i in pairs], [g.dropped[i][j] for g, i in pairs]
        grad_key.append([scale * dot(dS, [g.query[i][c] for g, i in pairs]) for c in range(E)])
        grad_value.append([dot(Pd, [g.grad_output[i][c] for g, i in pairs]) for c in range(Ev)])
    return grad_key, grad_value


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
) -> list[Steps]:
    """attend() for every leading index, row-major; query head h reads kv head h // group."""
    added = mask is not None and not mask.is_bool  # a float mask is added at step 4
    return [
        attend(h.q, h.k, h.v, scale, h.mask_rows, masked_rows, dropout_p, rng, added=added)
        for h in heads_of(q, k, v, lead, group, mask)
    ]


def build_mask(options: Options, target: tuple[int, ...]) -> Mask | None:
    """The Mask for scores of shape `target` from the options' variant (None: no mask)."""
    variant = sdpa_variant(options, "the ground truth scaled_dot_product_attention")
    if isinstance(variant, Causal):
        return Mask.causal(target, variant)
    if isinstance(variant, GivenMask):
        return Mask.from_user(variant.attn_mask, target)
    return None


@dataclass(frozen=True)
class Head:
    """What one query head reads: its leading index, its key/value head's, and their slices."""

    index: tuple[int, ...]  # the query's leading index
    kv: tuple[int, ...]  # the key/value leading index it reads (h // group with GQA)
    q: Matrix  # (L, E)
    k: Matrix  # (S, E)
    v: Matrix  # (S, Ev)
    mask_rows: list[list] | None  # (L, S) of the broadcast mask; None without a mask


def heads_of(
    q: list, k: list, v: list, lead: tuple[int, ...], group: int, mask: Mask | None
) -> Iterator[Head]:
    """Every query head of q (..., L, E) in row-major order (the order dropout draws in), with
    the slices it reads: kv head h // group of k and v (grouped-query), its (L, S) mask."""
    for index in product(*map(range, lead)):
        kv = kv_index(index, group)  # grouped-query attention: h -> h // group
        mask_rows = mask.slice(index) if mask is not None else None
        yield Head(index, kv, at(q, index), at(k, kv), at(v, kv), mask_rows)


@dataclass(frozen=True)
class Prepared:
    """The validated inputs of one attention call, shared by the forward, rows and backward."""

    q: list  # (..., L, E)
    k: list  # (..., Hkv?, S, E)
    v: list  # (..., Hkv?, S, Ev)
    plan: AttentionPlan  # lead, kv_lead, L, S, E, Ev and the GQA group, decided once
    scale: float
    mask: Mask | None
    masked_rows: str

    def heads(self) -> Iterator[Head]:
        """Every query head in row-major order (the order dropout draws in), with its slices."""
        return heads_of(self.q, self.k, self.v, self.plan.lead, self.plan.group, self.mask)


def prepare(query: object, key: object, value: object, options: Options) -> Prepared:
    """Validate the arrays once (errors name the argument), plan the shapes, build the mask."""
    q, q_shape = as_tensor(query, "query", min_dims=2)
    k, k_shape = as_tensor(key, "key", min_dims=2)
    v, v_shape = as_tensor(value, "value", min_dims=2)
    plan = plan_attention(q_shape, k_shape, v_shape, options.enable_gqa)
    mask = build_mask(options, plan.scores_shape)
    return Prepared(q, k, v, plan, options.scale_for(plan.E), mask, options.masked_rows)


def forward(query: object, key: object, value: object, options: Options) -> tuple:
    """(output (..., L, Ev), weights (..., L, S), lse (..., L) or None without return_lse)."""
    p = prepare(query, key, value, options)
    lead = p.plan.lead
    steps = attend_all(p.q, p.k, p.v, lead, p.scale, p.mask, p.masked_rows, options.dropout_p,
                       options.rng, p.plan.group)  # fmt: skip
    output = stack([s.output for s in steps], lead)  # (..., L, Ev)
    weights = stack([s.weights for s in steps], lead)  # (..., L, S)
    lse = None
    if options.return_lse:  # step 5's log-denominator: log sum_j exp(masked_ij), fsum inside
        lse = stack([[log_sum_exp_row(row) for row in s.masked] for s in steps], lead)
    return output, weights, lse


def attention_of(query: object, key: object, value: object, options: Options) -> tuple:
    """softmax(q @ k^T * scale + mask) @ v in plain Python, every sum correctly rounded.

    Returns:
        (output (..., L, Ev), weights (..., L, S)), or (output, lse (..., L)) with
        return_lse=True.

    Examples:
        >>> import scratch
        >>> q = [[1.0, 0.0], [0.0, 1.0]]
        >>> output, weights = scratch.scaled_dot_product_attention(q, q, q, is_causal=True)
        >>> weights[0]
        [1.0, 0.0]
        >>> [round(w, 4) for w in weights[1]]
        [0.3302, 0.6698]
    """
    output, weights, lse = forward(query, key, value, options)
    return (output, lse) if options.return_lse else (output, weights)


scaled_dot_product_attention = forward_door(attention_of)

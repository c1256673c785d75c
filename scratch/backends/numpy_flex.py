"""flex_attention in NumPy: the ground truth's arguments and meaning (scratch/flex/forward.py),
arrays.

query (B, H, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev); score_mod, block_mask, scale,
enable_gqa, return_lse and sinks= as scratch.flex_attention. A variant's mods run as its array
forms; a user's own plain-Python score_mod / mask_mod is asked cell by cell (correct, but one
Python call per cell: slow beyond a few thousand cells). Two kernels:

- `explicit`: the whole (B, H, L, S) score matrix, score_mod and mask on all of it.
- `chunked` (the default): numpy_chunked's kernel, query chunks x key tiles, visiting only the
  tiles the block mask lists (its mask_mod evaluated only on tiles not marked full); within a
  chunk, runs of query blocks that each see the same number of key blocks, one further each
  time (a window's band), go in batched passes over exactly those tiles, the other rows tile
  by tile, one query block at a time (numpy_flex_plan.FlexPlan.bands).
A row that sees no key and has no sink gives output 0 and lse -inf; a learned sink adds
exp(sink[h]) to each row's denominator (no value) and is counted in the lse.
`create_block_mask` (numpy_flex_plan) makes the BlockMask by NumPy row bands: at L = 16384 the
ground truth's, one Python call per cell, would take minutes.

The backward (`flex_attention_backward`): dQ, dK, dV (and d sinks), explicit or tiled, by the
ground truth's formulas (scratch/flex/backward.py), per (b, h) and query row, p = weights,
r = raw scaled scores, s = score_mod(r) (masked: -inf):
  dV += p^T dO    dP = dO v^T    D = rowsum(dO * O)    dS = p (dP - D)
  dR = dS * score_mod'(r)   (the variant's score_grad_array; a user's score_mod: dual numbers,
                              cell by cell)
  dQ = scale dR k    dK = scale dR^T q    dsink[h] = -sum_rows exp(sink[h] - lse) D
- `explicit`: the whole (B, H, L, S) matrices (explicit_scores).
- `tiled` (the default): one (block, block) tile of P at a time, recomputed from the forward's
  lse, visiting only the key tiles the block mask lists for each query block (as the chunked
  forward does); the sinks' gradient needs only lse and D, no tile. Memory O(block^2) beyond
  the inputs and gradients.
"""

from __future__ import annotations

import numpy as np

from scratch.backends.numpy_chunk_rows import row_norms
from scratch.backends.numpy_chunked import KEY_BLOCK, chunked_output
from scratch.backends.numpy_flex_plan import FlexPlan, create_block_mask
from scratch.backends.numpy_inputs import GroupedHeads, _array, _dtype, forward_output, not_finite
from scratch.backends.numpy_threads import cores, share
from scratch.core.front_doors import flex_backward_door, flex_door
from scratch.core.options import FlexOptions, Options
from scratch.flex.forward import check_call
from scratch.ops.validate import (
    check_choice,
    check_flag,
    check_grad_output,
    check_positive_int,
    check_scale,
)
from scratch.variants.sinks import sink_logits

KERNELS = ("chunked", "explicit")
# Query rows per chunk when a block mask skips tiles (1024 without one): a chunk is one task
# for a worker thread, its fixed costs paid once per chunk (measured: docs/notes/numpy_chunked.md).
FLEX_CHUNK = 8192


PARALLEL_CHECK = 1 << 18  # elements of query, key and value together: the cores share the check


def finite_with_key_norms(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """max_j |k_j| per leading index of key (..., Hkv), once query, key and value are known to
    hold no inf or NaN (else ValueError naming the first that does). The chunked kernel's bound
    needs the key norms: finite when key's rows are (float32 overflow is redone in float64), so
    they check key in the pass that makes them; only where one is not is key read again. Large
    arrays are read by every core at once, each a share of the rows (a memory-bound pass: 0.25
    ms per 4 MiB array on one core, measured on the 2-core dev host)."""
    parts = cores() if q.size + k.size + v.size >= PARALLEL_CHECK else 1
    tasks = [
        (n, x[..., i * x.shape[-2] // parts : (i + 1) * x.shape[-2] // parts, :])
        for n, x in enumerate((q, k, v))
        for i in range(parts)
    ]
    found: list = [None] * len(tasks)

    def check(t: int) -> None:
        n, rows = tasks[t]
        if n == 1:  # key: the largest row norm of these rows (-inf when they are none)
            norms = row_norms(rows)
            found[t] = norms.max(axis=-1) if norms.shape[-1] else np.full(norms.shape[:-1], -np.inf)
        else:
            found[t] = bool(np.isfinite(rows).all())

    share(list(range(len(tasks))), min(parts, len(tasks)), check)
    k_norm = np.maximum.reduce(found[parts : 2 * parts])
    finite = (  # in order: the error names the first argument that holds one
        ("query", lambda: all(found[:parts])),
        ("key", lambda: np.isfinite(k_norm).all() or np.all(np.isfinite(k))),
        ("value", lambda: all(found[2 * parts :])),
    )
    for name, is_finite in finite:
        if not is_finite():
            raise not_finite(name)
    return k_norm


class FlexProblem(GroupedHeads):
    """Validated arrays of one call: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev)."""

    def __init__(self, query: object, key: object, value: object, options: FlexOptions):
        dtype = _dtype(None, query, key, value)
        self.q = _array(query, "query", dtype, finite=False)
        self.k = _array(key, "key", dtype, finite=False)
        self.v = _array(value, "value", dtype, finite=False)
        self.k_norm = finite_with_key_norms(self.q, self.k, self.v)  # (..., Hkv)
        # the ground truth's checks and words: 4-D shapes, heads, score_mod, block mask
        B, H, Hkv, L, S, E, Ev = check_call(self.q.shape, self.k.shape, self.v.shape, options)
        sinks = options.sinks
        if sinks is not None and hasattr(sinks, "tolist"):  # an array of logits
            sinks = [float(x) for x in np.asarray(sinks).reshape(-1)]
        self.shape = (B, H, Hkv, L, S, E, Ev)
        self.group = H // Hkv
        self.scale = check_scale(options.scale, E)
        self.dtype = dtype
        self.plan = FlexPlan(options.score_mod, options.block_mask, sink_logits(sinks, H))


def explicit_scores(x: FlexProblem) -> tuple[np.ndarray, np.ndarray]:
    """(raw, scores) over the whole grid: raw = scale q k^T, scores after score_mod and mask."""
    steps = explicit_steps(x)
    return steps[1], steps[3]


def explicit_steps(x: FlexProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dots, raw, changed, scores) over the whole grid (B, H, L, S): dots = q k^T, raw = dots
    * scale, changed = score_mod(raw), scores = changed with -inf where the mask hides a key."""
    B, H, _, L, S, _, _ = x.shape
    # step 1: scaled scores                 (B, H, L, E) @ (B, H, E, S) -> (B, H, L, S)
    dots = x.q @ np.swapaxes(x.repeat_kv(x.k), -1, -2)
    raw = dots * x.dtype.type(x.scale)
    b = np.arange(B).reshape(B, 1, 1, 1)
    h = np.arange(H).reshape(1, H, 1, 1)
    rows, cols = np.arange(L)[:, None], np.arange(S)[None, :]
    changed = raw
    with np.errstate(all="ignore"):  # masked cells may hold anything: they become -inf
        # step 2: the score change, then the mask (-inf where the key is not seen)
        if x.plan.score is not None:
            changed = x.plan.score(raw, b, h, rows, cols, np).astype(x.dtype, copy=False)
        scores = changed
        if x.plan.mask is not None:
            scores = np.where(dense_seen(x), changed, x.dtype.type(-np.inf))
    return dots, raw, changed, scores


def dense_seen(x: FlexProblem) -> np.ndarray:
    """(B, H, L, S) bools: the block mask's tiles, full ones seen whole, partial ones as its
    mask_mod says for each (b, h) (as the ground truth reads a broadcast block mask)."""
    B, H, _, L, S, _, _ = x.shape
    bm = x.plan.block_mask
    (bq, bk), (mb, mh) = bm.block_size, bm.shape[:2]
    seen = np.zeros((B, H, L, S), dtype=bool)
    for b in range(B):
        for h in range(H):
            for qb, tiles in enumerate(bm.kv_blocks[b if mb > 1 else 0][h if mh > 1 else 0]):
                rows = np.arange(qb * bq, min(qb * bq + bq, L))[:, None]  # (n, 1)
                for kb, full in tiles:
                    cols = np.arange(kb * bk, min(kb * bk + bk, S))[None, :]  # (1, w)
                    cells = True if full else x.plan.mask(b, h, rows, cols, np)
                    seen[b, h, rows, cols] = cells
    return seen


def softmax_lse(scores: np.ndarray, sink: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(weights (..., L, S), lse (..., L)) of masked scores in their dtype, with exp(sink) (an
    array broadcasting to (..., L); None: no sink) in each row's denominator; a row with no term
    at all: weights 0, lse -inf. NumPy's one explicit softmax (SDPA's explicit kernel too)."""
    top = scores.max(axis=-1)  # (..., L)
    if sink is not None:
        top = np.maximum(top, sink)
    # step 3: lse = top + log(sum_j exp(s_j - top) + exp(sink - top)); no term at all: -inf
    empty = np.isneginf(top)
    base = np.where(empty, 0, top)
    # one exp, in place in one new array (at 4096 tokens each (H, L, S) array is 64 MiB a head,
    # fresh memory costs page faults, and a second exp of the whole grid took longer than all
    # the rest of a window trace)
    weights = np.subtract(scores, base[..., None], dtype=scores.dtype)
    np.exp(weights, out=weights)  # exp(-inf) = 0 on masked keys
    total = weights.sum(axis=-1)
    if sink is not None:
        total = total + np.exp(sink - base)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, base + np.log(total)).astype(scores.dtype)
    # step 4: weights = exp(s - top) / total, 0 on masked keys and on rows that see nothing
    weights /= np.where(empty, 1, total)[..., None]
    return weights, lse


def explicit_softmax(x: FlexProblem, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weights (B, H, L, S), lse (B, H, L)) with the sinks in each row's denominator."""
    sinks = x.plan.sinks
    sink = None if sinks is None else sinks.astype(x.dtype).reshape(1, x.shape[1], 1)  # (1, H, 1)
    return softmax_lse(scores, sink)


def explicit(x: FlexProblem) -> tuple[np.ndarray, np.ndarray]:
    """(output, lse) from the whole score matrix."""
    weights, lse = explicit_softmax(x, explicit_scores(x)[1])
    # step 5: output = weights @ v          (B, H, L, S) @ (B, H, S, Ev) -> (B, H, L, Ev)
    return weights @ x.repeat_kv(x.v), lse


def variant_steps(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, rule, sinks) -> dict:
    """The explicit kernel on one example's heads q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev),
    every step kept, under a variant's mask/score rule and sinks (array_trace.attend_variant's
    `explicit`; its block mask from create_block_mask, the same rule object)."""
    H, L, S = q.shape[0], q.shape[1], k.shape[1]
    mask_mod = None if rule is None else rule.mask_mod
    score_mod = None if rule is None else rule.score_mod
    block_mask = None if mask_mod is None else create_block_mask(mask_mod, 1, H, L, S)
    flex = FlexOptions(score_mod, block_mask, scale, H != k.shape[0], sinks=sinks)
    x = FlexProblem(q[None], k[None], v[None], flex)  # (1, H, L, E), (1, Hkv, S, E|Ev)
    scores, _, scaled, masked = (m[0] for m in explicit_steps(x))  # (H, L, S) each
    weights, lse = (m[0] for m in explicit_softmax(x, masked[None]))  # (H, L, S), (H, L)
    sink_weights = None
    if sinks is not None:  # the sink's share of each row: exp(sink[h] - lse)
        sink = np.asarray(sinks.logits, dtype=x.dtype)[:, None]  # (H, 1)
        sink_weights = np.exp(sink - lse).astype(x.dtype, copy=False)
    v_all = x.repeat_kv(x.v)[0]  # (H, S, Ev)
    # output = weights @ v                  (H, L, S) @ (H, S, Ev) -> (H, L, Ev)
    output = weights @ v_all
    return dict(scores=scores, scaled=scaled, masked=masked, weights=weights, output=output,
                v_all=v_all, sink_weights=sink_weights)  # fmt: skip


def chunked(
    x: FlexProblem, chunk: int | None, block: int, lse: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """(output, lse) by numpy_chunked's kernel, visiting only the block mask's tiles (lse None
    when not asked for: the kernel then skips it)."""
    if chunk is None:
        chunk = 1024 if x.plan.block_mask is None else FLEX_CHUNK
    options = Options(return_lse=lse)  # masked_rows "zero": a row seeing nothing gives 0
    output, lse, _ = chunked_output(
        x.q, x.k, x.v, x.scale, None, options, None, x.group, chunk, block, x.plan, x.k_norm
    )
    return output, lse


def attention_of(
    query, key, value, options: FlexOptions, *, kernel: str = "chunked", chunk: int | None = None,
    block: int = KEY_BLOCK,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """FlexAttention in NumPy: output (B, H, L, Ev), and lse (B, H, L) with return_lse.

    kernel "chunked" (default; `chunk` query rows x `block` keys per tile) or "explicit".
    """
    check_choice(kernel, "kernel", KERNELS)
    return_lse = check_flag(options.return_lse, "return_lse")
    x = FlexProblem(query, key, value, options)
    output, lse = explicit(x) if kernel == "explicit" else chunked(x, chunk, block, return_lse)
    return (output, lse) if return_lse else output


flex_attention = flex_door(attention_of)


# ---------------------------------------------------------------- the backward

BACKWARD_KERNELS = ("tiled", "explicit")
BACKWARD_BLOCK = 128  # the tiled kernel's tile edge without a block mask (with one: its block size)


def _sink_grad(x: FlexProblem, lse: np.ndarray, row_dot: np.ndarray) -> np.ndarray | None:
    """d loss / d sink[h] = -sum over batch and rows of exp(sink[h] - lse) * D (None: no sinks)."""
    if x.plan.sinks is None:
        return None
    sink = x.plan.sinks.reshape(1, -1, 1)  # (1, H, 1)
    with np.errstate(invalid="ignore"):  # lse = sink at the least: never -inf with a sink
        p_sink = np.exp(sink - lse.astype(np.float64))  # (B, H, L)
    return (-(p_sink * row_dot.astype(np.float64)).sum(axis=(0, 2))).astype(x.dtype)


def explicit_backward(x: FlexProblem, g: np.ndarray):
    """Gradients with the whole (B, H, L, S) matrices."""
    B, H, _, L, S, _, _ = x.shape
    raw, scores = explicit_scores(x)
    P, lse = explicit_softmax(x, scores)  # (B, H, L, S), (B, H, L)
    k, v = x.repeat_kv(x.k), x.repeat_kv(x.v)
    output = P @ v  # (B, H, L, S) @ (B, H, S, Ev) -> (B, H, L, Ev)
    row_dot = np.sum(g * output, axis=-1)  # D (B, H, L)
    # step 1: dV = P^T dO                   (B, H, S, L) @ (B, H, L, Ev) -> (B, H, S, Ev)
    grad_value = np.swapaxes(P, -1, -2) @ g
    # step 2: dS = P (dO v^T - D), then through the score change
    dS = P * (g @ np.swapaxes(v, -1, -2) - row_dot[..., None])  # (B, H, L, S)
    if x.plan.grad is not None:
        b, h = np.arange(B).reshape(B, 1, 1, 1), np.arange(H).reshape(1, H, 1, 1)
        with np.errstate(all="ignore"):
            d = x.plan.grad(raw, b, h, np.arange(L)[:, None], np.arange(S)[None, :], np)
        dS = np.where(P > 0, dS * d, 0).astype(x.dtype, copy=False)
    scale = x.dtype.type(x.scale)
    # step 3: dQ = scale dS k, dK = scale dS^T q
    grad_query = (dS @ k) * scale  # (B, H, L, S) @ (B, H, S, E) -> (B, H, L, E)
    grad_key = (np.swapaxes(dS, -1, -2) @ x.q) * scale  # (B, H, S, L) @ (B, H, L, E)
    grads = (grad_query, x.sum_groups(grad_key), x.sum_groups(grad_value))
    return grads, _sink_grad(x, lse, row_dot)


def tiled_backward(x: FlexProblem, g: np.ndarray, output: np.ndarray, lse: np.ndarray, block: int):
    """Gradients one tile at a time, only on the tiles the block mask lists."""
    B, H, Hkv, L, S, E, Ev = x.shape
    scale = x.dtype.type(x.scale)
    rows_per = block if x.plan.block_mask is None else x.plan.block_mask.block_size[0]
    # step 0: D = rowsum(dO * O) once per row; lse 0 where the row saw nothing (its P is 0)
    row_dot = np.sum(g * output, axis=-1)  # (B, H, L)
    base = np.where(np.isneginf(lse), 0, lse).astype(x.dtype)
    grad_query = np.zeros(x.q.shape, x.dtype)  # (B, H, L, E)
    grad_key = np.zeros((B, H, S, E), x.dtype)  # per query head, groups summed at the end
    grad_value = np.zeros((B, H, S, Ev), x.dtype)
    for b in range(B):
        for h in range(H):
            kv = h // x.group
            q, k, v = x.q[b, h], x.k[b, kv], x.v[b, kv]  # (L, E), (S, E), (S, Ev)
            for i0 in range(0, L, rows_per):
                i1 = min(i0 + rows_per, L)
                q_i, g_i = q[i0:i1], g[b, h, i0:i1]  # (n, E), (n, Ev)
                for j0, j1, parts in x.plan.key_tiles(b, h, i0, i1, S, block):
                    # step 1: recompute the tile of P from the forward's lse
                    raw = (q_i @ k[j0:j1].T) * scale  # (n, E) @ (E, w) -> (n, w)
                    s = raw.copy()
                    x.plan.apply(s, b, h, i0, j0, parts)
                    P = np.exp(s - base[b, h, i0:i1, None])  # (n, w), 0 where masked
                    # step 2: dV_j += P^T dO_i      (w, n) @ (n, Ev) -> (w, Ev)
                    grad_value[b, h, j0:j1] += P.T @ g_i
                    # step 3: dS = P (dO_i v_j^T - D_i), through the score change
                    dS = P * (g_i @ v[j0:j1].T - row_dot[b, h, i0:i1, None])  # (n, w)
                    if x.plan.grad is not None:
                        d = x.plan.score_grad(raw, b, h, i0, j0)
                        dS = np.where(P > 0, dS * d, 0).astype(x.dtype, copy=False)
                    # step 4: dQ_i += scale dS k_j, dK_j += scale dS^T q_i
                    grad_query[b, h, i0:i1] += (dS @ k[j0:j1]) * scale  # (n, w) @ (w, E)
                    grad_key[b, h, j0:j1] += (dS.T @ q_i) * scale  # (w, n) @ (n, E)
    grads = (grad_query, x.sum_groups(grad_key), x.sum_groups(grad_value))
    return grads, _sink_grad(x, lse, row_dot)


def gradients_of(
    query, key, value, grad_output, options: FlexOptions, *, kernel: str = "tiled",
    block: int = BACKWARD_BLOCK, output=None, lse=None,
) -> tuple:  # fmt: skip
    """(grad_query, grad_key, grad_value), plus grad_sinks (H,) when sinks are given.

    kernel "tiled" (default) takes the forward's `output` and `lse` (flex_attention
    with return_lse=True, same arguments) or computes them with the chunked kernel; "explicit"
    holds the whole score matrix.
    """
    check_choice(kernel, "kernel", BACKWARD_KERNELS)
    x = FlexProblem(query, key, value, options)
    B, H, _, L, _, _, Ev = x.shape
    g = _array(grad_output, "grad_output", x.dtype)
    check_grad_output(g.shape, (B, H, L, Ev))
    if kernel == "explicit":
        grads, d_sinks = explicit_backward(x, g)
    else:
        block = check_positive_int(block, "block")
        given = forward_output(output, lse, g.shape, x.dtype, "flex_attention, return_lse")
        output, lse = given if given is not None else chunked(x, None, block)
        grads, d_sinks = tiled_backward(x, g, output, lse, block)
    return grads if d_sinks is None else (*grads, d_sinks)


flex_attention_backward = flex_backward_door(gradients_of)


__all__ = ["FlexProblem", "create_block_mask", "flex_attention", "flex_attention_backward"]

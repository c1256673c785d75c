"""flex_attention's backward in NumPy: dQ, dK, dV (and d sinks), explicit or tiled.

The ground truth's formulas (scratch/flex_backward.py), per (b, h) and query row, p = weights,
r = raw scaled scores, s = score_mod(r) (masked: -inf):
  dV += p^T dO    dP = dO v^T    D = rowsum(dO * O)    dS = p (dP - D)
  dR = dS * score_mod'(r)   (the variant's score_grad_array; a user's score_mod: dual numbers,
                              cell by cell)
  dQ = scale dR k    dK = scale dR^T q    dsink[h] = -sum_rows exp(sink[h] - lse) D
- `explicit`: the whole (B, H, L, S) matrices (numpy_flex.explicit_scores).
- `tiled` (the default): one (block, block) tile of P at a time, recomputed from the forward's
  lse, visiting only the key tiles the block mask lists for each query block (as the chunked
  forward does); the sinks' gradient needs only lse and D, no tile. Memory O(block^2) beyond
  the inputs and gradients.
"""

from __future__ import annotations

import numpy as np

from ..front_doors import flex_backward_door
from ..options import FlexOptions
from ..validate import check_grad_output, check_positive_int
from .numpy_flex import FlexProblem, chunked, explicit_scores, explicit_softmax
from .numpy_inputs import _array, forward_output

KERNELS = ("tiled", "explicit")
BLOCK = 128  # the tiled kernel's tile edge without a block mask (with one: its block size)


def _sink_grad(x: FlexProblem, lse: np.ndarray, row_dot: np.ndarray) -> np.ndarray | None:
    """d loss / d sink[h] = -sum over batch and rows of exp(sink[h] - lse) * D (None: no sinks)."""
    if x.plan.sinks is None:
        return None
    sink = x.plan.sinks.reshape(1, -1, 1)  # (1, H, 1)
    with np.errstate(invalid="ignore"):  # lse = sink at the least: never -inf with a sink
        p_sink = np.exp(sink - lse.astype(np.float64))  # (B, H, L)
    return (-(p_sink * row_dot.astype(np.float64)).sum(axis=(0, 2))).astype(x.dtype)


def explicit(x: FlexProblem, g: np.ndarray):
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


def tiled(x: FlexProblem, g: np.ndarray, output: np.ndarray, lse: np.ndarray, block: int):
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
    block: int = BLOCK, output=None, lse=None,
) -> tuple:  # fmt: skip
    """(grad_query, grad_key, grad_value), plus grad_sinks (H,) when sinks are given.

    kernel "tiled" (default) takes the forward's `output` and `lse` (numpy_flex.flex_attention
    with return_lse=True, same arguments) or computes them with the chunked kernel; "explicit"
    holds the whole score matrix.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {', '.join(KERNELS)}, found {kernel!r}")
    x = FlexProblem(query, key, value, options)
    B, H, _, L, _, _, Ev = x.shape
    g = _array(grad_output, "grad_output", x.dtype)
    check_grad_output(g.shape, (B, H, L, Ev))
    if kernel == "explicit":
        grads, d_sinks = explicit(x, g)
    else:
        block = check_positive_int(block, "block")
        given = forward_output(output, lse, g.shape, x.dtype, "flex_attention, return_lse")
        output, lse = given if given is not None else chunked(x, None, block)
        grads, d_sinks = tiled(x, g, output, lse, block)
    return grads if d_sinks is None else (*grads, d_sinks)


flex_attention_backward = flex_backward_door(gradients_of)


__all__ = ["flex_attention_backward"]

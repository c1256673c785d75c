"""The backward pass of attention in NumPy: explicit (whole P) and tiled (FlashAttention-2 style).

For one head, with P = softmax(S), S = scale * Q K^T + mask, P_d = P after dropout, O = P_d V:
dV = P_d^T dO; dP = (dO V^T) * keep / (1-p); D = rowsum(dO * O); dS = P * (dP - D);
dQ = scale * dS K; dK = scale * dS^T Q. GQA sums dK and dV over each group's query heads.

- `explicit` keeps the whole (L, S) P, as the ground truth does.
- `tiled` never holds more than a (block, block) tile of P: it recomputes P_ij = exp(S_ij - lse_i)
  from the forward's log-sum-exp per row (`forward_with_lse`), loops over key blocks outside and
  query blocks inside, accumulates dK, dV per key block and dQ across key blocks, and skips the
  blocks above the causal diagonal. Memory O(L * block) beyond the inputs and gradients. With
  dropout it reads the forward's keep mask (L * S bools, a tile at a time): the project's rng
  rule is one sequential stream (the ground truth's), which cannot be regenerated per tile the
  way FlashAttention's counter-based Philox can.
Rows with every key masked follow `masked_rows` as in the ground truth (scratch/backward/sdpa.py).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from scratch.backends import numpy_backend, numpy_backward_tiles
from scratch.backends.numpy_backend import add_mask, build_mask
from scratch.backends.numpy_inputs import Draws, GroupedHeads, _array, _dtype, forward_output
from scratch.core.front_doors import backward_door, forward_door
from scratch.core.options import Options
from scratch.ops.plan import plan_attention
from scratch.ops.validate import check_choice, check_positive_int
from scratch.variants import Causal

KERNELS = ("explicit", "tiled")
BLOCK = 64  # the general tiled loop's tile edge (the fast loop has its own: numpy_backward_tiles)


# ---------------------------------------------------------------- inputs


class _Problem(GroupedHeads):
    """Validated inputs of one call, as arrays, with the GQA group size."""

    def __init__(self, query, key, value, options: Options, dtype):
        dtype = _dtype(dtype, query, key, value)
        self.q = _array(query, "query", dtype)
        self.k = _array(key, "key", dtype)
        self.v = _array(value, "value", dtype)
        plan = plan_attention(self.q.shape, self.k.shape, self.v.shape, options.enable_gqa)
        self.plan = plan
        self.lead, self.L, self.S, self.E, self.Ev = plan.lead, plan.L, plan.S, plan.E, plan.Ev
        self.scale = options.scale_for(plan.E)
        self.dropout_p = options.dropout_p
        self.masked_rows = options.masked_rows
        # causal: None here, tiles built on the fly (masked); a given mask: its full array
        self.mask = build_mask(options, dtype, plan.scores_shape, explicit=False)
        variant = options.attention_variant  # build_mask refused what this cannot compute
        self.causal = variant if isinstance(variant, Causal) else None
        self.group = plan.group
        self.dtype = dtype

    def grad_output(self, grad_output: object) -> np.ndarray:
        """dO checked against the output's shape."""
        g = _array(grad_output, "grad_output", self.dtype)
        self.plan.check_grad_output(g.shape)
        return g

    def masked(self, q, k, rows=slice(None), cols=slice(None)) -> np.ndarray:
        """S = scale * q k^T + mask for a tile of query rows and key columns."""
        # step 1: scores, scaled               (..., l, E) @ (..., E, s) -> (..., l, s)
        scaled = (q @ np.swapaxes(k, -1, -2)) * self.dtype.type(self.scale)
        m = None
        if self.causal is not None:
            m = self.causal.tile(range(self.L)[rows], range(self.S)[cols])  # (l, s) bool
        elif self.mask is not None:
            m = np.broadcast_to(self.mask, self.lead + (self.L, self.S))[..., rows, cols]
        # step 2: -inf added where masked (a bool mask), or the float mask added
        return add_mask(scaled, m)


# ---------------------------------------------------------------- forward with log-sum-exp


def _keep_mask(p: _Problem, rng: object) -> np.ndarray | None:
    """The forward's keep mask (..., L, S) bools (True: the weight is kept), or None."""
    if p.dropout_p == 0.0:
        return None
    # the numpy forward's draws (Generator, seed, Random); rng None: the `random` module's stream
    return Draws(random if rng is None else rng)(p.lead + (p.L, p.S)) >= p.dropout_p


def dropped(x: np.ndarray, keep: np.ndarray, p: _Problem) -> np.ndarray:
    """x times the dropout factor (1/(1-p) where kept, 0 where dropped): x * keep exactly
    (times 1 or 0), then * 1/(1-p): the same bits as x * (1/(1-p) or 0), NaN stays NaN."""
    return x * keep * p.dtype.type(1.0 / (1.0 - p.dropout_p))


def _weights(p: _Problem, masked: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """P = exp(S - lse) on rows with a live key; fully masked rows follow the policy."""
    full = np.isneginf(lse)  # (..., l, 1)
    P = np.exp(masked - np.where(full, 0, lse))  # exp(-inf) = 0 on masked keys
    fill = {"zero": 0.0, "nan": np.nan, "uniform": 1.0 / p.S}[p.masked_rows]
    return np.where(full, p.dtype.type(fill), P).astype(p.dtype, copy=False)


def _forward(p: _Problem, keep: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output, lse, P) with the whole P; lse = -inf on fully masked rows."""
    k, v = p.repeat_kv(p.k), p.repeat_kv(p.v)
    masked = p.masked(p.q, k)  # (..., L, S)
    # step 3: lse_i = max_i + log(sum_j exp(S_ij - max_i)), the row's softmax denominator
    top = masked.max(axis=-1, keepdims=True)  # (..., L, 1)
    full = np.isneginf(top)
    total = np.exp(masked - np.where(full, 0, top)).sum(axis=-1, keepdims=True)
    lse = np.where(full, -np.inf, top + np.log(np.where(full, 1, total)))
    P = _weights(p, masked, lse)
    Pd = P if keep is None else dropped(P, keep, p)
    # step 4: output = P_d @ v                (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    output = Pd @ v
    if p.masked_rows == "zero":
        output = np.where(full, p.dtype.type(0.0), output)
    return output, lse[..., 0].astype(p.dtype, copy=False), P


def _forward_tiled(p: _Problem, keep: np.ndarray | None, block: int):
    """(output, lse) by online softmax over key blocks: O(L * block) memory, no whole P."""
    output = np.zeros(p.lead + (p.L, p.Ev), p.dtype)
    lse = np.full(p.lead + (p.L,), -np.inf, p.dtype)
    for i0 in range(0, p.L, block):
        rows = slice(i0, min(i0 + block, p.L))
        q_i = p.q[..., rows, :]
        top = np.full(q_i.shape[:-1] + (1,), -np.inf, p.dtype)  # running max  (..., b, 1)
        total = np.zeros_like(top)  # running sum of exp(S - top)
        acc = np.zeros(q_i.shape[:-1] + (p.Ev,), p.dtype)  # running sum of exp * keep * v
        i1 = min(i0 + block, p.L)
        last = p.causal.keys_seen(i0, i1, p.S) if p.causal is not None else p.S  # causal: fewer
        for j0 in range(0, last, block):
            cols = slice(j0, min(j0 + block, p.S))
            masked = p.masked(q_i, p.repeat_kv(p.k[..., cols, :]), rows, cols)  # (..., b, b)
            # step 1: new running max; rescale what was summed under the old one
            new_top = np.maximum(top, masked.max(axis=-1, keepdims=True))
            safe = np.where(np.isneginf(new_top), 0, new_top)
            shrink = np.exp(np.where(np.isneginf(top), -np.inf, top - safe))
            e = np.exp(masked - safe)  # (..., b, b)
            total = total * shrink + e.sum(axis=-1, keepdims=True)
            ed = e if keep is None else dropped(e, keep[..., rows, cols], p)
            # step 2: acc = acc * shrink + e @ v_j     (..., b, b) @ (..., b, Ev) -> (..., b, Ev)
            acc = acc * shrink + ed @ p.repeat_kv(p.v[..., cols, :])
            top = new_top
        full = np.isneginf(top)
        lse[..., rows] = np.where(full, -np.inf, top + np.log(np.where(full, 1, total)))[..., 0]
        out = acc / np.where(full, 1, total)
        if p.masked_rows == "nan":
            out = np.where(full, np.nan, out)
        elif p.masked_rows == "uniform":  # weights 1/S on every key (times the dropout factors)
            w = np.full(q_i.shape[:-1] + (p.S,), 1.0 / p.S, p.dtype)
            w = w if keep is None else dropped(w, keep[..., rows, :], p)
            out = np.where(full, w @ p.repeat_kv(p.v), out)
        output[..., rows, :] = out
    return output, lse


def output_and_lse(
    query, key, value, options: Options, *, rng=None, dtype=None
) -> tuple[np.ndarray, np.ndarray]:
    """(output (..., L, Ev), lse (..., L)): the NumPy backend's chunked forward with return_lse.

    The same kernel as `get("numpy").scaled_dot_product_attention(..., need_weights=False,
    return_lse=True)`: the lse comes from the running sums it already keeps (no extra pass),
    and both arrays are in the dtype the tiled backward computes in (float32 when every input
    is float32, else float64). lse_i = log sum_j exp(S_ij), -inf on fully masked rows; dropout
    draws as the backward's rng rule (rng None: the `random` module's stream)."""
    result = numpy_backend.attention_result(
        query, key, value, dataclasses.replace(options, return_lse=True),
        rng=random if rng is None else rng, need_weights=False, dtype=dtype,
    )  # fmt: skip
    return result[0], result[1]


forward_with_lse = forward_door(output_and_lse, own_rng=True)


# ---------------------------------------------------------------- the explicit backward


def _explicit(p: _Problem, g: np.ndarray, keep: np.ndarray | None, given: tuple | None = None):
    """dQ, dK, dV with the whole (..., L, S) P: the forward's (given: (output, P)) or recomputed."""
    k, v = p.repeat_kv(p.k), p.repeat_kv(p.v)  # (..., Hq, S, E), (..., Hq, S, Ev)
    if given is None:
        output, lse, P = _forward(p, keep)  # P (..., L, S), recomputed from q and k
        full = np.isneginf(lse[..., None])  # (..., L, 1)
    else:
        output, P = given  # the forward's own: nothing recomputed
        full = ~_live_rows(p)[..., None]  # (..., L, 1)
    Pd = P if keep is None else dropped(P, keep, p)
    # step 1: dV = P_d^T dO                   (..., S, L) @ (..., L, Ev) -> (..., S, Ev)
    grad_value = np.swapaxes(Pd, -1, -2) @ g
    # step 2: dP = dO V^T, times the forward's dropout factors
    grad_weights = g @ np.swapaxes(v, -1, -2)  # (..., L, Ev) @ (..., Ev, S) -> (..., L, S)
    if keep is not None:
        grad_weights = dropped(grad_weights, keep, p)
    # step 3: D_i = sum_c dO_ic O_ic          (..., L, 1)
    row_dot = np.sum(g * output, axis=-1, keepdims=True)
    # step 4: dS = P * (dP - D), in dP's array (two passes, no new (L, S) array); a constant
    # row ("zero", "uniform") gets no gradient
    grad_scores = np.subtract(grad_weights, row_dot, out=grad_weights)
    grad_scores = np.multiply(P, grad_scores, out=grad_scores)
    if p.masked_rows != "nan" and full.any():
        grad_scores = np.where(full, p.dtype.type(0.0), grad_scores)
    # step 5: dQ = scale * dS K               (..., L, S) @ (..., S, E) -> (..., L, E)
    grad_query = (grad_scores @ k) * p.dtype.type(p.scale)
    # step 6: dK = scale * dS^T Q             (..., S, L) @ (..., L, E) -> (..., S, E)
    grad_key = (np.swapaxes(grad_scores, -1, -2) @ p.q) * p.dtype.type(p.scale)
    return grad_query, p.sum_groups(grad_key), p.sum_groups(grad_value)


def _given_weights(p: _Problem, kernel: str, output: object, weights: object) -> tuple | None:
    """The forward's (output, weights) as arrays for the explicit kernel, or None when weights
    is not given; ValueError naming what is missing or the wrong shape."""
    if weights is None:
        return None
    if kernel != "explicit":
        raise ValueError(
            f"weights: read by the explicit kernel only, found kernel={kernel!r} "
            f"(the tiled kernel takes the forward's output and lse)"
        )
    if output is None:
        raise ValueError("weights: pass the same forward's output too (output=)")
    if p.dropout_p > 0.0:
        raise ValueError(
            f"weights: only without dropout (the forward's weights are dropped ones), "
            f"found dropout_p={p.dropout_p}"
        )
    shape = p.lead + (p.L, p.S)
    output, weights = np.asarray(output, p.dtype), np.asarray(weights, p.dtype)
    if output.shape != p.lead + (p.L, p.Ev) or weights.shape != shape:
        raise ValueError(
            f"output, weights: expected shapes {p.lead + (p.L, p.Ev)} (..., L, Ev) and {shape} "
            f"(..., L, S), found {output.shape} and {weights.shape}"
        )
    return output, weights


# ---------------------------------------------------------------- the tiled backward


def _tiled(p: _Problem, g: np.ndarray, keep, output, lse, block: int | None):
    """dQ, dK, dV: the fast loop (numpy_backward_tiles) where it applies, else `_tiled_general`;
    block None: each loop's own tile sizes, an int: (block, block) tiles in either."""
    if numpy_backward_tiles.applies(p, lse):
        sizes = () if block is None else (block, block)  # None: the fast loop's own tiles
        found = numpy_backward_tiles.gradients(p, g, keep, output, lse, *sizes)
        if found is not None:
            dq, dk, dv, _ = found
            return dq, p.sum_groups(dk), p.sum_groups(dv)
    return _tiled_general(p, g, keep, output, lse, block or BLOCK)


def _tiled_general(p: _Problem, g: np.ndarray, keep, output, lse, block: int):
    """dQ, dK, dV one (block, block) tile of P at a time, P recomputed from lse."""
    L, S = p.L, p.S
    q, dtype, scale = p.q, p.dtype, p.dtype.type(p.scale)
    full = np.isneginf(lse)[..., None]  # (..., L, 1)
    # step 0: D_i = sum_c dO_ic O_ic once per row (O(L) memory)
    row_dot = np.sum(g * output, axis=-1, keepdims=True)  # (..., L, 1)
    grad_query = np.zeros(q.shape, dtype)  # (..., L, E), accumulated over key blocks
    grad_key = np.zeros(p.lead + (S, p.E), dtype)  # per query head, summed over groups at the end
    grad_value = np.zeros(p.lead + (S, p.Ev), dtype)
    for j0 in range(0, S, block):  # outer loop: one block of keys, its dK and dV stay local
        cols = slice(j0, min(j0 + block, S))
        k_j = p.repeat_kv(p.k[..., cols, :])  # (..., Hq, b, E)
        v_j = p.repeat_kv(p.v[..., cols, :])  # (..., Hq, b, Ev)
        first_row = p.causal.first_query(j0) if p.causal is not None else 0  # rows above: none
        for i0 in range(first_row - first_row % block, L, block):  # inner loop: query blocks
            rows = slice(i0, min(i0 + block, L))
            # step 1: recompute the tile of P from the stored log-sum-exp
            lse_i = lse[..., rows, None]  # (..., b, 1)
            P = _weights(p, p.masked(q[..., rows, :], k_j, rows, cols), lse_i)  # (..., b, b)
            Pd = P if keep is None else dropped(P, keep[..., rows, cols], p)
            g_i = g[..., rows, :]  # (..., b, Ev)
            # step 2: dV_j += P_d^T dO_i          (..., b, b) @ (..., b, Ev) -> (..., b, Ev)
            grad_value[..., cols, :] += np.swapaxes(Pd, -1, -2) @ g_i
            # step 3: dP = dO_i V_j^T (times the dropout factors)   -> (..., b, b)
            dP = g_i @ np.swapaxes(v_j, -1, -2)
            if keep is not None:
                dP = dropped(dP, keep[..., rows, cols], p)
            # step 4: dS = P * (dP - D_i), 0 on constant rows unless the policy is "nan"
            dS = P * (dP - row_dot[..., rows, :])
            if p.masked_rows != "nan":
                dS = np.where(full[..., rows, :], dtype.type(0.0), dS)
            # step 5: dQ_i += scale * dS K_j      (..., b, b) @ (..., b, E) -> (..., b, E)
            grad_query[..., rows, :] += (dS @ k_j) * scale
            # step 6: dK_j += scale * dS^T Q_i    (..., b, b) @ (..., b, E) -> (..., b, E)
            grad_key[..., cols, :] += (np.swapaxes(dS, -1, -2) @ q[..., rows, :]) * scale
    return grad_query, p.sum_groups(grad_key), p.sum_groups(grad_value)


# ---------------------------------------------------------------- public entry point


def gradients_of(
    query, key, value, grad_output, options: Options, *, rng=None, dtype=None,
    kernel="explicit", block_size=None, output=None, lse=None, weights=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(grad_query, grad_key, grad_value) in NumPy, the ground truth's arguments and meanings.

    `kernel` is "explicit" or "tiled"; the tiled kernel takes the forward's `output` and `lse`
    (from forward_with_lse, or any backend's forward with return_lse=True, same arguments) or
    computes them itself. The same `rng` state reproduces the forward's dropout mask (numpy
    forward's rule). block_size: None, each tiled loop's own tiles (numpy_backward_tiles'
    512 x 256 where it applies, else BLOCK x BLOCK); an int, square tiles of that edge.
    `weights` with `output`: the explicit kernel reads the forward's weights P (..., L, S) (the
    numpy forward's need_weights=True, same arguments, no dropout) instead of recomputing them.
    """
    check_choice(kernel, "kernel", KERNELS)
    p = _Problem(query, key, value, options, dtype)
    g = p.grad_output(grad_output)
    keep = _keep_mask(p, rng)
    given_weights = _given_weights(p, kernel, output, weights)
    if kernel == "explicit":
        return _explicit(p, g, keep, given_weights)
    block = None if block_size is None else check_positive_int(block_size, "block_size")
    given = forward_output(output, lse, g.shape, p.dtype, "forward_with_lse")
    if given is not None:
        output, lse = given
        _check_lse(p, lse)
    elif keep is None:  # the chunked forward (forward_with_lse's kernel)
        output, lse = output_and_lse(p.q, p.k, p.v, options, dtype=p.dtype)
    else:  # dropout: this call's keep mask (the rng stream was read above)
        output, lse = _forward_tiled(p, keep, block or BLOCK)
    return _tiled(p, g, keep, output, lse, block)


def _live_rows(p: _Problem) -> np.ndarray:
    """Whether each query row sees at least one key: (L,) or the mask's (..., L) bools."""
    if p.causal is not None:  # row i sees a key iff i + shift >= 0
        return np.arange(p.L) + p.causal.shift >= 0  # (L,)
    if p.mask is None:
        return np.ones(p.L, dtype=bool)
    m = np.broadcast_to(p.mask, p.lead + (p.L, p.S))
    return m.any(axis=-1) if m.dtype == np.bool_ else (m > -np.inf).any(axis=-1)


def _check_lse(p: _Problem, lse: np.ndarray) -> None:
    """A forward's lse: finite on every row that sees a key, -inf on a fully masked one
    (ValueError naming the first row that breaks it: P recomputed from a wrong lse is wrong)."""
    live = np.broadcast_to(_live_rows(p), lse.shape)
    bad = np.where(live, ~np.isfinite(lse), ~np.isneginf(lse))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        want = "a finite number (the row sees keys)" if live[index] else "-inf (a fully masked row)"
        where = "".join(f"[{i}]" for i in index)
        raise ValueError(
            f"lse{where}: expected {want}, found {float(lse[index])!r}; pass the forward's own "
            f"(forward_with_lse, or return_lse=True with the same arguments)"
        )


scaled_dot_product_attention_backward = backward_door(gradients_of, own_rng=True)

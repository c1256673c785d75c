"""The tiled backward's fast loop: kept workspaces, exp2 with the scale folded, a worker per core.

Used by numpy_backward's `tiled` kernel when every row has a live key (lse finite), the mask is
none or causal, and masked_rows needs no special row; the general loop handles the rest.
For one key block j (a task) and each query tile i it may see (causal: tiles above the diagonal
skipped, only tiles crossing it masked), in buffers the worker keeps between tasks and calls:

    s  = q_i k_j^T c - lse_i c                (c = scale log2(e) folded into q and lse: exp2)
    P  = exp2(s)                              (exp and c = scale where exp2 has no SIMD)
    dV_j += P_d^T dO_i     dP = (dO_i v_j^T) keep_ij     dS = P (dP - D_i)
    dQ_i += dS k_j         dK_j += dS^T q_i

with P_d = P keep_ij / (1 - p) (keep: the forward's keep mask, bools read per tile) and the
scale applied once to dQ and dK at the end. The row terms ride in the products: q c gets a
last column -lse c and k_j a column of ones, so one (n, E+1) @ (E+1, b) product gives s (an
inner size of 65 costs OpenBLAS what 64 does, a separate subtraction 12% of that product);
without dropout dO gets a column -D and v_j ones the same way (dropout multiplies dO v^T alone).
dK_j and dV_j stay in the worker until the key block is done; dQ goes to the worker's own
(..., L, E) array, summed over workers at the end. Extra memory: O(L * (E + Ev)) for the two
widened copies and O(workers * (L * E + tile)), each thread's kept for its next call.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading

import numpy as np

from scratch.backends.numpy_chunked import PARALLEL_MIN, kernel_detail
from scratch.backends.numpy_threads import cores, share, single_threaded_blas

KEY_BLOCK = 256  # keys per task (outer loop); dK_j, dV_j (256, E) stay in cache
QUERY_TILE = 512  # query rows per tile: two (512, 256) float32 tiles, 1 MiB, kept per worker
_LOCAL = threading.local()  # each thread's workspace, kept between calls


class _Workspace:
    """One worker's buffers for tiles of (rows, keys) and widths E, Ev."""

    def __init__(self, rows: int, keys: int, E: int, Ev: int, dtype: np.dtype):
        self.s = np.empty((rows, keys), dtype)  # scores, then P
        self.dp = np.empty((rows, keys), dtype)  # dP, then dS
        self.dq = np.empty((rows, E), dtype)  # one tile's dS k_j
        self.dk = np.empty((keys, E), dtype)  # the key block's dK_j (unscaled)
        self.dv = np.empty((keys, Ev), dtype)  # the key block's dV_j
        self.dk_part = np.empty((keys, E), dtype)
        self.dv_part = np.empty((keys, Ev), dtype)
        self.k_one = np.ones((keys, E + 1), dtype)  # [k_j | 1]: the last column stays 1
        self.v_one = np.ones((keys, Ev + 1), dtype)  # [v_j | 1]


def _workspace(rows: int, keys: int, E: int, Ev: int, dtype: np.dtype) -> _Workspace:
    """This thread's workspace for these sizes, made once (fresh pages cost page faults)."""
    key = (rows, keys, E, Ev, np.dtype(dtype).name)
    if getattr(_LOCAL, "key", None) != key:
        _LOCAL.key, _LOCAL.space = key, _Workspace(rows, keys, E, Ev, dtype)
    return _LOCAL.space


def _kept(name: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """This thread's array `name`, kept between calls while the shape stays (a fresh MiB costs
    about 1 ms of page faults on this host: 7 MiB of them were 5% of a call at L = 4096)."""
    arrays = _LOCAL.__dict__.setdefault("arrays", {})
    found = arrays.get(name)
    if found is None or found.shape != shape or found.dtype != dtype:
        found = arrays[name] = np.empty(shape, dtype)
    return found


def applies(p, lse: np.ndarray) -> bool:
    """Whether the fast loop computes this call: no mask or a causal one, every lse finite."""
    return p.mask is None and bool(np.isfinite(lse).all())


def gradients(p, g, keep, output, lse, rows_per_tile=QUERY_TILE, keys_per_task=KEY_BLOCK):
    """(dQ, dK, dV) per query head (dK, dV before the GQA sum) and the kernel's detail; None
    when q times the folded scale leaves the float range (the general loop scales each tile)."""
    L, S, E, Ev, dtype = p.L, p.S, p.E, p.Ev, p.dtype
    exp_name, detail = kernel_detail(dtype, False)
    exp = np.exp2 if exp_name == "exp2" else np.exp
    base = math.log2(math.e) if exp_name == "exp2" else 1.0  # natural units -> exp's base
    # [q c | -lse c]: the scale (and log2 e) folded in once, the row's lse as a last column
    q_lse = _kept("q_lse", p.lead + (L, E + 1), dtype)  # (..., L, E+1)
    with np.errstate(over="ignore"):
        np.multiply(p.q, dtype.type(p.scale * base), out=q_lse[..., :E])
    if not np.isfinite(q_lse[..., :E]).all():
        return None
    np.multiply(lse, dtype.type(-base), out=q_lse[..., E])  # -lse in exp's base
    # [dO | -D]: D_i = sum_c dO_ic O_ic once per row, its sign flipped as the last column
    g_d = _kept("g_d", p.lead + (L, Ev + 1), dtype)  # (..., L, Ev+1)
    g_d[..., :Ev] = g
    # (not np.negative(x, out=x) on this strided column: NumPy 2.4.6 gets it wrong when a row
    # holds 4 floats, Ev = 3)
    g_d[..., Ev] = -np.einsum("...le,...le->...l", g, output)  # (..., L)
    grad_key = np.empty(p.lead + (S, E), dtype)
    grad_value = np.empty(p.lead + (S, Ev), dtype)
    rows_per_tile, keys_per_task = min(rows_per_tile, L), min(keys_per_task, S)
    factor = dtype.type(1.0 / (1.0 - p.dropout_p))  # a kept weight's dropout factor
    lock, dq_of = threading.Lock(), {}  # each worker's own dQ (..., L, E)

    def worker_dq() -> np.ndarray:
        with lock:
            found = dq_of.get(threading.get_ident())
            if found is None:
                found = dq_of[threading.get_ident()] = _kept("dq", p.q.shape, dtype)
                found.fill(0)
        return found

    def run(task) -> None:
        index, j0 = task
        kv = index if p.group == 1 else index[:-1] + (index[-1] // p.group,)
        j1 = min(S, j0 + keys_per_task)
        w = _workspace(rows_per_tile, keys_per_task, E, Ev, dtype)
        k_one, v_one = w.k_one[: j1 - j0], w.v_one[: j1 - j0]  # (b, E+1), (b, Ev+1)
        k_one[:, :E], v_one[:, :Ev] = p.k[kv][j0:j1], p.v[kv][j0:j1]  # last columns stay 1
        k_j, v_j = k_one[:, :E], v_one[:, :Ev]  # (b, E), (b, Ev)
        q_lse_b, q_b, g_d_b, dq = q_lse[index], p.q[index], g_d[index], worker_dq()[index]
        g_b, keep_b = g_d_b[:, :Ev], None if keep is None else keep[index]
        dk, dv = w.dk[: j1 - j0], w.dv[: j1 - j0]
        dk.fill(0)
        dv.fill(0)
        first = p.causal.first_query(j0) if p.causal is not None else 0
        for i0 in range(first, L, rows_per_tile):  # from the first row that sees j0
            i1 = min(L, i0 + rows_per_tile)
            s, dp = w.s[: i1 - i0, : j1 - j0], w.dp[: i1 - i0, : j1 - j0]
            # step 1: P = exp2(q_i c k_j^T - lse_i c)   (n, E+1) @ (E+1, b) -> (n, b)
            np.matmul(q_lse_b[i0:i1], k_one.T, out=s)
            rows, cols = range(i0, i1), range(j0, j1)
            if p.causal is not None and not p.causal.sees_whole_tile(rows, cols):
                np.copyto(s, -np.inf, where=~p.causal.tile(rows, cols))  # diagonal tiles only
            exp(s, out=s)
            if keep_b is not None:  # dropout: the forward's factors for this tile
                # step 2: dP = (dO_i v_j^T) keep / (1 - p) - D_i    (n, Ev) @ (Ev, b) -> (n, b)
                keep_ij = keep_b[i0:i1, j0:j1]  # (n, b) bools
                np.matmul(g_b[i0:i1], v_j.T, out=dp)
                np.multiply(dp, keep_ij, out=dp)
                np.multiply(dp, factor, out=dp)  # dp * keep * 1/(1-p): numpy_backward.dropped
                np.add(dp, g_d_b[i0:i1, Ev:], out=dp)  # + (-D_i): the bits of dp - D_i
                np.matmul((s * keep_ij * factor).T, g_b[i0:i1], out=w.dv_part[: j1 - j0])
            else:
                # step 2: dP - D_i = dO_i v_j^T - D_i    (n, Ev+1) @ (Ev+1, b) -> (n, b)
                np.matmul(g_d_b[i0:i1], v_one.T, out=dp)
                # step 3: dV_j += P^T dO_i               (b, n) @ (n, Ev) -> (b, Ev)
                np.matmul(s.T, g_b[i0:i1], out=w.dv_part[: j1 - j0])
            dv += w.dv_part[: j1 - j0]
            # step 4: dS = P (dP - D_i)
            np.multiply(dp, s, out=dp)
            # step 5: dQ_i += dS k_j                    (n, b) @ (b, E) -> (n, E)
            np.matmul(dp, k_j, out=w.dq[: i1 - i0])
            dq[i0:i1] += w.dq[: i1 - i0]
            # step 6: dK_j += dS^T q_i                  (b, n) @ (n, E) -> (b, E)
            np.matmul(dp.T, q_b[i0:i1], out=w.dk_part[: j1 - j0])
            dk += w.dk_part[: j1 - j0]
        grad_key[index][j0:j1] = dk
        grad_value[index][j0:j1] = dv

    tasks = [
        (index, j0)
        for index in itertools.product(*map(range, p.lead))
        for j0 in range(0, S, keys_per_task)
    ]
    workers = min(cores(), len(tasks))
    parallel = workers > 1 and L * S * math.prod(p.lead) >= PARALLEL_MIN
    with single_threaded_blas() if parallel else contextlib.nullcontext(False) as single:
        if parallel and single:
            share(tasks, workers, run)
            detail += f"; {workers} threads (this one included), OpenBLAS on one thread"
        else:
            for task in tasks:
                run(task)
        # each worker's dQ is kept for its next call: summed into a new array while the BLAS
        # lock still keeps another call's tasks off the pool's threads
        parts = list(dq_of.values())
        grad_query = sum(parts) if len(parts) > 1 else parts[0].copy()
    grad_query *= dtype.type(p.scale)
    grad_key *= dtype.type(p.scale)
    return grad_query, grad_key, grad_value, detail

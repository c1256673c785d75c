"""A Triton FlashAttention forward and backward, written for the tests, with mistakes to plant.

Written from FlashAttention-2's algorithm in the style of Triton's fused-attention tutorial (not
copied): one program per (query tile, head) walks the key tiles with a running max m, a running
denominator l and an accumulator o, in log2 units (log2(e) folded into the scale, exp2); the
log-sum-exp is kept for the backward. The backward is FlashAttention-2's: D = rowsum(dO * O),
then one program per key tile (dk, dv; every query head of its group) and one per query tile
(dq), P recomputed from the lse. Accumulators are float32, so float64 is declined
(NotImplementedError) unless `bug="float64"` lets it through.

Called as scratch.check calls a kernel: `attention(q, k, v, is_causal=, scale=, enable_gqa=)`
on torch tensors (..., L, E) of any leading dims; no attn_mask keyword (masks unsupported).
Import this module with TRITON_INTERPRET=1 in the environment to run on CPU tensors (Triton
reads it when @triton.jit decorates); tests/test_triton_kernels.py loads it both ways.

`bug` plants one mistake: "unrescaled" (o not multiplied by exp2(m_old - m_new)), "exp" (exp
where exp2 was meant, log2(e) still folded), "no-log2e" (exp2 without the fold), "diagonal"
(the causal tile bound stops before the query's own tile), "float64" (float64 let through,
computed in float32).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.0 / math.log(2.0)
BUGS = ("unrescaled", "exp", "no-log2e", "diagonal", "float64")
SMALL_TILES = (32, 16)  # (query rows per program, keys per step): several tiles in small cases
LONG_TILES = (64, 64)  # from LONG keys or queries on: the interpreter's cost is per tile step
LONG = 512


@triton.jit
def _mm(a, b):
    """a @ b summed in float32, IEEE (a GPU's tl.dot on float32 defaults to TF32's 10 bits)."""
    return tl.dot(a, b, input_precision="ieee").to(tl.float32)


@triton.jit
def _tile(X, n, rows, N, cols, W: tl.constexpr):
    """Rows `rows` and features `cols` of slice n of X (N rows of W features), 0 past its ends."""
    inside = (rows[:, None] < N) & (cols[None, :] < W)
    return tl.load(X + n * N * W + rows[:, None] * W + cols[None, :], mask=inside, other=0.0)


@triton.jit
def _put(X, n, rows, N, cols, W: tl.constexpr, value):
    """Store value (rows x cols) into slice n of X in X's dtype, nothing past its ends."""
    inside = (rows[:, None] < N) & (cols[None, :] < W)
    at = X + n * N * W + rows[:, None] * W + cols[None, :]
    tl.store(at, value.to(X.dtype.element_ty), mask=inside)


@triton.jit
def _kv_row(n, HQ, HKV):
    """The k/v slice that query slice n reads: head h of batch b reads kv head h // (HQ / HKV)."""
    return (n // HQ) * HKV + (n % HQ) // (HQ // HKV)


@triton.jit
def _forward_kernel(
    Q, K, V, O, LSE, qk_scale, L, S, HQ, HKV,
    E: tl.constexpr, EV: tl.constexpr, BE: tl.constexpr, BEV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, BUG: tl.constexpr,
):  # fmt: skip
    start = tl.program_id(0) * BLOCK_M
    n = tl.program_id(1)  # which (batch, head) slice
    kv = _kv_row(n, HQ, HKV)
    rows = start + tl.arange(0, BLOCK_M)  # query i
    cols = tl.arange(0, BLOCK_N)  # key j within a tile
    e, ev = tl.arange(0, BE), tl.arange(0, BEV)  # feature c (padded to a power of 2)
    q = _tile(Q, n, rows, L, e, E)  # (BLOCK_M, BE)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, log2 units
    l = tl.zeros([BLOCK_M], tl.float32)  # running denominator
    o = tl.zeros([BLOCK_M, BEV], tl.float32)  # running numerator (weights @ v)
    hi = S
    if CAUSAL:  # top-left: query i sees keys j <= i, so no key tile past the query tile's end
        if BUG == "diagonal":
            hi = tl.minimum(S, start)
        else:
            hi = tl.minimum(S, start + BLOCK_M)
    for lo in range(0, hi, BLOCK_N):
        keys = lo + cols
        k = _tile(K, kv, keys, S, e, E)  # (BLOCK_N, BE)
        v = _tile(V, kv, keys, S, ev, EV)  # (BLOCK_N, BEV)
        # step 1: scores in log2 units, (BLOCK_M, BE) @ (BE, BLOCK_N) -> (BLOCK_M, BLOCK_N)
        s = _mm(q, tl.trans(k)) * qk_scale
        keep = keys[None, :] < S
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        # step 2: the running max grows; rescale what was summed under the old max
        m_new = tl.maximum(m, tl.max(s, 1))
        if BUG == "exp":
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
        else:
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        if BUG != "unrescaled":
            o = o * alpha[:, None]
        # step 3: add this tile's weights @ v, (BLOCK_M, BLOCK_N) @ (BLOCK_N, BEV)
        o += _mm(p.to(v.dtype), v)
        m = m_new
    o = o / l[:, None]
    _put(O, n, rows, L, ev, EV, o)
    tl.store(LSE + n * L + rows, m + tl.log2(l), mask=rows < L)  # log2-sum-exp2 per row


@triton.jit
def _delta_kernel(O, DO, DELTA, L, EV: tl.constexpr, BEV: tl.constexpr, BLOCK_M: tl.constexpr):
    """D = rowsum(dO * O) per query row."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1)
    ev = tl.arange(0, BEV)
    o = _tile(O, n, rows, L, ev, EV).to(tl.float32)
    do = _tile(DO, n, rows, L, ev, EV).to(tl.float32)
    tl.store(DELTA + n * L + rows, tl.sum(o * do, 1), mask=rows < L)


@triton.jit
def _dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale, L, S, HQ, HKV,
    E: tl.constexpr, EV: tl.constexpr, BE: tl.constexpr, BEV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """dk, dv of one key tile of one kv head: every query tile of every query head reading it."""
    start = tl.program_id(0) * BLOCK_N
    kv = tl.program_id(1)
    keys = start + tl.arange(0, BLOCK_N)
    e, ev = tl.arange(0, BE), tl.arange(0, BEV)
    k = _tile(K, kv, keys, S, e, E)
    v = _tile(V, kv, keys, S, ev, EV)
    dk = tl.zeros([BLOCK_N, BE], tl.float32)
    dv = tl.zeros([BLOCK_N, BEV], tl.float32)
    group = HQ // HKV
    first = (kv // HKV) * HQ + (kv % HKV) * group  # the first query slice reading this kv head
    lo = 0
    if CAUSAL:  # query i sees key j only when j <= i: query tiles before this key tile see none
        lo = (start // BLOCK_M) * BLOCK_M
    for g in range(0, group):
        n = first + g
        for qs in range(lo, L, BLOCK_M):
            rows = qs + tl.arange(0, BLOCK_M)
            inside = rows < L
            q = _tile(Q, n, rows, L, e, E)
            do = _tile(DO, n, rows, L, ev, EV)
            lse = tl.load(LSE + n * L + rows, mask=inside, other=0.0)
            delta = tl.load(DELTA + n * L + rows, mask=inside, other=0.0)
            # P^T recomputed from the lse: (BLOCK_N, BE) @ (BE, BLOCK_M) -> (BLOCK_N, BLOCK_M)
            s_t = _mm(k, tl.trans(q)) * qk_scale
            keep = inside[None, :] & (keys[:, None] < S)
            if CAUSAL:
                keep = keep & (keys[:, None] <= rows[None, :])
            p_t = tl.where(keep, tl.exp2(s_t - lse[None, :]), 0.0)
            dv += _mm(p_t.to(do.dtype), do)  # dV = P^T dO
            dp_t = _mm(v, tl.trans(do))  # dP^T = V dO^T
            ds_t = p_t * (dp_t - delta[None, :])  # dS = P * (dP - D)
            dk += _mm(ds_t.to(q.dtype), q)  # dK = dS^T Q (scaled below)
    _put(DK, kv, keys, S, e, E, dk * sm_scale)
    _put(DV, kv, keys, S, ev, EV, dv)


@triton.jit
def _dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale, L, S, HQ, HKV,
    E: tl.constexpr, EV: tl.constexpr, BE: tl.constexpr, BEV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """dq of one query tile: every key tile it sees."""
    start = tl.program_id(0) * BLOCK_M
    n = tl.program_id(1)
    kv = _kv_row(n, HQ, HKV)
    rows = start + tl.arange(0, BLOCK_M)
    inside = rows < L
    e, ev = tl.arange(0, BE), tl.arange(0, BEV)
    q = _tile(Q, n, rows, L, e, E)
    do = _tile(DO, n, rows, L, ev, EV)
    lse = tl.load(LSE + n * L + rows, mask=inside, other=0.0)
    delta = tl.load(DELTA + n * L + rows, mask=inside, other=0.0)
    dq = tl.zeros([BLOCK_M, BE], tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, start + BLOCK_M)
    for lo in range(0, hi, BLOCK_N):
        keys = lo + tl.arange(0, BLOCK_N)
        k = _tile(K, kv, keys, S, e, E)
        v = _tile(V, kv, keys, S, ev, EV)
        s = _mm(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N)
        keep = inside[:, None] & (keys[None, :] < S)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp2(s - lse[:, None]), 0.0)
        dp = _mm(do, tl.trans(v))  # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += _mm(ds.to(k.dtype), k)  # dQ = dS K (scaled below)
    _put(DQ, n, rows, L, e, E, dq * sm_scale)


def _slices(q, k, v, enable_gqa: bool):
    """q, k, v as contiguous (N, L, E) slices, and (HQ, HKV): slice n reads kv slice
    (n // HQ) HKV + (n % HQ) // (HQ / HKV)."""
    if q.dtype == torch.float64:
        raise NotImplementedError("float64: this kernel's accumulators are float32")
    heads = (q.shape[-3], k.shape[-3]) if enable_gqa and q.dim() >= 3 else (1, 1)
    if heads[0] % heads[1]:
        raise ValueError(f"enable_gqa: {heads[0]} query heads over {heads[1]} kv heads")
    flat = [t.reshape(-1, *t.shape[-2:]).contiguous() for t in (q, k, v)]
    return (*flat, heads)


def _scales(q, scale, bug) -> tuple[float, float]:
    """(sm_scale, the scale in log2 units the kernels multiply scores by)."""
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return sm_scale, sm_scale * (1.0 if bug == "no-log2e" else LOG2E)


def _widths(q, v) -> dict:
    """Head widths and their power-of-2 tile widths (at least 16, tl.dot's smallest)."""
    E, EV = q.shape[-1], v.shape[-1]
    pad = triton.next_power_of_2
    return dict(E=E, EV=EV, BE=max(16, pad(E)), BEV=max(16, pad(EV)))


def tiles(L: int, S: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) for L queries and S keys."""
    return LONG_TILES if max(L, S) >= LONG else SMALL_TILES


def forward(q, k, v, is_causal=False, scale=None, enable_gqa=False, *, bug=None):
    """(output (..., L, Ev), lse in log2 units (N, L), the flat slices) for the backward."""
    if bug == "float64" and q.dtype == torch.float64:
        bug = None
    elif q.dtype == torch.float64:
        _slices(q, k, v, enable_gqa)  # raises NotImplementedError
    f32 = q.dtype == torch.float64  # only with bug="float64": computed in float32
    qf, kf, vf, (hq, hkv) = _slices(
        *(t.float() if f32 else t for t in (q, k, v)), enable_gqa=enable_gqa
    )
    N, L, S = qf.shape[0], qf.shape[1], kf.shape[1]
    out = torch.empty((N, L, vf.shape[-1]), dtype=qf.dtype, device=q.device)
    lse = torch.empty((N, L), dtype=torch.float32, device=q.device)
    _, qk_scale = _scales(q, scale, bug)
    BLOCK_M, BLOCK_N = tiles(L, S)
    _forward_kernel[(triton.cdiv(L, BLOCK_M), N)](
        qf, kf, vf, out, lse, qk_scale, L, S, hq, hkv, **_widths(q, v),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=bool(is_causal), BUG=bug or "",
    )  # fmt: skip
    output = out.reshape(*q.shape[:-1], v.shape[-1])
    return (output.to(q.dtype) if f32 else output), lse, (qf, kf, vf, hq, hkv)


def attention(q, k, v, is_causal=False, scale=None, enable_gqa=False, *, bug=None):
    """The Triton FlashAttention forward, as scratch.check calls it."""
    return forward(q, k, v, is_causal, scale, enable_gqa, bug=bug)[0]


def attention_backward(
    q, k, v, grad_output, is_causal=False, scale=None, enable_gqa=False, *, bug=None
):
    """(dq, dk, dv) from the Triton forward's output and lse, then the two backward kernels."""
    output, lse, (qf, kf, vf, hq, hkv) = forward(q, k, v, is_causal, scale, enable_gqa, bug=bug)
    N, L, S = qf.shape[0], qf.shape[1], kf.shape[1]
    of = output.reshape(N, L, -1).contiguous()
    dof = grad_output.reshape(N, L, -1).to(of.dtype).contiguous()
    widths = _widths(q, v)
    BLOCK_M, BLOCK_N = tiles(L, S)
    delta = torch.empty((N, L), dtype=torch.float32, device=q.device)
    _delta_kernel[(triton.cdiv(L, BLOCK_M), N)](
        of, dof, delta, L, EV=widths["EV"], BEV=widths["BEV"], BLOCK_M=BLOCK_M
    )
    sm_scale, qk_scale = _scales(q, scale, bug)
    dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
    causal = bool(is_causal)
    _dkdv_kernel[(triton.cdiv(S, BLOCK_N), kf.shape[0])](
        qf, kf, vf, dof, lse, delta, dk, dv, qk_scale, sm_scale, L, S, hq, hkv, **widths,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal,
    )  # fmt: skip
    _dq_kernel[(triton.cdiv(L, BLOCK_M), N)](
        qf, kf, vf, dof, lse, delta, dq, qk_scale, sm_scale, L, S, hq, hkv, **widths,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal,
    )  # fmt: skip
    shaped = [g.reshape(t.shape).to(t.dtype) for g, t in ((dq, q), (dk, k), (dv, v))]
    return tuple(shaped)

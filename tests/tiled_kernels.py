"""FlashAttention-style NumPy kernels for the checker's tests: one pass over key blocks.

`tiled` is correct for any block size (running max, running sum, rescaled accumulator); each
`bug=` plants one mistake real tiled kernels make. `reordered` sums keys in a given order.
"""

from __future__ import annotations

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def _setup(q, k, v, attn_mask, is_causal, scale, enable_gqa):
    """Arrays, GQA heads repeated, the scale, and the (L, S) allowed / added masks."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    E, L, S = q.shape[-1], q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    allowed, add = None, None
    if is_causal:
        allowed = np.tril(np.ones((L, S), dtype=bool))
    elif attn_mask is not None:
        m = np.asarray(attn_mask)
        if m.dtype == bool:
            allowed = m
        else:
            add = m
    return q, k, v, scale, allowed, add


def tiled(
    q,
    k,
    v,
    attn_mask=None,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    block=16,
    exp2=False,
    bug=None,
):
    """Online softmax over key blocks of `block`, in float32 for 16-bit inputs."""
    with np.errstate(all="ignore"):
        return _tiled(q, k, v, attn_mask, is_causal, scale, enable_gqa, block, exp2, bug)


def _tiled(q, k, v, attn_mask, is_causal, scale, enable_gqa, block, exp2, bug):
    """tiled() without the error-state guard."""
    if bug == "mutate-q":  # scales the caller's q in place (then leaves the scale out below)
        q *= q.dtype.type(1.0 / math.sqrt(np.shape(q)[-1]) if scale is None else scale)
    q, k, v, scale, allowed, add = _setup(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    if bug == "mutate-q":
        scale = 1.0
    out_dtype = q.dtype
    acc = np.float32 if q.dtype in (np.float16,) else q.dtype.type
    q, k, v = q.astype(acc), k.astype(acc), v.astype(acc)
    if bug == "k-as-v":
        v = k
    L, S = q.shape[-2], k.shape[-2]
    if is_causal and bug in ("causal-future", "causal-diag"):
        allowed = np.tril(np.ones((L, S), dtype=bool), k=1 if bug == "causal-future" else -1)
    f = LOG2E if exp2 else 1.0
    exp = np.exp2 if exp2 else np.exp
    top = np.full(q.shape[:-1] + (1,), -np.inf, dtype=acc)
    total = np.zeros_like(top)
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=acc)
    end = S - S % block if bug == "drop-last" and S % block else S
    for j in range(0, end, block):
        kb, vb = k[..., j : j + block, :], v[..., j : j + block, :]
        # step 1: scores of this block   (..., L, E) @ (..., E, B) -> (..., L, B)
        if bug == "scores-16-sum":  # a float16 kernel that sums q @ k^T in float16, term by term
            qh, kh = q.astype(np.float16), np.swapaxes(kb, -1, -2).astype(np.float16)
            s = np.zeros(q.shape[:-1] + (kh.shape[-1],), dtype=np.float16)
            for i in range(q.shape[-1]):
                s = s + qh[..., :, i : i + 1] * kh[..., i : i + 1, :]
            s = s.astype(acc)
        elif bug == "scores-fp16":  # q @ k^T multiplied and summed in float16
            s = (q.astype(np.float16) @ np.swapaxes(kb, -1, -2).astype(np.float16)).astype(acc)
        else:
            s = q @ np.swapaxes(kb, -1, -2)
        s = s * acc(scale * f)
        if bug == "scores-f32" and acc is np.float64:  # an intermediate float32 cast
            s = s.astype(np.float32).astype(np.float64)
        # step 2: mask
        if add is not None:
            s = s + add[..., j : j + block].astype(acc) * acc(f)
        if allowed is not None:
            s = np.where(allowed[..., j : j + block], s, -np.inf)
        # step 3: running max, rescale what was summed so far, add this block
        new = np.maximum(top, np.max(s, axis=-1, keepdims=True))
        safe = np.where(np.isfinite(new), new, 0)
        alpha = exp(top - safe)
        if bug == "rescale-inverted":
            alpha = np.where(alpha > 0, 1 / alpha, 0)
        e = exp(s - safe)
        if bug == "stale-max":  # exp(s - m_old); the first block (no m_old yet) its own max
            e = exp(s - np.where(np.isfinite(top), top, safe))
        a_sum = exp(top - safe) if bug == "rescale-inverted" else alpha
        if bug == "sum-not-rescaled":  # the accumulator rescaled, the denominator not
            a_sum = 1.0
        total = total * a_sum + e.sum(-1, keepdims=True)
        if bug == "no-rescale":
            out = out + e @ vb
        else:
            out = out * alpha + e @ vb  # (..., L, B) @ (..., B, Ev) -> (..., L, Ev)
        top = new
    if bug == "eps":  # a float64 kernel "protecting" the division
        total = total + 1e-12
    total = np.where(total > 0, total, 1)  # fully masked rows: output 0
    return (out / total).astype(out_dtype)


def reordered(
    q,
    k,
    v,
    attn_mask=None,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    order="reversed",
    seed=None,
):
    """Plain attention with the keys visited in another order: reversed, key by key, shuffled."""
    q, k, v, scale, allowed, add = _setup(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    S = k.shape[-2]
    if order == "reversed":
        perm = np.arange(S)[::-1]
    else:
        perm = np.random.default_rng(seed).permutation(S)
    k, v = k[..., perm, :], v[..., perm, :]
    allowed = None if allowed is None else allowed[..., perm]
    add = None if add is None else add[..., perm]
    with np.errstate(all="ignore"):
        s = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
        if add is not None:
            s = s + add.astype(q.dtype)
        if allowed is not None:
            s = np.where(allowed, s, -np.inf)
        top = np.max(s, axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = e.sum(-1, keepdims=True)
        w = e / np.where(total > 0, total, 1)
        if order == "key-by-key":
            out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
            for j in range(S):
                out = out + w[..., :, j : j + 1] * v[..., j : j + 1, :]
            return out
        return w @ v

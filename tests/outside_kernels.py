"""Attention kernels written the way outside projects write them, with one mistake planted each.

Each is written from the algorithm's description (not copied): a FlashAttention-2 tiled forward
(query tiles outer, key tiles inner, running max m and denominator l, exp2 with log2(e) folded
into the scale), the chunked algorithm of Rabe & Staats (per-chunk max, sum and values, combined
at the end), a reference in the spirit of FlashAttention's `attention_ref` ((B, S, H, D) layout,
upcast to float32), picoGPT's two-line attention, nn.MultiheadAttention's math (q scaled first),
and a FlashAttention-2 tiled backward (D = rowsum(dO * O) from the stored output, P recomputed
from the stored log-sum-exp). `bug=None` is the correct kernel; see tests/checker_outside.py.
"""

from __future__ import annotations

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def _inputs(q, k, v, enable_gqa: bool, v_map: str = "group"):
    """Arrays, with k and v heads repeated to q's (query head h reads kv head h // group)."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hkv = q.shape[-3], k.shape[-3]
        k = np.take(k, np.arange(hq) // (hq // hkv), axis=-3)
        v = np.take(
            v, np.arange(hq) // (hq // hkv) if v_map == "group" else np.arange(hq) % hkv, -3
        )
    return q, k, v


def _mask(attn_mask, is_causal: bool, L: int, S: int):
    """(allowed or None, bias or None) for a bool mask, a float mask or top-left causal."""
    if is_causal:
        return np.tril(np.ones((L, S), dtype=bool)), None
    if attn_mask is None:
        return None, None
    m = np.asarray(attn_mask)
    return (m, None) if m.dtype == bool else (None, m)


# ---------------------------------------------------------------- FlashAttention-2 forward


def flash2_forward(
    q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *, bq=16, bk=16,
    bug=None, refuse_ev=False,
):  # fmt: skip
    """FlashAttention-2's forward in NumPy: for each query tile, one pass over the key tiles."""
    if refuse_ev and np.shape(v)[-1] != np.shape(q)[-1]:
        raise NotImplementedError("head dims of q and v must match")
    q, k, v = _inputs(q, k, v, enable_gqa, "interleaved" if bug == "gqa-v-map" else "group")
    dt = q.dtype
    acc = np.float32 if dt == np.float16 else dt.type
    L, S, E, Ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    sm_scale = (1.0 / math.sqrt(Ev if bug == "scale-from-ev" else E)) if scale is None else scale
    fold = 1.0 if bug == "exp2-no-fold" else LOG2E  # exp(x) == exp2(x * log2(e))
    exp = np.exp if bug == "exp-for-exp2" else np.exp2
    allowed, bias = _mask(attn_mask, is_causal, L, S)
    out = np.zeros(q.shape[:-1] + (Ev,), dtype=dt)
    last_q = L - L % bq if bug == "drop-last-q-block" else L
    with np.errstate(all="ignore"):
        for i0 in range(0, last_q, bq):
            i1 = min(i0 + bq, L)
            qi = q[..., i0:i1, :].astype(acc)
            m = np.full(qi.shape[:-1] + (1,), -np.inf, dtype=acc)  # running max (log2 units)
            l_i = np.zeros_like(m)  # running denominator
            o = np.zeros(qi.shape[:-1] + (Ev,), dtype=np.float16 if bug == "acc-fp16" else acc)
            for j0 in range(0, S, bk):
                j1 = min(j0 + bk, S)
                if is_causal and j0 > i1 - 1:
                    break  # tile skipping: this key tile lies wholly above the diagonal
                if bug == "causal-diag-tile" and is_causal and j1 <= i0:
                    continue  # (wrong) only the tiles touching the diagonal are computed
                kj, vj = k[..., j0:j1, :].astype(acc), v[..., j0:j1, :].astype(acc)
                if bug == "qk-fp16-sum":  # q @ k^T summed term by term in float16
                    s = np.zeros(qi.shape[:-1] + (j1 - j0,), dtype=np.float16)
                    for c in range(E):
                        s = s + qi[..., c : c + 1].astype(np.float16) * np.swapaxes(
                            kj[..., c : c + 1], -1, -2
                        ).astype(np.float16)
                    s = s.astype(acc)
                else:
                    s = qi @ np.swapaxes(kj, -1, -2)  # (..., Bq, E) @ (..., E, Bk) -> (..., Bq, Bk)
                s = s * acc(sm_scale * fold)
                if bias is not None:
                    s = s + bias[..., i0:i1, j0:j1].astype(acc) * acc(fold)
                if allowed is not None:
                    s = np.where(allowed[..., i0:i1, j0:j1], s, -np.inf)
                m_new = np.maximum(m, s.max(-1, keepdims=True))
                safe = np.where(np.isfinite(m_new), m_new, 0)
                if bug == "stale-max":  # exp(s - m) with m from before this tile
                    p = exp(s - np.where(np.isfinite(m), m, 0))
                else:
                    p = exp(s - safe)
                alpha = exp(m - safe)
                if bug == "no-rescale-both":
                    alpha = np.ones_like(alpha)
                elif bug == "rescale-inverted-both":
                    alpha = np.where(alpha > 0, 1 / alpha, 0)
                l_i = l_i * alpha + p.sum(-1, keepdims=True)
                o = (o * alpha + p @ vj).astype(o.dtype)  # (..., Bq, Bk) @ (..., Bk, Ev)
                m = m_new
            if bug == "denominator-plus-1":
                l_i = l_i + 1
            elif bug == "denominator-eps":
                l_i = l_i + (1e-6 if acc is np.float32 else 1e-12)
            o = o.astype(acc) / np.where(l_i > 0, l_i, 1)
            out[..., i0:i1, :] = o.astype(dt)
    if bug == "output-bshd" and out.ndim == 4:
        return np.ascontiguousarray(np.swapaxes(out, 1, 2))  # (B, H, L, Ev) -> (B, L, H, Ev)
    return out


def flash2_two_pass(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *,
                    bk=16, bug=None):  # fmt: skip
    """Pass 1 finds each row's log-sum-exp, pass 2 sums exp2(s log2(e) - lse log2(e)) v."""
    q, k, v = _inputs(q, k, v, enable_gqa)
    dt = q.dtype
    acc = np.float32 if dt == np.float16 else dt.type
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    sm_scale = 1.0 / math.sqrt(E) if scale is None else scale
    allowed, bias = _mask(attn_mask, is_causal, L, S)
    qa, ka, va = q.astype(acc), k.astype(acc), v.astype(acc)
    with np.errstate(all="ignore"):
        s = qa @ np.swapaxes(ka, -1, -2) * acc(sm_scale)  # (..., L, E) @ (..., E, S) -> (..., L, S)
        if bias is not None:
            s = s + bias.astype(acc)
        if allowed is not None:
            s = np.where(allowed, s, -np.inf)
        m = s.max(-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        lse = m + np.log(np.exp(s - m).sum(-1, keepdims=True))  # natural log
        lse2 = lse if bug == "lse-ln-in-exp2" else lse * acc(LOG2E)
        out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=acc)
        for j0 in range(0, S, bk):
            p = np.exp2(s[..., j0 : j0 + bk] * acc(LOG2E) - lse2)
            out = out + np.nan_to_num(p) @ va[..., j0 : j0 + bk, :]
    return out.astype(dt)


# ---------------------------------------------------------------- Rabe & Staats, chunked


def chunked(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *,
            chunk=16, bug=None):  # fmt: skip
    """Rabe & Staats: per key chunk (values, weight sum, max), then one combine with the max."""
    q, k, v = _inputs(q, k, v, enable_gqa)
    dt = q.dtype
    acc = np.float32 if dt == np.float16 else dt.type
    L, S = q.shape[-2], k.shape[-2]
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    allowed, bias = _mask(attn_mask, is_causal, L, S)
    parts = []
    with np.errstate(all="ignore"):
        for j0 in range(0, S, chunk):
            s = q.astype(acc) @ np.swapaxes(k[..., j0 : j0 + chunk, :], -1, -2).astype(acc)
            s = s * acc(sm_scale)
            if bias is not None:
                s = s + bias[..., j0 : j0 + chunk].astype(acc)
            if allowed is not None:
                s = np.where(allowed[..., j0 : j0 + chunk], s, -np.inf)
            mx = s.max(-1, keepdims=True)
            mx = np.where(np.isfinite(mx), mx, -np.inf)
            e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
            parts.append((e @ v[..., j0 : j0 + chunk, :].astype(acc), e.sum(-1, keepdims=True), mx))
        top = np.max(np.stack([mx for _, _, mx in parts]), axis=0)
        top = np.where(np.isfinite(top), top, 0)
        values = np.zeros(parts[0][0].shape, dtype=acc)
        weights = np.zeros(parts[0][1].shape, dtype=acc)
        for vals, wsum, mx in parts:
            diff = np.exp(mx - top) if bug != "no-max-correction" else np.ones_like(mx)
            diff = np.where(np.isfinite(mx), diff, 0)
            values = values + vals * diff
            weights = weights + wsum * diff
        return (values / np.where(weights > 0, weights, 1)).astype(dt)


# ---------------------------------------------------------------- attention_ref in its spirit


def ref_bshd(q, k, v, attn_mask=None, causal=False, softmax_scale=None, dropout_p=0.0, seed=0,
             upcast=True):  # fmt: skip
    """A test reference in (B, S, H, D) layout: upcast, einsum, mask, softmax, dropout, einsum."""
    dt = q.dtype
    if upcast and dt == np.float16:
        q, k, v = q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
    d = q.shape[-1]
    sm = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    scores = np.einsum("bthd,bshd->bhts", q, k * q.dtype.type(sm))
    Lq, Sk = scores.shape[-2:]
    with np.errstate(all="ignore"):
        allowed, bias = _mask(attn_mask, causal, Lq, Sk)
        if bias is not None:
            scores = scores + bias.astype(scores.dtype)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        top = scores.max(-1, keepdims=True)
        e = np.exp(scores - np.where(np.isfinite(top), top, 0))
        attn = e / e.sum(-1, keepdims=True)
        attn = np.nan_to_num(attn, nan=0.0)  # rows with every key masked: 0
        if dropout_p > 0:
            keep = np.random.default_rng(seed).random(attn.shape) >= dropout_p
            attn = attn * keep / (1 - dropout_p)
        out = np.einsum("bhts,bshd->bthd", attn, v)
    return out.astype(dt)


def ref_wrapped(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *,
                bug=None):  # fmt: skip
    """The (B, S, H, D) reference called on the checker's (..., H, L, D) inputs."""
    q, k, v = _inputs(q, k, v, enable_gqa)
    shape = q.shape
    q4, k4, v4 = (
        x.reshape((-1,) + x.shape[-3:]) if x.ndim >= 3 else x[None, None] for x in (q, k, v)
    )
    q4, k4, v4 = (np.swapaxes(x, 1, 2) for x in (q4, k4, v4))  # (B, H, L, D) -> (B, L, H, D)
    drop = 0.1 if bug == "dropout-fixed-seed" else 0.0
    out = ref_bshd(q4, k4, v4, attn_mask, is_causal, scale, dropout_p=drop)  # (B, L, H, Ev)
    if bug == "output-bshd" and len(shape) == 4:
        return out
    out = np.swapaxes(out, 1, 2)  # (B, L, H, Ev) -> (B, H, L, Ev)
    return out.reshape(shape[:-1] + (v.shape[-1],))


# ---------------------------------------------------------------- picoGPT, nn.MultiheadAttention


def picogpt(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *, bug=None):
    """picoGPT's attention: softmax(q @ k.T / sqrt(d) + mask) @ v, its causal mask -1e10 above."""
    q, k, v = _inputs(q, k, v, enable_gqa)

    def softmax(x):
        if bug == "no-max":
            e = np.exp(x)
        else:
            e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)

    L, S = q.shape[-2], k.shape[-2]
    sm = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    with np.errstate(all="ignore"):
        x = q @ np.swapaxes(k, -1, -2)
        if bug == "scale-on-v":
            v = v * q.dtype.type(sm)
        else:
            x = x * q.dtype.type(sm)
        if is_causal:
            tri = np.triu(np.ones((L, S))) if bug == "triu-causal" else np.tri(L, S)
            x = x + ((1 - tri) * -1e10).astype(x.dtype)
        elif attn_mask is not None:
            m = np.asarray(attn_mask)
            x = x + (
                np.where(m, 0, -1e10).astype(x.dtype) if m.dtype == bool else m.astype(x.dtype)
            )
        return (softmax(x) @ v).astype(q.dtype)


def mha_math(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *, bug=None):
    """nn.MultiheadAttention's math: q *= scaling, bmm, add the float mask, softmax, bmm."""
    q, k, v = _inputs(q, k, v, enable_gqa)
    L, S = q.shape[-2], k.shape[-2]
    scaling = q.shape[-1] ** -0.5 if scale is None else scale
    with np.errstate(all="ignore"):
        q = q * q.dtype.type(scaling)
        attn = q @ np.swapaxes(k, -1, -2)  # (..., L, E) @ (..., E, S) -> (..., L, S)
        mask = None
        if is_causal:
            mask = np.where(np.tril(np.ones((L, S), dtype=bool)), 0.0, -np.inf)
        elif attn_mask is not None:
            m = np.asarray(attn_mask)
            mask = np.where(m, 0.0, -np.inf) if m.dtype == bool else m
        square = mask is not None and mask.shape[-1] == mask.shape[-2]
        floats = attn_mask is not None and not is_causal and np.asarray(attn_mask).dtype != bool
        if square and floats and bug == "float-mask-transposed":
            mask = np.swapaxes(mask, -1, -2)
        if mask is not None and bug != "mask-after-softmax":
            attn = attn + mask.astype(attn.dtype)
        top = attn.max(-1, keepdims=True)
        e = np.exp(attn - np.where(np.isfinite(top), top, 0))
        w = e / e.sum(-1, keepdims=True)
        if mask is not None and bug == "mask-after-softmax":
            w = np.where(np.isfinite(mask), w * np.exp(np.where(np.isfinite(mask), mask, 0)), 0)
        w = np.nan_to_num(w, nan=0.0)
        return (w @ v).astype(q.dtype)


# ---------------------------------------------------------------- FlashAttention-2 backward


def _forward_stats(q, k, v, allowed, bias, sm_scale, keep, p_drop):
    """The forward a FlashAttention-2 backward relies on: output O and each row's lse."""
    s = q @ np.swapaxes(k, -1, -2) * sm_scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
    if bias is not None:
        s = s + bias
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total > 0, total, 1)
    if keep is not None:
        p = p * keep / (1 - p_drop)
    lse = np.where(total > 0, m + np.log(np.where(total > 0, total, 1)), np.inf)
    return p @ v, lse  # (..., L, Ev), (..., L, 1)


def flash2_backward(q, k, v, grad_output, attn_mask=None, is_causal=False, scale=None,
                    enable_gqa=False, dropout_p=0.0, dropout_mask=None, *, bq=16, bk=16,
                    bug=None):  # fmt: skip
    """FlashAttention-2's backward: key tiles outer, query tiles inner, P recomputed from lse."""
    q, k0, v0, dO = (np.asarray(x) for x in (q, k, v, grad_output))
    dt = q.dtype
    acc = np.float32 if dt == np.float16 else dt.type
    hq = q.shape[-3] if q.ndim >= 3 else 1
    hkv = k0.shape[-3] if k0.ndim >= 3 else 1
    q, k, v = _inputs(q, k0, v0, enable_gqa)
    q, k, v, dO = (x.astype(acc) for x in (q, k, v, dO))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    sm_scale = 1.0 / math.sqrt(E) if scale is None else scale
    allowed, bias = _mask(attn_mask, is_causal, L, S)
    keep = None if dropout_mask is None or not dropout_p else np.asarray(dropout_mask)
    with np.errstate(all="ignore"):
        O, lse = _forward_stats(q, k, v, allowed, bias, acc(sm_scale), keep, dropout_p)
        if bug == "lse-log2":  # stored in log2 units, read back as natural
            lse = lse * acc(LOG2E)
        elif bug == "lse-unscaled":  # lse of q @ k^T before the scale
            lse = _forward_stats(q, k, v, allowed, bias, acc(1.0), keep, dropout_p)[1]
        D = (dO * O).sum(-1, keepdims=True)  # (..., L, 1), from the stored output
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        for j0 in range(0, S, bk):
            j1 = min(j0 + bk, S)
            kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]
            dk_j, dv_j = np.zeros_like(kj), np.zeros_like(vj)
            for i0 in range(0, L, bq):
                i1 = min(i0 + bq, L)
                qi, dOi = q[..., i0:i1, :], dO[..., i0:i1, :]
                s = qi @ np.swapaxes(kj, -1, -2) * acc(sm_scale)  # (..., Bq, Bk)
                if bias is not None:
                    s = s + bias[..., i0:i1, j0:j1]
                if allowed is not None and bug != "mask-missing-in-recompute":
                    s = np.where(allowed[..., i0:i1, j0:j1], s, -np.inf)
                if bug == "block-softmax":  # this tile's own softmax
                    t = s.max(-1, keepdims=True)
                    e = np.exp(s - np.where(np.isfinite(t), t, 0))
                    p = e / np.where(e.sum(-1, keepdims=True) > 0, e.sum(-1, keepdims=True), 1)
                else:
                    p = np.exp(s - lse[..., i0:i1, :])
                p = np.nan_to_num(p)
                z = None
                if keep is not None:
                    z = keep[..., i0:i1, j0:j1].astype(acc)
                    z = z if bug == "dropout-unscaled" else z / acc(1 - dropout_p)
                pd = p if z is None or bug == "dv-before-dropout" else p * z
                dv_j = dv_j + np.swapaxes(pd, -1, -2) @ dOi  # (..., Bk, Bq) @ (..., Bq, Ev)
                dp = dOi @ np.swapaxes(vj, -1, -2)  # (..., Bq, Ev) @ (..., Ev, Bk)
                if z is not None:
                    dp = dp * z
                ds = (
                    (dp - D[..., i0:i1, :])
                    if bug == "ds-without-p"
                    else p * (dp - D[..., i0:i1, :])
                )
                part_q = ds @ kj * acc(sm_scale)  # (..., Bq, Bk) @ (..., Bk, E)
                if bug == "dq-overwritten":
                    dq[..., i0:i1, :] = part_q
                else:
                    dq[..., i0:i1, :] += part_q
                part_k = np.swapaxes(ds, -1, -2) @ qi * acc(sm_scale)  # (..., Bk, E)
                dk_j = part_k if bug == "dk-overwritten" else dk_j + part_k
            dk[..., j0:j1, :], dv[..., j0:j1, :] = dk_j, dv_j
    if enable_gqa and hq != hkv:
        group = hq // hkv
        if bug == "gqa-interleaved-sum":  # kv head h gets query heads h, h + Hkv, ...
            fold = lambda x: x.reshape(x.shape[:-3] + (group, hkv) + x.shape[-2:]).sum(-4)  # noqa: E731
        else:
            fold = lambda x: x.reshape(x.shape[:-3] + (hkv, group) + x.shape[-2:]).sum(-3)  # noqa: E731
        dk, dv = fold(dk), fold(dv)
    return dq.astype(dt), dk.astype(dt), dv.astype(dt)

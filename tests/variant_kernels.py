"""Variant attention kernels written the way outside projects write them, one mistake per `bug`.

Written from the algorithms' descriptions, each in its own style and sharing no code with the
checker: a FlashAttention-2 tiled forward taking FlashAttention's keywords (window_size,
softcap, alibi_slopes, sinks, cu_seqlens_q/k, attention_chunk, rotary_cos/sin; tiles outside
the window skipped; exp2 with log2(e) folded into the scale), a split-KV / chunked forward
taking FlexAttention's mask_mod and score_mod (each key chunk's (output, sum, max), merged by
the max), and torch's FlexAttention itself called eagerly (mods as given; or built from
FlashAttention's keywords). `bug=None` is the correct kernel; see tests/checker_variants.py.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def turn(x, cos, sin, interleaved: bool):
    """RoPE: x (..., N, D) turned by cos, sin (N, D/2); pairs (2m, 2m+1) or (m, m + D/2)."""
    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        out = x.copy() if hasattr(x, "copy") else x.clone()
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = odd * cos + even * sin
        return out
    d = x.shape[-1] // 2
    first, second = x[..., :d], x[..., d:]
    lib = np if isinstance(x, np.ndarray) else __import__("torch")
    return lib.concatenate([first * cos - second * sin, second * cos + first * sin], -1)


def rope_inputs(q, k, rotary_cos, rotary_sin, rotary_interleaved, bug):
    """q turned at positions S - L + i (the queries are the last L), k at positions j."""
    if rotary_cos is None:
        return q, k
    L, S = q.shape[-2], k.shape[-2]
    first = 0 if bug == "rope-no-offset" else S - L
    rows = slice(S - 1, S) if bug == "rope-last-position" else slice(first, first + L)
    inter = (not rotary_interleaved) if bug == "rope-pairing" else bool(rotary_interleaved)
    q = turn(q, rotary_cos[rows], rotary_sin[rows], inter)  # one row (S - 1): every query
    return q, turn(k, rotary_cos[:S], rotary_sin[:S], inter)


# ---------------------------------------------- FlashAttention-2 forward, FlashAttention keywords


def flash2_variants(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0,
                    rotary_cos=None, rotary_sin=None, rotary_interleaved=False, scale=None, *,
                    bq=16, bk=16, bug=None):  # fmt: skip
    """Query tiles outer, key tiles inner; key tiles outside causal / window skipped."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    q, k = rope_inputs(q, k, rotary_cos, rotary_sin, rotary_interleaved, bug)
    B, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)  # head h reads h // g
    if bug == "decode-gqa-modulo" and L < S:  # a packed-GQA decode path reading h % Hkv
        k, v = (
            np.tile(x[:, :Hkv], (1, H // Hkv, 1, 1)) for x in (k[:, :: H // Hkv], v[:, :: H // Hkv])
        )
    sm = 1.0 / math.sqrt(E) if scale is None else scale
    left, right = window_size
    edge_bug = bug if right >= 0 else None  # the window's own code (not causal's) is wrong
    if causal:
        right = 0
    shift = 0 if bug == "decode-top-left" else S - L  # query i sits at key position i + shift
    doc = None
    if cu_seqlens_k is not None:
        starts = np.asarray(cu_seqlens_k)
        doc = np.searchsorted(starts, np.arange(S), side="right") - 1  # document of each key
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, dtype=dt)
    if slopes is not None and bug == "alibi-order":
        slopes = slopes[::-1]
    out = np.zeros((B, H, L, Ev), dtype=dt)
    with np.errstate(all="ignore"):
        for i0 in range(0, L, bq):
            i1 = min(i0 + bq, L)
            rows = np.arange(i0, i1)[:, None] + shift  # (Bq, 1) query positions
            lo_key = 0 if left < 0 else max(0, i0 + shift - left)
            hi_key = S if right < 0 else min(S, i1 - 1 + shift + right + 1)
            first_tile = (lo_key // bk) * bk
            if bug == "tile-skip-window":
                first_tile = -(-lo_key // bk) * bk  # (wrong) the partial tile at the left edge
            m = np.full((B, H, i1 - i0, 1), -np.inf, dtype=dt)
            l_i = np.zeros_like(m)
            o = np.zeros((B, H, i1 - i0, Ev), dtype=dt)
            for j0 in range(first_tile, hi_key, bk):
                j1 = min(j0 + bk, S)
                cols = np.arange(j0, j1)[None, :]  # (1, Bk)
                s = q[..., i0:i1, :] @ np.swapaxes(k[..., j0:j1, :], -1, -2) * dt(sm)
                ok = np.ones((i1 - i0, j1 - j0), dtype=bool)
                if left >= 0:
                    ok &= (
                        (cols > rows - left)
                        if bug == "window-left-short"
                        else (cols >= rows - left - (1 if bug == "window-left-long" else 0))
                    )
                if right >= 0:
                    ok &= (
                        (cols < rows + right)
                        if edge_bug == "window-right-short"
                        else (cols <= rows + right + (1 if edge_bug == "window-right-long" else 0))
                    )
                if doc is not None:
                    same = (
                        doc[cols] >= doc[rows] if bug == "docs-no-end" else doc[cols] == doc[rows]
                    )
                    ok &= same
                if attention_chunk:
                    ok &= cols // attention_chunk == rows // attention_chunk
                if bug == "softcap-after-mask":
                    s = np.where(ok, s, -np.inf)
                if softcap:
                    cap = 1.0 / softcap if bug == "softcap-inverted" else softcap
                    s = dt(cap) * np.tanh(s / dt(cap))
                if slopes is not None:
                    sign = -1 if bug == "alibi-sign" else 1
                    s = s + sign * slopes[None, :, None, None] * (cols - rows).astype(dt)
                if bug != "softcap-after-mask":
                    s = np.where(ok, s, -np.inf)
                s = s * dt(LOG2E)  # exp(x) == exp2(x log2(e))
                m_new = np.maximum(m, s.max(-1, keepdims=True))
                safe = np.where(np.isfinite(m_new), m_new, 0)
                p = np.exp2(s - safe)
                alpha = np.exp2(m - safe)
                l_i = l_i * alpha + p.sum(-1, keepdims=True)
                o = o * alpha + p @ v[..., j0:j1, :]  # (B, H, Bq, Bk) @ (B, H, Bk, Ev)
                m = m_new
            if sinks is not None and bug != "sink-out":  # one more denominator term, no value
                sink = np.asarray(sinks, dtype=dt)[None, :, None, None] * dt(LOG2E)
                m_new = np.maximum(m, sink)
                alpha = np.exp2(m - m_new)
                times = 2 if bug == "sink-twice" else 1  # "sink-twice": no splits, added twice
                l_i = l_i * alpha + times * np.exp2(sink - m_new)
                o = o * alpha
            out[..., i0:i1, :] = o / l_i
    return out


# ------------------------------------------------- split-KV / chunked forward, FlexAttention mods


def split_kv(q, k, v, score_mod=None, mask_mod=None, sinks=None, rotary_cos=None,
             rotary_sin=None, rotary_interleaved=False, scale=None, enable_gqa=False, *,
             chunk=16, bug=None):  # fmt: skip
    """Each key chunk: its scores, its own max, sum and output; then one merge by the max."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    q, k = rope_inputs(q, k, rotary_cos, rotary_sin, rotary_interleaved, bug)
    B, H, L, E = q.shape
    S = k.shape[2]
    group = H // k.shape[1]
    k, v = k[:, np.arange(H) // group], v[:, np.arange(H) // group]
    sm = 1.0 / math.sqrt(E) if scale is None else scale
    b = np.arange(B)[:, None, None, None]
    h = np.arange(H)[None, :, None, None]
    i = np.arange(L)[None, None, :, None]
    parts = []
    with np.errstate(all="ignore"):
        for j0 in range(0, S, chunk):
            j1 = min(j0 + chunk, S) - (bug == "last-split-short" and j0 + chunk >= S)
            j = np.arange(j0, j1)[None, None, None, :]
            s = q @ np.swapaxes(k[..., j0:j1, :], -1, -2) * dt(sm)  # (B, H, L, C)
            seen = None if mask_mod is None else np.broadcast_to(mask_mod(b, h, i, j), s.shape)
            if seen is not None and bug == "softcap-after-mask":
                s = np.where(seen, s, -np.inf)
            if score_mod is not None:
                s = np.asarray(score_mod(s, b, h, i, j), dtype=s.dtype)
            if seen is not None and bug != "softcap-after-mask":
                s = np.where(seen, s, -np.inf)
            top = s.max(-1, keepdims=True)
            safe = np.where(np.isfinite(top), top, 0)
            e = np.exp(s - safe)
            total = e.sum(-1, keepdims=True)
            if sinks is not None and bug == "sink-per-split":  # each split adds the sink
                total = total + np.exp(np.asarray(sinks, dtype=dt)[None, :, None, None] - safe)
            parts.append((e @ v[..., j0:j1, :], total, top))
        if sinks is not None and bug not in ("sink-out", "sink-per-split"):  # (0, 1, sink)
            logit = np.asarray(sinks, dtype=dt)[None, :, None, None] * np.ones((B, H, L, 1), dt)
            parts.append((np.zeros_like(parts[0][0]), np.ones_like(logit), logit))
        if bug == "merge-average":
            outs = [o / np.where(n > 0, n, 1) for o, n, t in parts if np.isfinite(t).any()]
            return sum(outs) / len(outs)
        top = np.max(np.stack([t for _, _, t in parts]), axis=0)
        top = np.where(np.isfinite(top), top, 0)
        out = np.zeros_like(parts[0][0])
        total = np.zeros_like(parts[0][1])
        for o, n, t in parts:
            w = np.ones_like(t) if bug == "merge-no-rescale" else np.exp(t - top)
            w = np.where(np.isfinite(t), w, 0)
            out, total = out + o * w, total + n * w
        return out / total


# ------------------------------------------------- torch's FlexAttention, called eagerly


def flex_eager(q, k, v, score_mod=None, mask_mod=None, sinks=None, rotary_cos=None,
               rotary_sin=None, rotary_interleaved=False, scale=None, enable_gqa=False, *,
               bug=None):  # fmt: skip
    """torch.nn.attention.flex_attention on CPU (eager), a learned sink as one extra key."""
    import torch
    import torch.nn.attention.flex_attention as flex_module
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k = rope_inputs(q, k, rotary_cos, rotary_sin, rotary_interleaved, bug)
    B, H, L, _ = q.shape
    S = k.shape[2]
    if sinks is not None and bug != "sink-out":  # key S: seen by all, score sinks[h], value 0
        logit = sinks
        k = torch.cat([k, torch.zeros_like(k[:, :, :1])], dim=2)
        v = torch.cat([v, torch.zeros_like(v[:, :, :1])], dim=2)
        inner_score, inner_mask = score_mod, mask_mod

        def score_mod(s, b, h, q_idx, kv_idx):
            kv = torch.clamp(kv_idx, max=S - 1)
            changed = s if inner_score is None else inner_score(s, b, h, q_idx, kv)
            return torch.where(kv_idx == S, logit[h], changed)

        if inner_mask is not None:

            def mask_mod(b, h, q_idx, kv_idx):
                return (kv_idx == S) | inner_mask(b, h, q_idx, torch.clamp(kv_idx, max=S - 1))

    block = None
    if mask_mod is not None:
        block = create_block_mask(mask_mod, B, H, L, k.shape[2], device="cpu")
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True  # eager without a dynamo trace
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return flex_attention(q, k, v, score_mod, block, scale, enable_gqa=enable_gqa)
    finally:
        flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = False


def flex_from_flash_words(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0,
                          alibi_slopes=None, sinks=None, cu_seqlens=None, attention_chunk=0,
                          rotary_cos=None, rotary_sin=None, rotary_interleaved=False, *,
                          bug=None):  # fmt: skip
    """FlashAttention's keywords turned into torch mods for FlexAttention (one cu_seqlens)."""
    import torch

    L, S = q.shape[2], k.shape[2]
    shift = 0 if bug == "decode-top-left" else S - L
    left, right = window_size
    if causal:
        right = 0
    doc = None
    if cu_seqlens is not None:
        doc = torch.searchsorted(cu_seqlens, torch.arange(S, dtype=cu_seqlens.dtype), right=True)

    def mask_mod(b, h, q_idx, kv_idx):
        pos = q_idx + shift
        ok = kv_idx >= 0
        if left >= 0:
            ok = ok & (kv_idx >= pos - left)
        if right >= 0:
            ok = ok & (kv_idx <= pos + right)
        if doc is not None:
            ok = ok & (doc[kv_idx] == doc[q_idx + S - L])
        if attention_chunk:
            ok = ok & (kv_idx // attention_chunk == pos // attention_chunk)
        return ok

    def score_mod(s, b, h, q_idx, kv_idx):
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            s = s + alibi_slopes[h] * (kv_idx - q_idx - shift)
        return s

    masked = causal or left >= 0 or right >= 0 or doc is not None or attention_chunk
    scored = bool(softcap) or alibi_slopes is not None
    return flex_eager(q, k, v, score_mod if scored else None, mask_mod if masked else None,
                      sinks, rotary_cos, rotary_sin, rotary_interleaved, enable_gqa=True,
                      bug=bug)  # fmt: skip

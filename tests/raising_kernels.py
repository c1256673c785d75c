"""Kernels that raise, for the checker's rule "a raise is a failure, NotImplementedError a refusal".

`crash_forward`, `crash_backward` and `crash_variants` are right wherever they run, but crash
with a TypeError on one feature and an IndexError on another (issue 35's kernel that passed, exit
0); `decode_step` is a correct token-by-token KV-cache decode that supports a window, softcap,
sinks and GQA and raises NotImplementedError for the rest.
"""

from __future__ import annotations

import math

import numpy as np

from tests.backward_kernels import numpy_backward
from tests.kernels_for_checker import attention
from tests.variant_backward_kernels import flash2_variants_backward
from tests.variant_kernels import flash2_variants

HOOKS: dict = {}  # a registry its author never filled in
SCALES: list = []  # a table of custom scales, never filled in


def crash_forward(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Right where it runs; crashes on GQA (TypeError) and on a given scale (IndexError)."""
    if enable_gqa:
        repeat_kv = HOOKS.get("repeat_kv")
        k = repeat_kv(k)
    if scale is not None:
        scale = SCALES[0]
    return attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)


_backward = numpy_backward()


def crash_backward(q, k, v, grad_output, attn_mask=None, is_causal=False, scale=None,
                   enable_gqa=False, dropout_p=0.0, dropout_mask=None):  # fmt: skip
    """A correct backward that crashes on GQA (TypeError) and on a given scale (IndexError)."""
    if enable_gqa:
        repeat_kv = HOOKS.get("repeat_kv")
        k = repeat_kv(k)
    if scale is not None:
        scale = SCALES[0]
    return _backward(q, k, v, grad_output, attn_mask, is_causal, scale, enable_gqa, dropout_p,
                     dropout_mask)  # fmt: skip


def crash_variants(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                   sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0,
                   rotary_cos=None, rotary_sin=None, rotary_interleaved=False):  # fmt: skip
    """flash2_variants, crashing on softcap (TypeError) and on sinks (IndexError)."""
    if softcap:
        cap = HOOKS.get("softcap")
        q = cap(q)
    if sinks is not None:
        sinks = SCALES[0]
    return flash2_variants(q, k, v, causal, window_size, softcap, alibi_slopes, sinks,
                           cu_seqlens_q, cu_seqlens_k, attention_chunk, rotary_cos, rotary_sin,
                           rotary_interleaved)  # fmt: skip


def crash_variants_backward(q, k, v, grad_output, causal=False, window_size=(-1, -1),
                            softcap=0.0, alibi_slopes=None, sinks=None, cu_seqlens_q=None,
                            cu_seqlens_k=None, rotary_cos=None, rotary_sin=None,
                            rotary_interleaved=False):  # fmt: skip
    """flash2_variants_backward, crashing on softcap (TypeError) and on sinks (IndexError)."""
    if softcap:
        cap = HOOKS.get("softcap")
        q = cap(q)
    if sinks is not None:
        sinks = SCALES[0]
    return flash2_variants_backward(q, k, v, grad_output, causal, window_size, softcap,
                                    alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, rotary_cos,
                                    rotary_sin, rotary_interleaved)  # fmt: skip


def decode_step(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0,
                rotary_cos=None, rotary_sin=None, rotary_interleaved=False):  # fmt: skip
    """One query token at a time against the KV cache (online softmax over the cached keys).

    Supports a left window, softcap, sinks and GQA; the queries are the last L positions of the
    cache and see only the past, so a case that looks ahead is declined."""
    left, right = window_size
    if alibi_slopes is not None or cu_seqlens_q is not None or attention_chunk:
        raise NotImplementedError("decode_step: no ALiBi, documents or chunks")
    if rotary_cos is not None:
        raise NotImplementedError("decode_step: q and k arrive rotated")
    if not causal and right != 0:
        raise NotImplementedError("decode_step: a query sees only the past (causal)")
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    B, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    scale = 1.0 / math.sqrt(E)
    out = np.zeros((B, H, L, Ev))
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)  # GQA: query head h reads kv head h // group
            for i in range(L):
                pos = i + S - L  # the query's position in the cache
                first = 0 if left < 0 else max(0, pos - left)
                m, total, acc = -math.inf, 0.0, np.zeros(Ev)
                for j in range(first, pos + 1):  # one cached token at a time
                    s = float(q[b, h, i] @ k[b, hk, j]) * scale
                    if softcap:
                        s = softcap * math.tanh(s / softcap)
                    m_new = max(m, s)
                    alpha = math.exp(m - m_new) if m > -math.inf else 0.0
                    p = math.exp(s - m_new)
                    total, acc, m = total * alpha + p, acc * alpha + p * v[b, hk, j], m_new
                if sinks is not None:  # the sink: one more term in the denominator, no value
                    sink = float(np.asarray(sinks)[h])
                    m_new = max(m, sink)
                    alpha = math.exp(m - m_new)
                    total, acc = total * alpha + math.exp(sink - m_new), acc * alpha
                out[b, h, i] = acc / total
    return out.astype(q.dtype)


def numpy_only(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """A correct NumPy kernel: it reads q.shape, so lists make it crash."""
    E = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) * (1.0 / math.sqrt(E) if scale is None else scale)
    if attn_mask is not None or is_causal or enable_gqa:
        raise NotImplementedError("numpy_only: no masks, no GQA")
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def numpy_only_variants(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0,
                        alibi_slopes=None, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        attention_chunk=0, rotary_cos=None, rotary_sin=None,
                        rotary_interleaved=False):  # fmt: skip
    """flash2_variants for NumPy arrays only: it reads q.shape first, so lists make it crash."""
    if q.shape[-1] % 2:
        raise NotImplementedError("numpy_only_variants: even head dims only")
    return flash2_variants(q, k, v, causal, window_size, softcap, alibi_slopes, sinks,
                           cu_seqlens_q, cu_seqlens_k, attention_chunk, rotary_cos, rotary_sin,
                           rotary_interleaved)  # fmt: skip

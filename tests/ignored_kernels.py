"""Kernels that take a keyword and never use it, written the way users write them.

Each is right but for that keyword: a `**kwargs` that swallows attn_mask, a signature that
names is_causal and never reads it, a wrapper that does not pass a keyword on. FORWARD: name ->
(fn, array, the ignored names its diagnosis must give, or () where no name is true of every
case). VARIANTS: name -> (fn, variant_style, array, names). CORRECT: kernels that must pass.
Used by tests/test_check_ignored.py.
"""

from __future__ import annotations

import math

import numpy as np

from scratch.checker import ignored
from tests import variant_kernels as vk

try:
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch is optional
    F = None


def _heads(q, k, v, enable_gqa):
    """k, v with kv heads repeated to q's (head h reads kv head h // group)."""
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    return k, v


def _softmax_v(scores, v):
    """softmax over the keys (a row with no key gives 0), then @ v."""
    top = scores.max(-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(-1, keepdims=True)
    return (e / np.where(total > 0, total, 1.0)) @ v  # (..., L, S) @ (..., S, Ev)


def mask_swallowed(q, k, v, is_causal=False, scale=None, enable_gqa=False, **kwargs):
    """attn_mask arrives in **kwargs and is never read."""
    k, v = _heads(q, k, v, enable_gqa)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
    if is_causal:
        L, S = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((L, S), dtype=bool)), scores, -np.inf)
    return _softmax_v(scores, v)


def causal_unread(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """is_causal is in the signature and never read."""
    k, v = _heads(q, k, v, enable_gqa)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        scores = np.where(m, scores, -np.inf) if m.dtype == bool else scores + m
    return _softmax_v(scores, v)


def scale_unread(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """scale is in the signature; the kernel always scales by 1/sqrt(d)."""
    k, v = _heads(q, k, v, enable_gqa)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])  # (..., L, S)
    if is_causal:
        L, S = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((L, S), dtype=bool)), scores, -np.inf)
    elif attn_mask is not None:
        m = np.asarray(attn_mask)
        scores = np.where(m, scores, -np.inf) if m.dtype == bool else scores + m
    return _softmax_v(scores, v)


def tour(q, k, v, scale=None, **unused):
    """The README tour's kernel with its scale put right: attn_mask, is_causal swallowed."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True) @ v


def float_mask_skipped(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Applies bool masks and is_causal, skips a float mask: attn_mask is not ignored."""
    if attn_mask is not None and np.asarray(attn_mask).dtype != bool:
        attn_mask = None
    return causal_applied(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def causal_square_only(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Applies is_causal only when L == S: is_causal is not ignored, and no name fits."""
    is_causal = is_causal and q.shape[-2] == k.shape[-2]
    return causal_applied(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def causal_applied(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The correct kernel the last two wrap."""
    if is_causal:
        attn_mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
    return causal_unread(q, k, v, attn_mask, False, scale, enable_gqa)


def sdpa_mask_dropped(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's SDPA called without the mask passed on."""
    return F.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
    )


def sdpa_causal_dropped(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's SDPA called without is_causal passed on."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, scale=scale, enable_gqa=enable_gqa
    )


def drops(kernel, *words: str):
    """kernel behind a wrapper that takes every keyword and passes `words` on to nobody."""

    def wrapper(q, k, v, **kwargs):
        for word in (*words, "enable_gqa"):  # the kernels do GQA without enable_gqa
            kwargs.pop(word, None)
        return kernel(q, k, v, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = f"{kernel.__name__}_without_{'_'.join(words)}"
    return wrapper


I = ignored
FORWARD: dict[str, tuple] = {
    "numpy attn_mask in **kwargs": (mask_swallowed, "numpy", (I.ATTN_MASK,)),
    "numpy is_causal unread": (causal_unread, "numpy", (I.IS_CAUSAL,)),
    "numpy scale unread": (scale_unread, "numpy", (I.SCALE,)),
    "README tour, scale put right": (tour, "numpy", (I.ATTN_MASK, I.IS_CAUSAL)),
    "numpy float mask skipped": (float_mask_skipped, "numpy", ()),
    "numpy is_causal only when L == S": (causal_square_only, "numpy", ()),
}
if F is not None:
    FORWARD["torch sdpa without the mask"] = (sdpa_mask_dropped, "torch", (I.ATTN_MASK,))
    FORWARD["torch sdpa without is_causal"] = (sdpa_causal_dropped, "torch", (I.IS_CAUSAL,))

_FLASH = {
    "causal": (("causal",), I.CAUSAL),
    "window_size": (("window_size",), I.WINDOW),
    "softcap": (("softcap",), I.SOFTCAP),
    "alibi_slopes": (("alibi_slopes",), I.ALIBI),
    "sinks": (("sinks",), I.SINKS),
    "cu_seqlens": (("cu_seqlens_q", "cu_seqlens_k"), I.DOCUMENTS),
    "attention_chunk": (("attention_chunk",), I.CHUNK),
    "rotary": (("rotary_cos", "rotary_sin", "rotary_interleaved"), I.ROTARY),
}
VARIANTS: dict[str, tuple] = {
    f"flash2 without {word}": (drops(vk.flash2_variants, *words), "flash", "numpy", (name,))
    for word, (words, name) in _FLASH.items()
}
VARIANTS["split-KV without mask_mod"] = (
    drops(vk.split_kv, "mask_mod"), "flex", "numpy", (I.MASK_MOD,)
)  # fmt: skip
VARIANTS["split-KV without score_mod"] = (
    drops(vk.split_kv, "score_mod"), "flex", "numpy", (I.SCORE_MOD,)
)  # fmt: skip
VARIANTS["split-KV without sinks"] = (drops(vk.split_kv, "sinks"), "flex", "numpy", (I.SINKS,))

CORRECT = {
    "numpy causal_applied": (causal_applied, "numpy"),
    "flash2 behind a wrapper that drops nothing": (drops(vk.flash2_variants), "flash"),
    "split-KV behind a wrapper that drops nothing": (drops(vk.split_kv), "flex"),
}

"""Kernels written the way FlashAttention's users write them, for the checker's tests.

flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
deterministic, return_attn_probs) on (batch, seqlen, nheads, headdim), as a test reference
(attention_ref in its spirit: transpose, GQA repeat, one softmax) and as a tiled online softmax
over key blocks; flash_attn_varlen_func as a loop over cu_seqlens. Each maker takes `bug`, one
mistake FlashAttention's users make (None: correct); the function it returns has FlashAttention's
own name and signature, so the checker reads its interface from it.
"""

from __future__ import annotations

import math

import numpy as np

BUGS = ("top-left", "scale-ignored", "window-swapped", "bshd-as-bhsd", "output-bhsd")


def _masks(L: int, S: int, causal: bool, window_size, bug) -> tuple[np.ndarray, np.ndarray]:
    """(keep (L, S), |i - j| (L, S)) with FlashAttention's bottom-right alignment."""
    shift = 0 if bug == "top-left" else S - L  # query i is position i + S - L
    i = np.arange(L)[:, None] + shift
    j = np.arange(S)[None, :]
    left, right = window_size
    if bug == "window-swapped":
        right, left = window_size
    keep = np.ones((L, S), dtype=bool)
    if causal:
        keep &= j <= i
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep, np.abs(i - j)


def _scale(E: int, softmax_scale, bug) -> float:
    """softmax_scale, or FlashAttention's default 1/sqrt(headdim)."""
    if softmax_scale is None or bug == "scale-ignored":
        return 1.0 / math.sqrt(E)
    return softmax_scale


def make_reference(bug: str | None = None, xp: str = "numpy"):
    """flash_attn_func as a reference in NumPy (xp='numpy') or torch ('torch')."""
    if xp == "torch":
        import torch

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                        deterministic=False, return_attn_probs=False):  # fmt: skip
        B, L, H, E = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        scale = _scale(E, softmax_scale, bug)
        if bug != "bshd-as-bhsd":
            q, k, v = (
                x.transpose(1, 2) if xp == "torch" else x.transpose(0, 2, 1, 3) for x in (q, k, v)
            )  # fmt: skip  (B, N, H, D) -> (B, H, N, D)
        else:  # the layout taken for (B, H, N, D)
            L, S, H, Hkv = H, Hkv, L, S
        keep, dist = _masks(L, S, causal, window_size, bug)
        if xp == "torch":
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
            s = q @ k.transpose(-1, -2) * scale  # (B, H, L, E) @ (B, H, E, S)
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if alibi_slopes is not None:
                s = s - alibi_slopes[:, None, None] * torch.tensor(dist, dtype=s.dtype)
            s = s.masked_fill(~torch.tensor(keep), float("-inf"))
            out = torch.softmax(s, dim=-1) @ v  # (B, H, L, S) @ (B, H, S, Ev)
            return out if bug in ("output-bhsd", "bshd-as-bhsd") else out.transpose(1, 2)
        k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
        s = q @ k.swapaxes(-1, -2) * q.dtype.type(scale)  # (B, H, L, E) @ (B, H, E, S)
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if alibi_slopes is not None:
            s = s - np.asarray(alibi_slopes)[:, None, None] * dist.astype(s.dtype)
        s = np.where(keep, s, -np.inf)
        weights = np.exp(s - s.max(-1, keepdims=True))
        out = (weights / weights.sum(-1, keepdims=True)) @ v  # (B, H, L, S) @ (B, H, S, Ev)
        return out if bug in ("output-bhsd", "bshd-as-bhsd") else out.transpose(0, 2, 1, 3)

    return flash_attn_func


def make_tiled(bug: str | None = None, block: int = 16):
    """flash_attn_func as FlashAttention-2's loop in NumPy: key blocks, a running max and sum."""

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                        deterministic=False, return_attn_probs=False):  # fmt: skip
        B, L, H, E = q.shape
        S, Hkv, Ev = k.shape[1], k.shape[2], v.shape[3]
        scale = q.dtype.type(_scale(E, softmax_scale, bug))
        q = q.transpose(0, 2, 1, 3)  # (B, H, L, E)
        k = np.repeat(k.transpose(0, 2, 1, 3), H // Hkv, axis=1)  # (B, H, S, E)
        v = np.repeat(v.transpose(0, 2, 1, 3), H // Hkv, axis=1)  # (B, H, S, Ev)
        keep, dist = _masks(L, S, causal, window_size, bug)
        top = np.full((B, H, L, 1), -np.inf, dtype=q.dtype)  # running max
        total = np.zeros((B, H, L, 1), dtype=q.dtype)  # running denominator
        acc = np.zeros((B, H, L, Ev), dtype=q.dtype)
        for j in range(0, S, block):
            s = q @ k[:, :, j : j + block].swapaxes(-1, -2) * scale  # (B, H, L, Bk)
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            if alibi_slopes is not None:
                slopes = np.asarray(alibi_slopes)[:, None, None]
                s = s - slopes * dist[:, j : j + block].astype(s.dtype)
            s = np.where(keep[:, j : j + block], s, -np.inf)
            new = np.maximum(top, s.max(-1, keepdims=True))
            safe = np.where(np.isfinite(new), new, 0)  # a block with no key seen yet
            p = np.exp(s - safe)
            alpha = np.exp(top - safe)
            total = total * alpha + p.sum(-1, keepdims=True)
            acc = acc * alpha + p @ v[:, :, j : j + block]  # (B, H, L, Bk) @ (B, H, Bk, Ev)
            top = new
        return (acc / total).transpose(0, 2, 1, 3)  # (B, L, H, Ev)

    return flash_attn_func


def make_varlen(inner, bug: str | None = None):
    """flash_attn_varlen_func as a loop over the packed sequences, calling `inner` (a
    flash_attn_func) on each as a batch of one; bug 'inclusive-end' slices one row too many."""

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p=0.0, softmax_scale=None, causal=False,
                               window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False):  # fmt: skip
        cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        end = 1 if bug == "inclusive-end" else 0
        shape = (q.shape[0], q.shape[1], v.shape[2])
        out = q.new_zeros(shape) if hasattr(q, "new_zeros") else np.zeros(shape, q.dtype)
        for b in range(len(cu_q) - 1):
            rows, keys = slice(cu_q[b], cu_q[b + 1] + end), slice(cu_k[b], cu_k[b + 1] + end)
            options = (dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
            out[rows] = inner(q[None, rows], k[None, keys], v[None, keys], *options)[0]
        return out

    return flash_attn_varlen_func

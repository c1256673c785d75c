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
            weights = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row with no key: 0
            out = weights @ v  # (B, H, L, S) @ (B, H, S, Ev)
            return out if bug in ("output-bhsd", "bshd-as-bhsd") else out.transpose(1, 2)
        k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
        s = q @ k.swapaxes(-1, -2) * q.dtype.type(scale)  # (B, H, L, E) @ (B, H, E, S)
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if alibi_slopes is not None:
            s = s - np.asarray(alibi_slopes)[:, None, None] * dist.astype(s.dtype)
        s = np.where(keep, s, -np.inf)
        with np.errstate(invalid="ignore"):  # a row with no key (causal, L > S): weights 0
            weights = np.nan_to_num(np.exp(s - s.max(-1, keepdims=True)))
            total = weights.sum(-1, keepdims=True)
        out = (weights / np.where(total > 0, total, 1)) @ v  # (B, H, L, S) @ (B, H, S, Ev)
        return out if bug in ("output-bhsd", "bshd-as-bhsd") else out.transpose(0, 2, 1, 3)

    return flash_attn_func


LSE_BUGS = ("lse-base-2", "lse-zero-empty", "lse-no-max")


def make_tiled(bug: str | None = None, block: int = 16, lse: str | None = None):
    """flash_attn_func as FlashAttention-2's loop in NumPy: key blocks, a running max and sum.
    lse 'e' (natural, FlashAttention's softmax_lse) or '2' (base 2, a Triton kernel's): return
    (out, softmax_lse (B, H, L), None), with the LSE_BUGS: base 2 reported as natural, 0 for a
    row with no key, the max left out of it (log l alone)."""

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
        with np.errstate(invalid="ignore"):  # a row with no key (causal, L > S): output 0
            out = np.where(total > 0, acc / total, 0).transpose(0, 2, 1, 3)  # (B, L, H, Ev)
        if lse is None:
            return out
        with np.errstate(divide="ignore"):  # a row with no key: log 0 = -inf
            found = np.log(total) if bug == "lse-no-max" else top + np.log(total)  # (B, H, L, 1)
        if bug == "lse-zero-empty":
            found = np.where(total > 0, found, 0.0)
        if lse == "2" or bug == "lse-base-2":
            found = found / np.log(2.0)  # m log2(e) + log2 l
        return out, found[..., 0], None  # (out, softmax_lse, S_dmask)

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
        lse = None
        for b in range(len(cu_q) - 1):
            rows, keys = slice(cu_q[b], cu_q[b + 1] + end), slice(cu_k[b], cu_k[b + 1] + end)
            options = (dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
            found = inner(q[None, rows], k[None, keys], v[None, keys], *options)
            if isinstance(found, tuple):  # (out, softmax_lse (1, H, rows), S_dmask)
                lse = np.zeros((q.shape[1], q.shape[0])) if lse is None else lse  # (H, total_q)
                lse[:, rows] = found[1][0]
                found = found[0]
            out[rows] = found[0]
        return out if lse is None else (out, lse, None)

    return flash_attn_varlen_func

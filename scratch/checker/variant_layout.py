"""FlashAttention's own interface: which kernels take it, and its tensors' layout.

flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False) takes
(batch, seqlen, nheads, headdim): q (B, L, H, E), k and v (B, S, Hkv, E / Ev), and returns the
output (B, L, H, Ev). flash_attn_varlen_func takes the sequences packed, q (total_q, H, E) and
k, v (total_k, Hkv, E / Ev), sequence b being rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1
(int32 cu_seqlens, with max_seqlen_q and max_seqlen_k). The checker's cases are FlexAttention's
(B, H, L, E); `to_kernel` and `from_kernel` turn a case's arrays into the kernel's layout and
its answers back. Standard library only: the arrays are NumPy's, given by the caller.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

FLASH_ATTN, VARLEN = "flash_attn", "flash_attn_varlen"
INTERFACE = (FLASH_ATTN, VARLEN)  # the variant styles that are FlashAttention's own interface
LAYOUT = {
    FLASH_ATTN: "(batch, seqlen, nheads, headdim)",
    VARLEN: "(total_tokens, nheads, headdim), packed by cu_seqlens",
}


def interface_of(fn: Callable) -> str | None:
    """'flash_attn_varlen' or 'flash_attn' when fn is named or parameterised like
    flash_attn_varlen_func or flash_attn_func (max_seqlen_q; softmax_scale), else None."""
    name = getattr(fn, "__name__", "")
    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = set()
    if names & {"mask_mod", "score_mod", "attn_mask", "is_causal"}:
        return None  # FlexAttention's or torch's words: not FlashAttention's interface
    if name == "flash_attn_varlen_func" or "max_seqlen_q" in names:
        return VARLEN
    if name == "flash_attn_func" or "softmax_scale" in names:
        return FLASH_ATTN
    return None


def sequences(shape: tuple[int, ...], cu_seqlens: tuple[int, ...] | None) -> list[int]:
    """cu_seqlens of a case's packed rows: its documents (batch 1), else one per batch entry."""
    if cu_seqlens is not None:
        return list(cu_seqlens)
    B, N = shape[0], shape[2]
    return [b * N for b in range(B + 1)]


def to_kernel(style: str, x):
    """x (B, H, N, D) in the kernel's layout: as is, (B, N, H, D) or packed (B * N, H, D)."""
    if style not in INTERFACE:
        return x
    bshd = x.transpose(0, 2, 1, 3)  # (B, H, N, D) -> (B, N, H, D)
    if style == FLASH_ATTN:
        return bshd
    B, N, H, D = bshd.shape
    return bshd.reshape(B * N, H, D)  # the batch entries' rows one after another


def from_kernel(style: str, x, shape: tuple[int, ...]):
    """The kernel's x back in (B, H, N, D) = shape (x already has to_kernel's shape)."""
    if style not in INTERFACE:
        return x
    B, H, N, D = shape
    return x.reshape(B, N, H, D).transpose(0, 2, 1, 3)  # (B, N, H, D) -> (B, H, N, D)


def kernel_shape(style: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of an array of `shape` (B, H, N, D) in the kernel's layout."""
    B, H, N, D = shape
    return {FLASH_ATTN: (B, N, H, D), VARLEN: (B * N, H, D)}.get(style, shape)


def layout_words(style: str) -> str:
    """The layout in words, for a shape message."""
    return LAYOUT.get(style, "(1, H, L, Ev)")


__all__ = [
    "FLASH_ATTN",
    "INTERFACE",
    "VARLEN",
    "from_kernel",
    "interface_of",
    "kernel_shape",
    "layout_words",
    "sequences",
    "to_kernel",
]

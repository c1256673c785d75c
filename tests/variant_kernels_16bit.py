"""16-bit variant kernels written the way outside projects write them, one mistake per `bug`.

`eager` is transformers' eager attention (modeling_gemma2.eager_attention_forward): q @ k^T,
the scale, softcap and ALiBi in the input dtype, softmax in float32 (`dtype=torch.float32`)
cast back, weights @ v in the input dtype; torch autograd gives its backward. `sdpa` is
torch's scaled_dot_product_attention with an explicit mask (a float mask: ALiBi's bias; a
learned sink as one extra key of value 0). Both take FlashAttention's keywords. `bug=None` is
the correct kernel.
"""

from __future__ import annotations

import math


def rotate_half(x):
    """transformers' rotate_half: (-x2, x1) of the two halves."""
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q, k, cos, sin, interleaved: bool):
    """RoPE in the input dtype: q at positions S - L + i, k at j (cos, sin (S, E / 2))."""
    import torch

    L, S = q.shape[-2], k.shape[-2]
    if interleaved:  # GPT-J: pairs (2m, 2m + 1), cos and sin repeated per pair
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)

        def turn(x, c, s):
            pairs = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
            return x * c + pairs * s

    else:  # Llama: pairs (m, m + E / 2)
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)

        def turn(x, c, s):
            return x * c + rotate_half(x) * s

    return turn(q, cos[S - L :], sin[S - L :]), turn(k, cos[:S], sin[:S])


def seen(L, S, causal, window_size, cu_seqlens, attention_chunk, bug):
    """(L, S) bool: the keys each query sees, bottom-right aligned as FlashAttention's."""
    import torch

    i = torch.arange(L)[:, None] + (S - L)  # query i is position i + S - L
    j = torch.arange(S)[None, :]
    left, right = window_size
    if causal:
        right = 0
    if bug == "window-left-long" and left >= 0:
        left += 1
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    if cu_seqlens is not None:
        doc = torch.searchsorted(cu_seqlens, torch.arange(S, dtype=cu_seqlens.dtype), right=True)
        ok &= doc[j] == doc[i]
    if attention_chunk:
        ok &= j // attention_chunk == i // attention_chunk
    return ok


def eager(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
          sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0, rotary_cos=None,
          rotary_sin=None, rotary_interleaved=False, enable_gqa=False, *,
          bug=None):  # fmt: skip
    """transformers' eager attention in q's dtype, softmax in float32."""
    import torch

    if rotary_cos is not None:
        q, k = rope(q, k, rotary_cos, rotary_sin, rotary_interleaved)
    B, H, L, E = q.shape
    S = k.shape[2]
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * E**-0.5  # (B, H, L, S) in q's dtype
    if softcap and bug != "no-softcap":
        scores = torch.tanh(scores / softcap) * softcap
    if alibi_slopes is not None:
        i = torch.arange(L)[:, None] + (S - L)
        distance = (torch.arange(S)[None, :] - i).to(q.dtype)  # j - i
        scores = scores + alibi_slopes[:, None, None] * distance
    keep = seen(L, S, causal, window_size, cu_seqlens_q, attention_chunk, bug)
    scores = scores.masked_fill(~keep, float("-inf"))
    if sinks is not None:  # gpt-oss: the sink as one more logit per row, no value
        scores = torch.cat([scores, sinks.view(1, H, 1, 1).expand(B, H, L, 1)], dim=-1)
    if bug == "softmax-16bit-no-max":  # exp in the 16-bit dtype, no max subtracted
        e = torch.exp(scores)
        weights = e / e.sum(-1, keepdim=True)
    else:
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights[..., :S], v)  # (B, H, L, S) @ (B, H, S, Ev)


def autograd(forward, q, k, v, grad_output, bug, keywords: dict):
    """torch.autograd.grad through forward: (dq, dk, dv), and dsinks where the case has sinks."""
    import torch

    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    sinks = keywords.get("sinks")
    if sinks is not None:
        keywords["sinks"] = sinks.detach().clone().requires_grad_(True)
        leaves.append(keywords["sinks"])
    with torch.enable_grad():
        out = forward(*leaves[:3], bug=bug, **keywords)
        return torch.autograd.grad(out, leaves, grad_output)


def eager_backward(q, k, v, grad_output, *, bug=None, **keywords):
    """torch.autograd.grad through `eager`."""
    return autograd(eager, q, k, v, grad_output, bug, keywords)


def sdpa(q, k, v, causal=False, window_size=(-1, -1), alibi_slopes=None, sinks=None,
         cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0, rotary_cos=None,
         rotary_sin=None, rotary_interleaved=False, enable_gqa=False, *, bug=None):  # fmt: skip
    """torch's scaled_dot_product_attention with an explicit mask in q's dtype."""
    import torch
    import torch.nn.functional as F

    if rotary_cos is not None:
        q, k = rope(q, k, rotary_cos, rotary_sin, rotary_interleaved)
    B, H, L, E = q.shape
    S = k.shape[2]
    keep = seen(L, S, causal, window_size, cu_seqlens_q, attention_chunk, bug)
    bias = torch.zeros(H, L, S, dtype=q.dtype).masked_fill(~keep, float("-inf"))
    if alibi_slopes is not None:
        i = torch.arange(L)[:, None] + (S - L)
        bias = bias + alibi_slopes[:, None, None] * (torch.arange(S)[None, :] - i).to(q.dtype)
    if sinks is not None:  # one more key: k = 0, v = 0, its score the sink
        k = torch.cat([k, torch.zeros_like(k[:, :, :1])], dim=2)
        v = torch.cat([v, torch.zeros_like(v[:, :, :1])], dim=2)
        bias = torch.cat([bias, sinks.view(H, 1, 1).expand(H, L, 1)], dim=-1)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias[None], scale=1 / math.sqrt(E), enable_gqa=k.shape[1] != H
    )


def sdpa_backward(q, k, v, grad_output, *, bug=None, **keywords):
    """torch.autograd.grad through `sdpa`."""
    return autograd(sdpa, q, k, v, grad_output, bug, keywords)


def widened(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
            sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0,
            rotary_cos=None, rotary_sin=None, rotary_interleaved=False, *, bug=None):  # fmt: skip
    """tests/variant_kernels.py's FlashAttention-2 tiled kernel in float32 on 16-bit NumPy
    inputs, the output rounded to their dtype (bug 'float32-out': returned in float32)."""
    import numpy as np

    from tests.variant_kernels import flash2_variants

    def up(x):
        return None if x is None else np.asarray(x, dtype=np.float32)

    out = flash2_variants(up(q), up(k), up(v), causal, window_size, softcap, up(alibi_slopes),
                          up(sinks), cu_seqlens_q, cu_seqlens_k, attention_chunk, up(rotary_cos),
                          up(rotary_sin), rotary_interleaved)  # fmt: skip
    return out if bug == "float32-out" else out.astype(q.dtype)

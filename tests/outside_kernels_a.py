"""Variant kernels in torch written the way outside projects write them, one slip per `bug`.

Each is written from its project's description, not from the checker: transformers' Llama RoPE
(its own inv_freq tables, `rotate_half`, `apply_rotary_pos_emb`), FlashAttention's
`apply_rotary_emb` (the given (S, d / 2) tables widened per pairing; GPT-J's `rotate_every_two`
for interleaved), Gemma 2's softcapped eager attention, BLOOM's ALiBi (`build_alibi_tensor`: its
own slopes from the head count, bias slope * j), a dense reference taking FlashAttention's keywords
(causal, window_size, softcap, alibi_slopes, cu_seqlens, attention_chunk; in the spirit of
`attention_ref`), a `flash_attn_varlen_func`-style loop over the documents of cu_seqlens, and
Llama 4's chunked attention as a loop over chunks. Every one takes q (1, H, L, E), k and v
(1, Hkv, S, E), repeats kv heads for GQA, and puts the L queries at the last L positions.

`bug=None` is the correct kernel; CATALOGUE (tests/outside_record_a.py) lists each slip with the
words the checker's name must hold.
"""

from __future__ import annotations

import math

import torch


def repeat_kv(x: torch.Tensor, H: int) -> torch.Tensor:
    """transformers' repeat_kv: kv head g serves query heads g * n .. g * n + n - 1."""
    return x.repeat_interleave(H // x.shape[1], dim=1)


def finish(scores: torch.Tensor, seen: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax over the seen keys, then @ v: (1, H, L, S) @ (1, H, S, Ev) -> (1, H, L, Ev)."""
    weights = torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1)
    return weights @ v


def bottom_right(L: int, S: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query positions (L, 1) (the last L of S) and key positions (1, S)."""
    return torch.arange(S - L, S)[:, None], torch.arange(S)[None, :]


def window_mask(L: int, S: int, causal: bool, window_size) -> torch.Tensor:
    """(L, S) bool: FlashAttention's causal and window_size, bottom-right."""
    i, j = bottom_right(L, S)
    seen = torch.ones(L, S, dtype=torch.bool)
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen


# ------------------------------------------------------------- transformers' Llama RoPE


def rotate_half(x: torch.Tensor, bug=None) -> torch.Tensor:
    """Rotates half the hidden dims of the input."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    if bug == "sign":
        return torch.cat((x2, -x1), dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def llama_tables(positions, dim: int, dtype, bug=None, base: float = 10000.0):
    """LlamaRotaryEmbedding.forward: cos, sin (N, dim) for the positions (in float64, cast)."""
    if bug == "base":
        base = 500000.0  # Llama 3's rope_theta, in a model trained with 10000
    if bug == "exponent":
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, dtype=torch.float64)[: dim // 2] / dim))
    elif bug == "inv-sign":
        inv_freq = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    else:
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (N, dim / 2)
    if bug == "tables":
        emb = freqs.repeat_interleave(2, dim=-1)  # GPT-J's layout, with rotate_half
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def llama_rope(q, k, v, causal=False, rotary_cos=None, rotary_sin=None, rotary_interleaved=False,
               *, bug=None):  # fmt: skip
    """Llama's attention with its own RoPE (rotary_cos / rotary_sin only say RoPE is on)."""
    if rotary_interleaved:
        raise NotImplementedError("Llama's rotate_half pairs (m, m + d/2) only")
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    if rotary_cos is not None:
        q_pos, k_pos = torch.arange(S - L, S), torch.arange(S)
        if bug == "q-position":
            q_pos = q_pos + 1
        if bug == "k-position":
            k_pos = k_pos + 1  # 1-based key positions
        cos_q, sin_q = llama_tables(q_pos, E, q.dtype, bug)
        cos_k, sin_k = llama_tables(k_pos, E, q.dtype, bug)
        if bug == "swap":
            cos_q, sin_q, cos_k, sin_k = sin_q, cos_q, sin_k, cos_k
        q_embed = (q * cos_q) + (rotate_half(q, bug) * sin_q)
        k_embed = (k * cos_k) + (rotate_half(k, bug) * sin_k)
        if bug == "v":
            v = (v * cos_k) + (rotate_half(v) * sin_k)
        q, k = q_embed, (k if bug == "k-unturned" else k_embed)
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    scores = q @ k.transpose(2, 3) / math.sqrt(E)  # (1, H, L, E) @ (1, H, E, S)
    i, j = bottom_right(L, S)
    seen = (j <= i) if causal else torch.ones(L, S, dtype=torch.bool)
    return finish(scores, seen, v)


# ------------------------------------------- FlashAttention's apply_rotary_emb (GPT-J's pairing)


def rotate_every_two(x, bug=None):
    """GPT-J: pairs (2m, 2m + 1) -> (-x[2m + 1], x[2m])."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    pair = torch.stack((x2, -x1) if bug == "sign" else (-x2, x1), dim=-1)
    return pair.flatten(-2)


def apply_rotary_emb(x, cos, sin, interleaved: bool, bug=None):
    """flash_attn.layers.rotary.apply_rotary_emb_torch: cos, sin (N, d / 2) widened to d."""
    if bug == "pairing":
        interleaved = False  # the flag never read: NeoX's halves always
    widen_interleaved = interleaved != (bug == "tables")
    if widen_interleaved:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    else:
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    if bug == "swap":
        cos, sin = sin, cos
    turned = rotate_every_two(x, bug) if interleaved else rotate_half(x, bug)
    return x * cos + turned * sin


def flash_rope(q, k, v, causal=False, rotary_cos=None, rotary_sin=None, rotary_interleaved=False,
               *, bug=None):  # fmt: skip
    """FlashAttention's rotary path: q turned at seqlen_offset S - L, k at 0; then attention."""
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    if rotary_cos is not None:
        rows = slice(S - L, S)
        if bug != "k-only":
            q = apply_rotary_emb(q, rotary_cos[rows], rotary_sin[rows], rotary_interleaved, bug)
        k = apply_rotary_emb(k, rotary_cos[:S], rotary_sin[:S], rotary_interleaved, bug)
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    scores = torch.einsum("bhld,bhsd->bhls", q, k) / math.sqrt(E)
    i, j = bottom_right(L, S)
    seen = (j <= i) if causal else torch.ones(L, S, dtype=torch.bool)
    return finish(scores, seen, v)


# ------------------------------------------------------------- Gemma 2's softcapped attention


def gemma_softcap(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, *, bug=None):
    """Gemma 2's eager attention: scaled scores, capped (softcap), masked, softmax."""
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    scaling = E**-0.5
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    mask = torch.zeros(L, S, dtype=q.dtype).masked_fill(
        ~window_mask(L, S, causal, window_size), float("-inf")
    )  # additive, as transformers' causal_mask
    raw = q @ k.transpose(2, 3)  # (1, H, L, S)
    scores = raw * scaling
    if bug == "after-mask":
        scores = scores + mask
    if softcap:
        if bug == "before-scale":
            scores = torch.tanh(raw / softcap) * softcap * scaling
        elif bug == "tanh-unscaled":
            scores = torch.tanh(raw) * softcap * scaling
        elif bug == "no-divide":
            scores = torch.tanh(scores) * softcap
        elif bug == "times":
            scores = torch.tanh(scores * softcap) * softcap
        elif bug == "no-times":
            scores = torch.tanh(scores / softcap)
        else:
            scores = torch.tanh(scores / softcap) * softcap
            if bug == "scaled-again":
                scores = scores * scaling
    if bug != "after-mask":
        scores = scores + mask
    return torch.softmax(scores, dim=-1) @ v


# ------------------------------------------------------------------------- BLOOM's ALiBi


def bloom_slopes(H: int, bug=None) -> torch.Tensor:
    """build_alibi_tensor's slopes: 2^(-8/n), 2^(-16/n), ... for the nearest power of two n
    below H, then every other slope of 2n for the remaining heads."""
    if bug == "naive":
        return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(H))
    if bug == "next-pow2":
        closest = 2 ** math.ceil(math.log2(H))
    first = {"exponent-low": 0, "exponent-high": 2}.get(bug, 1)
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    powers = torch.arange(first, first + closest, dtype=torch.float64)
    slopes = torch.pow(torch.tensor(base, dtype=torch.float64), powers)
    if bug == "next-pow2":
        return slopes[:H]
    if closest != H:
        extra_base = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, H - closest)
        extra = torch.arange(first, first + 2 * remaining, 2, dtype=torch.float64)
        slopes = torch.cat(
            [slopes, torch.pow(torch.tensor(extra_base, dtype=torch.float64), extra)]
        )
    return slopes


def bloom_alibi(q, k, v, causal=False, window_size=(-1, -1), alibi_slopes=None, *, bug=None):
    """BLOOM's attention: its own slopes (alibi_slopes only says ALiBi is on), bias slope * j
    added to the scaled scores (softmax ignores the row's constant slope * i)."""
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    seen = window_mask(L, S, causal, window_size)
    scores = q @ k.transpose(2, 3) / math.sqrt(E)
    alibi = None
    if alibi_slopes is not None:
        slopes = bloom_slopes(H, bug).to(q.dtype)
        alibi = slopes[:, None, None] * torch.arange(S, dtype=q.dtype)[None, None, :]  # (H, 1, S)
        if bug == "sign":
            alibi = -alibi
        if bug != "after-softmax":
            scores = scores + alibi
    weights = torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1)
    if bug == "after-softmax" and alibi is not None:
        weights = weights + alibi
    return weights @ v


# ------------------------------------------------ a dense reference in FlashAttention's keywords


def doc_ids(cu: torch.Tensor, positions: torch.Tensor, bug=None, query=False) -> torch.Tensor:
    """The document of each position: searchsorted(cu_seqlens, pos, right=True) - 1."""
    if bug == "left":
        return torch.searchsorted(cu, positions, right=False) - 1
    ids = torch.searchsorted(cu, positions, right=True)
    return ids if bug == "next" and query else ids - 1


def flash_ref(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
              cu_seqlens=None, attention_chunk=0, *, bug=None):  # fmt: skip
    """Every rule as a dense (L, S) mask, scores capped then biased, in the input dtype."""
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    i, j = bottom_right(L, S)
    seen = window_mask(L, S, causal, window_size)
    if cu_seqlens is not None:
        cu = torch.as_tensor(cu_seqlens, dtype=torch.int64)
        seen &= doc_ids(cu, i, bug, query=True) == doc_ids(cu, j, bug)
    if attention_chunk:
        n = attention_chunk
        if bug == "chunk-window":
            seen &= j > i - n
        elif bug == "chunk-early":  # positions counted from 1
            seen &= (j + 1) // n == (i + 1) // n
        elif bug == "chunk-top-left":
            seen &= j // n == torch.arange(L)[:, None] // n
        else:
            seen &= j // n == i // n
    scores = q @ k.transpose(2, 3)
    bias = None
    if alibi_slopes is not None:
        slopes = torch.as_tensor(alibi_slopes, dtype=q.dtype)
        bias = slopes[:, None, None] * (j - i).to(q.dtype)  # (H, L, S)
    if bias is not None and bug == "alibi-scaled":
        scores = scores + bias
    scores = scores / math.sqrt(E)
    if bias is not None and bug == "alibi-before-softcap":
        scores = scores + bias
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if bias is not None and bug not in ("alibi-scaled", "alibi-before-softcap"):
        scores = scores + bias
    return finish(scores, seen, v)


# ---------------------------------------------- flash_attn_varlen_func's loop over documents


def varlen_loop(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, causal=False, *, bug=None):
    """One attention per document [cu[d], cu[d + 1]), the rows written into a zeroed output."""
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    if cu_seqlens_q is None:
        cu_q = cu_k = [0, L] if L == S else None
        if cu_q is None:  # a decode step: one document, the queries at its end
            i, j = bottom_right(L, S)
            seen = (j <= i) if causal else torch.ones(L, S, dtype=torch.bool)
            return finish(q @ k.transpose(2, 3) / math.sqrt(E), seen, v)
    else:
        cu_q, cu_k = [int(c) for c in cu_seqlens_q], [int(c) for c in cu_seqlens_k]
    out = torch.zeros(q.shape[:3] + (v.shape[-1],), dtype=q.dtype)
    documents = len(cu_q) - (2 if bug == "drop-last" else 1)
    for d in range(documents):
        end = 1 if bug == "inclusive" else 0  # [start, end] taken as inclusive
        qs, qe, ks, ke = cu_q[d], cu_q[d + 1] + end, cu_k[d], cu_k[d + 1] + end
        qd, kd, vd = q[:, :, qs:qe], k[:, :, ks:ke], v[:, :, ks:ke]
        n_q, n_k = qd.shape[2], kd.shape[2]
        scores = qd @ kd.transpose(2, 3) / math.sqrt(E)
        i, j = bottom_right(n_q, n_k)
        seen = (j <= i) if causal else torch.ones(n_q, n_k, dtype=torch.bool)
        out[:, :, qs:qe] = finish(scores, seen, vd)
    return out


# ------------------------------------------------------ Llama 4's chunked attention, chunk by chunk


def chunk_loop(q, k, v, causal=False, attention_chunk=0, *, bug=None):
    """Causal attention inside each chunk of attention_chunk positions, one chunk at a time."""
    if attention_chunk and not causal:
        raise NotImplementedError("Llama 4's chunked attention is causal")
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    S = k.shape[2]
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    n = attention_chunk or S
    out = torch.zeros(q.shape[:3] + (v.shape[-1],), dtype=q.dtype)
    chunks = S // n if bug == "drop-last" else -(-S // n)
    for c in range(chunks):
        ks, ke = c * n, min(c * n + n, S)  # the chunk's keys
        qs, qe = max(ks - (S - L), 0), max(ke - (S - L), 0)  # its queries (the last L positions)
        if qs == qe:
            continue
        scores = q[:, :, qs:qe] @ k[:, :, ks:ke].transpose(2, 3) / math.sqrt(E)
        i = torch.arange(qs, qe)[:, None] + S - L
        j = torch.arange(ks, ke)[None, :]
        out[:, :, qs:qe] = finish(scores, j <= i if causal else j >= 0, v[:, :, ks:ke])
    return out


CORRECT_KERNELS = (
    llama_rope, flash_rope, gemma_softcap, bloom_alibi, flash_ref, varlen_loop, chunk_loop
)  # fmt: skip

# (kernel, bug, the words the checker's name must hold)
PLANTED = (
    # RoPE, transformers' Llama helpers
    (llama_rope, "sign", "RoPE turned the wrong way"),
    (llama_rope, "swap", "or cos and sin swapped"),
    (llama_rope, "tables", "tables widened to the head dim for the other pairing"),
    (llama_rope, "q-position", "RoPE positions of the queries one ahead of the keys'"),
    (llama_rope, "k-position", "RoPE positions of the queries one behind the keys'"),
    (llama_rope, "v", "RoPE applied to v too"),
    (llama_rope, "k-unturned", "RoPE applied to q only"),
    (llama_rope, "exponent", "the exponent's 2 missing"),
    (llama_rope, "inv-sign", "the exponent's sign lost"),
    (llama_rope, "base", "RoPE frequencies from base ~ 5e+05, not 10000"),
    # RoPE, FlashAttention's apply_rotary_emb (GPT-J's rotate_every_two when interleaved)
    (flash_rope, "sign", "RoPE turned the wrong way"),
    (flash_rope, "swap", "or cos and sin swapped"),
    (flash_rope, "tables", "tables widened to the head dim for the other pairing"),
    (flash_rope, "pairing", "RoPE pairing swapped"),
    (flash_rope, "k-only", "RoPE applied to k only"),
    # softcap, Gemma 2
    (gemma_softcap, "before-scale", "cap * scale: the cap applied before the scale"),
    (gemma_softcap, "tanh-unscaled", "cap * tanh(q.k) * scale"),
    (gemma_softcap, "no-divide", "cap * tanh(s): the score not divided by the cap"),
    (gemma_softcap, "times", "cap * tanh(s * cap)"),
    (gemma_softcap, "no-times", "tanh(s / cap): not multiplied by the cap"),
    (gemma_softcap, "scaled-again", "the scale applied again after the cap"),
    (gemma_softcap, "after-mask", "softcap applied after the mask"),
    # ALiBi, BLOOM's own slopes
    (bloom_alibi, "exponent-low", "ALiBi slopes off by one in the exponent"),
    (bloom_alibi, "exponent-high", "ALiBi slopes off by one in the exponent"),
    (bloom_alibi, "naive", "the formula for a power of two"),
    (bloom_alibi, "next-pow2", "heads cut to the first"),
    (bloom_alibi, "after-softmax", "ALiBi bias added to the weights after the softmax"),
    (bloom_alibi, "sign", "ALiBi sign reversed"),
    # ALiBi, documents and chunks: the dense reference in FlashAttention's keywords
    (flash_ref, "alibi-scaled", "ALiBi bias scaled with the scores"),
    (flash_ref, "alibi-before-softcap", "ALiBi bias added before the softcap"),
    (flash_ref, "next", "each query sees the next document's keys"),
    (flash_ref, "left", "side='left'"),
    (flash_ref, "chunk-window", "chunked attention computed as a sliding window"),
    (flash_ref, "chunk-early", "chunk boundaries one position early"),
    (flash_ref, "chunk-top-left", "chunk of decode query i taken as i // chunk"),
    # documents: the varlen loop; chunks: the chunk loop
    (varlen_loop, "inclusive", "document ends taken as inclusive"),
    (varlen_loop, "drop-last", "the last document never computed"),
    (chunk_loop, "drop-last", "the last partial chunk never computed"),
)

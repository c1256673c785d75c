"""Variant kernels written the way outside projects write them: sinks, split-KV, pages, tiles.

Each is written from its project's description, sharing no code with the checker: gpt-oss's
reference `sdpa` (torch; the sink a last column of the scores, dropped after the softmax), a
FlashAttention-2 / gpt-oss-Triton tiled forward (exp2 with log2(e) folded into the scale, the
sink joining the denominator after the last tile), flash-decoding (each key split's normalised
output and lse, merged by the lse), a vLLM-style paged decode (k and v written into a page pool
through a shuffled block table, then read back through it) and a FlashAttention-2 forward that
skips the key tiles outside the causal / window mask, all in FlashAttention's keywords; and a
FlexAttention-style block-sparse forward (mask_mod asked per cell, empty tiles skipped). The
sink and split-KV kernels can also report their lse (`lse=True`: (out, lse), natural log).
`bug=None` is the correct kernel. CORRECT and MISTAKES (at the end) label each kernel with what
the checker must say: every planted mistake with words its name must hold (None: no name).
Used by tests/test_outside_mistakes_b.py and tests/outside_record_b.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def _positions(L: int, S: int, causal: bool, window_size) -> tuple[np.ndarray, int, int]:
    """(query positions (L, 1): i + S - L, left, right) with causal as right = 0."""
    left, right = window_size
    if causal:
        right = 0
    return np.arange(L)[:, None] + (S - L), left, right


def _seen(rows, cols, left: int, right: int):
    """Bool (rows, cols): key position j inside query position i's window (-1: unbounded)."""
    ok = np.ones(np.broadcast_shapes(rows.shape, cols.shape), dtype=bool)
    if left >= 0:
        ok &= cols >= rows - left
    if right >= 0:
        ok &= cols <= rows + right
    return ok


# ------------------------------------------------------------ gpt-oss's reference sdpa (torch)


def gptoss_sdpa(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None, *,
                bug=None):  # fmt: skip
    """gpt-oss's sdpa: scores (heads, q_mult, L, S) + the sink as column S, softmax, drop it."""
    import torch

    _, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
    q_mult = H // Hkv
    Q = q[0].reshape(Hkv, q_mult, L, E).permute(2, 0, 1, 3)  # (L, Hkv, q_mult, E)
    K = k[0].permute(1, 0, 2)[:, :, None, :].expand(-1, -1, q_mult, -1)  # (S, Hkv, q_mult, E)
    V = v[0].permute(1, 0, 2)[:, :, None, :].expand(-1, -1, q_mult, -1)  # (S, Hkv, q_mult, Ev)
    sm_scale = 1.0 / math.sqrt(E)
    logit = torch.zeros(H, dtype=q.dtype) - torch.inf if sinks is None else sinks
    if bug == "sink-shared":  # (wrong) one sink for every head
        logit = logit[:1].expand(H)
    if bug == "sink-kv-head":  # (wrong) the sink looked up by the kv head's index
        logit = logit[torch.arange(H) // q_mult]
    S_col = logit.reshape(Hkv, q_mult, 1, 1).expand(-1, -1, L, -1)  # (Hkv, q_mult, L, 1)
    rows, left, right = _positions(L, S, causal, window_size)
    seen = torch.as_tensor(_seen(rows, np.arange(S)[None, :], left, right))
    QK = torch.einsum("qhmd,khmd->hmqk", Q, K)  # (Hkv, q_mult, L, S)
    if bug == "sink-scaled":  # (wrong) the sink joins the scores before the scale
        QK = torch.cat([QK, S_col], dim=-1) * sm_scale
        QK, S_col = QK[..., :-1], QK[..., -1:]
    else:
        QK = QK * sm_scale
    if softcap:
        QK = softcap * torch.tanh(QK / softcap)
    QK = QK.masked_fill(~seen, -torch.inf)
    W = torch.softmax(torch.cat([QK, S_col], dim=-1), dim=-1)[..., :-1]  # the sink dropped
    attn = torch.einsum("hmqk,khmd->qhmd", W, V)  # (L, Hkv, q_mult, Ev)
    return attn.permute(1, 2, 0, 3).reshape(1, H, L, Ev)


# ------------------------------------- FlashAttention-2 / gpt-oss Triton style tiled, with sinks


def sink_flash2(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None, *,
                bq=16, bk=16, lse=False, bug=None):  # fmt: skip
    """Query tiles outer, key tiles inner, exp2 units; the sink joins after the last tile.
    lse: return (out, lse (1, H, L)), natural log (m + log2 l) ln 2, as a backward reads it."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    _, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    qk_scale = dt(LOG2E / math.sqrt(E))  # scores in log2 units
    rows_all, left, right = _positions(L, S, causal, window_size)
    out = np.zeros((1, H, L, Ev), dtype=dt)
    lse2 = np.zeros((1, H, L), dtype=dt)  # m + log2 l per row
    with np.errstate(all="ignore"):
        for i0 in range(0, L, bq):
            i1 = min(i0 + bq, L)
            rows = rows_all[i0:i1]
            m = np.full((1, H, i1 - i0, 1), -np.inf, dtype=dt)
            l_i = np.zeros_like(m)
            acc = np.zeros((1, H, i1 - i0, Ev), dtype=dt)
            for j0 in range(0, S, bk):
                j1 = min(j0 + bk, S)
                s = q[..., i0:i1, :] @ np.swapaxes(k[..., j0:j1, :], -1, -2)  # (1, H, Bq, Bk)
                if softcap:
                    s = dt(softcap) * np.tanh(s / dt(softcap * math.sqrt(E)))
                    s = s * dt(LOG2E)
                else:
                    s = s * qk_scale
                s = np.where(_seen(rows, np.arange(j0, j1)[None, :], left, right), s, -np.inf)
                m_new = np.maximum(m, s.max(-1, keepdims=True))
                safe = np.where(np.isfinite(m_new), m_new, 0)
                p = np.exp2(s - safe)
                alpha = np.exp2(m - safe)
                l_i = l_i * alpha + p.sum(-1, keepdims=True)
                acc = acc * alpha + p @ v[..., j0:j1, :]  # (1, H, Bq, Bk) @ (1, H, Bk, Ev)
                m = m_new
            if bug == "lse-before-sink":  # (wrong) the lse taken before the sink joins l_i
                lse2[..., i0:i1] = (np.where(np.isfinite(m), m, 0) + np.log2(l_i))[..., 0]
            if sinks is not None:
                sink = np.asarray(sinks, dtype=dt)[None, :, None, None]  # (1, H, 1, 1)
                if bug == "sink-natural-in-exp2":  # (wrong) the sink left in natural units
                    sink2 = sink
                else:
                    sink2 = sink * dt(LOG2E)
                if bug == "sink-unshifted":  # (wrong) l_i is relative to m, the sink is not
                    l_i = l_i + np.exp2(sink2)
                elif bug in ("sink-as-value", "sink-max-unrescaled"):
                    m_new = np.maximum(m, sink2)
                    alpha = np.exp2(m - m_new)
                    l_i = l_i * alpha + np.exp2(sink2 - m_new)
                    if bug == "sink-as-value":  # (wrong) the sink's term also joins acc
                        acc = acc * alpha + np.exp2(sink2 - m_new)
                    # "sink-max-unrescaled": (wrong) acc kept at the old max
                else:  # gpt-oss's Triton kernel: the sink in the sum, relative to m
                    l_i = l_i + np.exp2(sink2 - np.where(np.isfinite(m), m, 0))
            out[..., i0:i1, :] = acc / l_i
            if bug != "lse-before-sink":
                lse2[..., i0:i1] = (np.where(np.isfinite(m), m, 0) + np.log2(l_i))[..., 0]
    return (out, lse2 * dt(math.log(2.0))) if lse else out


# ------------------------------------------------------------------- flash-decoding, split-KV


def flash_decoding(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None, *,
                   num_splits=4, lse=False, bug=None):  # fmt: skip
    """Split the keys num_splits ways; each split's output and lse; merge by the lse.
    lse: return (out, the merged lse (1, H, L)), natural log."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    _, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    rows, left, right = _positions(L, S, causal, window_size)
    size = -(-S // num_splits)
    log2 = bug == "lse-log2"  # (wrong) partials in log2 units, merged with exp
    outs, lses = [], []
    with np.errstate(all="ignore"):
        for j0 in range(0, S, size):
            j1 = min(j0 + size, S)
            s = q @ np.swapaxes(k[..., j0:j1, :], -1, -2) * dt(1.0 / math.sqrt(E))
            if softcap:
                s = dt(softcap) * np.tanh(s / dt(softcap))
            s = np.where(_seen(rows, np.arange(j0, j1)[None, :], left, right), s, -np.inf)
            if log2:
                s = s * dt(LOG2E)
            m = s.max(-1, keepdims=True)
            safe = np.where(np.isfinite(m), m, 0)
            p = np.exp2(s - safe) if log2 else np.exp(s - safe)
            l_i = p.sum(-1, keepdims=True)
            o = p @ v[..., j0:j1, :]  # (1, H, L, C) @ (1, H, C, Ev)
            if bug == "empty-split-nan":  # (wrong) no guard: 0/0 where the split is all masked
                outs.append(o / l_i)
            else:
                outs.append(o / np.where(l_i > 0, l_i, 1))
            lses.append(m + (np.log2(l_i) if log2 else np.log(l_i)))  # -inf: empty split
        if sinks is not None:  # the sink: one more partial, lse = sink, no output
            sink = np.asarray(sinks, dtype=dt)[None, :, None, None] * np.ones_like(lses[0])
            outs.append(np.zeros_like(outs[0]))
            lses.append(sink * dt(LOG2E) if log2 else sink)
        if bug == "merge-mean":  # (wrong) the splits' outputs averaged
            return sum(outs[: len(outs) - (sinks is not None)]) / (len(outs) - (sinks is not None))
        top = np.max(np.stack(lses), axis=0)
        if bug == "lse-ln-in-exp2":  # (wrong) natural lse merged with exp2
            w = [np.exp2(x - top) for x in lses]
        else:
            w = [np.exp(x - top) for x in lses]
        out = sum(wi * o for wi, o in zip(w, outs))
        if bug == "merge-unnormalised":  # (wrong) weights relative to the max, not their sum
            return out
        if not lse:
            return out / sum(w)
        merged = (top + np.log(sum(w)))[..., 0]  # (1, H, L): log sum_s exp(lse_s)
        if bug == "lse-reported-log2":  # (wrong) the merged lse handed on in log2 units
            merged = merged * dt(LOG2E)
        return out / sum(w), merged


# ---------------------------------------------------------------- vLLM-style paged decode


def paged_decode(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None, *,
                 block_size=16, bug=None):  # fmt: skip
    """Write k, v into a page pool through a shuffled block table; attend page by page."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    _, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
    group = H // Hkv
    if bug == "page-count-floor":  # (wrong) rounded down
        num_pages = S // block_size
    else:
        num_pages = -(-S // block_size)
    num_blocks = num_pages + 3  # a pool with spare pages
    block_table = np.random.default_rng(7).permutation(num_blocks)[:num_pages]
    # vLLM's cache layout: (num_blocks, block_size, num_kv_heads, head_size)
    k_cache = np.zeros((num_blocks, block_size, Hkv, E), dtype=dt)
    v_cache = np.zeros((num_blocks, block_size, Hkv, Ev), dtype=dt)
    for page in range(num_pages):  # reshape_and_cache: token t to slot table[t // bs], t % bs
        t0, t1 = page * block_size, min(page * block_size + block_size, S)
        k_cache[block_table[page], : t1 - t0] = np.swapaxes(k[0, :, t0:t1], 0, 1)
        v_cache[block_table[page], : t1 - t0] = np.swapaxes(v[0, :, t0:t1], 0, 1)
    last_len = min(block_size, S - (num_pages - 1) * block_size)  # keys on the last page
    if bug == "last-page-mod":  # (wrong) 0 when the last page is full
        last_len = S % block_size
    elif bug == "last-page-long":
        last_len = min(last_len + 1, block_size)
    elif bug == "last-page-short":
        last_len -= 1
    rows, left, right = _positions(L, S, causal, window_size)
    heads = np.arange(H) // group  # query head h reads kv head h // group
    m = np.full((H, L, 1), -np.inf, dtype=dt)
    l_i = np.zeros_like(m)
    acc = np.zeros((H, L, Ev), dtype=dt)
    with np.errstate(all="ignore"):
        for page in range(num_pages):
            n = last_len if page == num_pages - 1 else block_size
            physical = page if bug == "logical-index" else block_table[page]
            kp = k_cache[physical, :n][:, heads].transpose(1, 2, 0)  # (H, E, n)
            vp = v_cache[physical, :n][:, heads].transpose(1, 0, 2)  # (H, n, Ev)
            s = (q[0] @ kp) * dt(1.0 / math.sqrt(E))  # (H, L, E) @ (H, E, n)
            if softcap:
                s = dt(softcap) * np.tanh(s / dt(softcap))
            cols = page * block_size + np.arange(n)[None, :]
            s = np.where(_seen(rows, cols, left, right), s, -np.inf)
            m_new = np.maximum(m, s.max(-1, keepdims=True, initial=-np.inf))
            safe = np.where(np.isfinite(m_new), m_new, 0)
            p = np.exp(s - safe)
            alpha = np.exp(m - safe)
            l_i = l_i * alpha + p.sum(-1, keepdims=True)
            acc = acc * alpha + p @ vp
            m = m_new
        if sinks is not None:
            sink = np.asarray(sinks, dtype=dt)[:, None, None]
            m_new = np.maximum(m, sink)
            alpha = np.exp(m - m_new)
            l_i = l_i * alpha + np.exp(sink - m_new)
            acc = acc * alpha
        return (acc / l_i)[None]


# ------------------------------------------------ FlashAttention-2 forward with tile skipping


def flash2_skip(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, *, bq=16, bk=16,
                bug=None):  # fmt: skip
    """Each query tile visits only the key tiles [lo, hi] its rows can see (lo, hi from the
    first and last rows' window edges); tiles inside are masked per element."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    _, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    rows_all, left, right = _positions(L, S, causal, window_size)
    shift = S - L
    out = np.zeros((1, H, L, Ev), dtype=dt)
    with np.errstate(all="ignore"):
        for i0 in range(0, L, bq):
            i1 = min(i0 + bq, L)
            rows = rows_all[i0:i1]
            lo = 0 if left < 0 else max(0, i0 + shift - left)  # first row's leftmost key
            hi = S if right < 0 else min(S, i1 - 1 + shift + right + 1)  # last row's end
            first = (lo // bk) * bk
            if bug == "window-left-ceil":  # (wrong) the partly-inside left tile dropped
                first = -(-lo // bk) * bk
            elif bug == "window-left-plus-one" and left >= 0:
                first = (max(0, i0 + shift - left + 1) // bk) * bk
            elif bug == "window-left-last-row" and left >= 0:  # (wrong) the last row's edge
                first = (max(0, i1 - 1 + shift - left) // bk) * bk
            m = np.full((1, H, i1 - i0, 1), -np.inf, dtype=dt)
            l_i = np.zeros_like(m)
            o = np.zeros((1, H, i1 - i0, Ev), dtype=dt)
            for j0 in range(first, hi, bk):
                j1 = min(j0 + bk, S)
                if bug == "skip-partial-causal" and right >= 0 and j1 - 1 > i0 + shift + right:
                    continue  # (wrong) a tile crossing the diagonal skipped
                s = q[..., i0:i1, :] @ np.swapaxes(k[..., j0:j1, :], -1, -2) * dt(1 / math.sqrt(E))
                if softcap:
                    s = dt(softcap) * np.tanh(s / dt(softcap))
                s = np.where(_seen(rows, np.arange(j0, j1)[None, :], left, right), s, -np.inf)
                m_new = np.maximum(m, s.max(-1, keepdims=True))
                safe = np.where(np.isfinite(m_new), m_new, 0)
                p = np.exp(s - safe)
                alpha = np.exp(m - safe)
                l_i = l_i * alpha + p.sum(-1, keepdims=True)
                o = o * alpha + p @ v[..., j0:j1, :]
                m = m_new
            out[..., i0:i1, :] = o / l_i
    return out


# ------------------------------------------------- a FlexAttention-style block-sparse forward


def flex_tiles(q, k, v, score_mod=None, mask_mod=None, enable_gqa=False, *, bq=16, bk=16,
               bug=None):  # fmt: skip
    """FlexAttention's words: mask_mod asked for every (query, key), a key tile computed when
    any of its cells is seen (block sparsity), score_mod on each score, an online softmax."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dt = q.dtype.type
    _, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    seen = np.ones((H, L, S), dtype=bool)
    if mask_mod is not None:
        for h, i, j in np.ndindex(H, L, S):
            seen[h, i, j] = bool(mask_mod(0, h, i, j))
    out = np.zeros((1, H, L, Ev), dtype=dt)
    with np.errstate(all="ignore"):
        for h, i0 in np.ndindex(H, -(-L // bq)):
            i0 *= bq
            i1 = min(i0 + bq, L)
            m = np.full((i1 - i0, 1), -np.inf, dtype=dt)
            l_i = np.zeros_like(m)
            acc = np.zeros((i1 - i0, Ev), dtype=dt)
            for j0 in range(0, S, bk):
                j1 = min(j0 + bk, S)
                tile = seen[h, i0:i1, j0:j1]
                if bug == "causal-skip":  # (wrong) a causal kernel's skipping kept for any mask
                    if j0 > i1 - 1 + S - L or not tile.any():
                        continue
                elif not tile.any():
                    continue
                s = q[0, h, i0:i1] @ k[0, h, j0:j1].T * dt(1 / math.sqrt(E))  # (Bq, Bk)
                if score_mod is not None:
                    for a, b in np.ndindex(*s.shape):
                        s[a, b] = score_mod(float(s[a, b]), 0, h, i0 + a, j0 + b)
                s = np.where(tile, s, -np.inf)
                m_new = np.maximum(m, s.max(-1, keepdims=True))
                safe = np.where(np.isfinite(m_new), m_new, 0)
                p = np.exp(s - safe)
                alpha = np.exp(m - safe)
                l_i = l_i * alpha + p.sum(-1, keepdims=True)
                acc = acc * alpha + p @ v[0, h, j0:j1]  # (Bq, Bk) @ (Bk, Ev)
                m = m_new
            out[0, h, i0:i1] = np.where(l_i > 0, acc / l_i, 0)
    return out


# ------------------------------------------------------------------- the labelled catalogue


def kernel(fn, name: str, **fixed):
    """fn with keywords fixed (tile sizes, the bug), its signature kept for the style."""
    part = functools.wraps(fn)(functools.partial(fn, **fixed))
    part.__name__ = part.__qualname__ = name
    return part


KERNELS = {  # name -> (fn, array, keywords fixed)
    "gpt-oss sdpa": (gptoss_sdpa, "torch", {}),
    "sink flash2 16x16": (sink_flash2, "numpy", {}),
    "flash-decoding 4 splits": (flash_decoding, "numpy", {}),
    "flash-decoding 3 splits": (flash_decoding, "numpy", {"num_splits": 3}),
    "paged decode pages of 16": (paged_decode, "numpy", {}),
    "paged decode pages of 8": (paged_decode, "numpy", {"block_size": 8}),
    "flash2 tile skipping 16x16": (flash2_skip, "numpy", {}),
    "flash2 tile skipping 16x32": (flash2_skip, "numpy", {"bk": 32}),
    "sink flash2 reporting its lse": (sink_flash2, "numpy", {"lse": True}),
    "flash-decoding reporting its lse": (flash_decoding, "numpy", {"lse": True}),
    "flex block-sparse 16x16": (flex_tiles, "numpy", {}),
}
CORRECT = {  # name -> (fn, array, dtype): must pass
    f"{name} {dtype}": (kernel(fn, fn.__name__, **fixed), array, dtype)
    for name, (fn, array, fixed) in KERNELS.items()
    for dtype in ("float32", "float64")
}


def _planted(fn, bug: str, words: str | None, array: str = "numpy", **fixed) -> tuple:
    """(kernel with bug planted, array, dtype, words the checker's name must hold)."""
    return (kernel(fn, f"{fn.__name__}_{bug}", bug=bug, **fixed), array, "float32", words)


DROPPED = "seen by no query: a partial last page or split never read"
MISTAKES: dict[str, tuple] = {
    # learned sinks
    "gpt-oss sink shared by every head": _planted(
        gptoss_sdpa, "sink-shared", "one sink shared by every head", "torch"
    ),
    "gpt-oss sink indexed by the kv head": _planted(
        gptoss_sdpa, "sink-kv-head", "sink indexed by the kv head", "torch"
    ),
    "gpt-oss sink scaled by 1/sqrt(d)": _planted(
        gptoss_sdpa, "sink-scaled", "sink scaled by 1/sqrt(d)", "torch"
    ),
    "flash2 sink as a value": _planted(sink_flash2, "sink-as-value", "sink added to the output"),
    "flash2 exp(sink) without the max": _planted(
        sink_flash2, "sink-unshifted", "without the row max subtracted"
    ),
    "flash2 sink in natural units in exp2": _planted(
        sink_flash2, "sink-natural-in-exp2", "sink in the wrong base"
    ),
    "flash2 sink in the max, output not rescaled": _planted(
        sink_flash2, "sink-max-unrescaled", "output accumulator was not rescaled"
    ),
    # flash-decoding merges
    "flash-decoding mean of the splits": _planted(
        flash_decoding, "merge-mean", "split-KV partial outputs averaged"
    ),
    "flash-decoding weights not renormalised": _planted(
        flash_decoding, "merge-unnormalised", "not renormalised"
    ),
    "flash-decoding lse in log2, merged with exp": _planted(
        flash_decoding, "lse-log2", "lse in log2 units merged with exp"
    ),
    "flash-decoding natural lse merged with exp2": _planted(
        flash_decoding, "lse-ln-in-exp2", "natural-log lse merged with exp2"
    ),
    "flash-decoding empty split NaN": _planted(flash_decoding, "empty-split-nan", "an empty split"),
    "flash-decoding 3 splits, weights not renormalised": _planted(
        flash_decoding, "merge-unnormalised", "not renormalised", num_splits=3
    ),
    # paged caches
    "paged page count rounded down": _planted(paged_decode, "page-count-floor", DROPPED),
    "paged page count rounded down, pages of 8": _planted(
        paged_decode, "page-count-floor", DROPPED, block_size=8
    ),
    "paged last page length S % page": _planted(paged_decode, "last-page-mod", DROPPED),
    "paged last page one key long": _planted(
        paged_decode, "last-page-long", "the last page's length one too long"
    ),
    "paged last page one key short": _planted(
        paged_decode, "last-page-short", "the last key (j = S - 1) seen by no query"
    ),
    "paged block table read by the logical page": _planted(paged_decode, "logical-index", None),
    # tile skipping
    "flash2 window tiles from the last row": _planted(
        flash2_skip, "window-left-last-row", "the window's left boundary tile skipped"
    ),
    "flash2 diagonal tile skipped": _planted(
        flash2_skip, "skip-partial-causal", "only partly inside the mask skipped"
    ),
    "flash2 window left tile by ceil": _planted(
        flash2_skip, "window-left-ceil", "the window's left boundary tile skipped"
    ),
    "flash2 16x32 window left tile off by one": _planted(
        flash2_skip, "window-left-plus-one", "the window's left boundary tile skipped", bk=32
    ),
    "flex block-sparse tiles past the diagonal skipped": _planted(
        flex_tiles, "causal-skip", "key tiles past the causal diagonal skipped"
    ),
    # a reported lse
    "flash-decoding merged lse handed on in log2": _planted(
        flash_decoding, "lse-reported-log2", "lse in base 2", lse=True
    ),
    "flash2 lse taken before the sink joins": _planted(
        sink_flash2, "lse-before-sink", "lse without the sink's term", lse=True
    ),
}

__all__ = ["CORRECT", "MISTAKES", "flash2_skip", "flash_decoding", "flex_tiles", "gptoss_sdpa",
           "paged_decode", "sink_flash2"]  # fmt: skip

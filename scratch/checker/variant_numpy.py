"""A variant case's attention and gradients in NumPy, correct or with one mistake planted.

In float64 it is the diagnosis's family of wrong attentions (each matches scratch.flex_attention
when nothing is planted: tests/test_check_variants.py); in the checked dtype, with several key
block sizes, it gives the correct reference kernels whose errors set the rule's yardstick.

In float16 and bfloat16 a reference computes as the 16-bit kernels in use do: FlashAttention-2's
(Dao 2023, Algorithm 1; flash_fwd_kernel.h converts P to the input type before the P @ V gemm)
sums q @ k^T, the softmax and the output in float32 and rounds to 16 bits only the weights fed
to weights @ v and the output; `eager` also rounds every step of the scores (the matmul, the
scale, softcap, ALiBi, RoPE) as transformers' eager attention does in the model's dtype, with
its softmax in float32 (`softmax(..., dtype=torch.float32).to(query.dtype)`). The backward's
16-bit roundings are FlashAttention-2's (P and dS rounded before their gemms) or, eager, those of
torch autograd through the eager forward (every stored intermediate in 16 bits).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from scratch.bounds.tolerance import ACCUMULATE
from scratch.checker.reference import store
from scratch.checker.variant_cases import ROPE_BASE, VariantCase
from scratch.checker.variant_planted import CORRECT, Planted, VariantData
from scratch.variants.causal import Causal, at_or_before


def doc_ids(cu: tuple[int, ...], S: int, edge: int = 0) -> np.ndarray:
    """Document id of every position, with each inner boundary moved by `edge`."""
    cuts = [c + edge for c in cu[1:-1]]
    return np.searchsorted(np.asarray(cuts), np.arange(S), side="right")


def allowed(case: VariantCase, p: Planted, L: int, S: int) -> np.ndarray:
    """(L, S) bool: key j seen by query i under the case's rule with p planted."""
    shift = case.shift if p.shift is None else p.shift
    i = np.arange(L)[:, None] + shift  # each query's position
    j = np.arange(S)[None, :]
    seen = np.ones((L, S), dtype=bool)
    if p.no_mask:
        return seen
    if case.causal and not p.no_causal:
        seen &= at_or_before(j, i + p.causal_edge)
    if case.window is not None and not p.no_window:
        left, right = case.window
        lo, hi = (
            (None if left == -1 else -left, None if right == -1 else right)
            if p.window_edges is None
            else p.window_edges
        )
        if lo is not None:
            seen &= ~at_or_before(j, i + lo - 1)
        if hi is not None:
            seen &= at_or_before(j, i + hi)
    if case.cu_seqlens is not None and p.docs != "ignored":
        ids = doc_ids(case.cu_seqlens, S, p.doc_edge)
        q_ids = ids[np.clip(i, 0, S - 1)]
        if p.doc_slip is not None:
            seen &= slipped_documents(case.cu_seqlens, S, i, j, p.doc_slip)
        else:  # 'no-end': from the start of the query's document on, later documents included
            same = (ids[j] >= q_ids) if p.docs == "no-end" else (ids[j] == q_ids)
            if p.docs == "inclusive":  # the key at the query's document's end, cu[d + 1], too
                same |= j == np.asarray(case.cu_seqlens)[1:][q_ids]
            seen &= same
    if case.prefix is not None:
        causal = at_or_before(j, i)
        seen &= causal if p.no_prefix else (j < case.prefix + p.prefix_edge) | causal
    if case.chunk is not None and not p.no_chunk:
        n = case.chunk if p.chunk is None else p.chunk
        if p.chunk_slip is None:
            seen &= j // n == i // n
        else:
            seen &= slipped_chunks(n, i, j, np.arange(L)[:, None], p.chunk_slip)
    if case.registered_mask is not None:  # a registered mask: its own mask_mod on the index arrays
        rule = case.registered(shift, p.params)
        seen &= rule.mask_mod_array(0, 0, np.arange(L)[:, None], j, np)
    if p.last_key_unseen:
        seen[:, -1] = False
    if p.keys_dropped:
        seen[:, S - p.keys_dropped :] = False
    if p.tiles is not None:
        seen &= tiles_run(case, seen, *p.tiles)
    return seen


def tiles_run(case: VariantCase, seen: np.ndarray, bq: int, bk: int, rule: str) -> np.ndarray:
    """(L, S) bool: the key tiles a tiled kernel computes for each query tile, by `rule`:
    'full' (only tiles every key of which is seen), 'right-full' (none crossing the causal or
    right window edge), 'ceil' (the first key tile ceil(lo / bk), lo the first query's left
    edge), 'plus-one' (from lo + 1), 'last-row' (from the last query's left edge) or
    'causal-skip' (none starting past the last query's diagonal, whatever the mask)."""
    L, S = seen.shape
    run = np.zeros((L, S), dtype=bool)
    left, right = case.window if case.window is not None else (-1, -1)
    right = 0 if case.causal else right
    diagonal = Causal(case.shift).diagonal  # the window's edges are measured from it
    for i0 in range(0, L, bq):
        i1 = min(i0 + bq, L)
        lo_first, lo_last = diagonal(i0) - left, diagonal(i1 - 1) - left
        hi_first = diagonal(i0) + right
        for j0 in range(0, S, bk):
            j1 = min(j0 + bk, S)
            if rule == "full":
                keep = bool(seen[i0:i1, j0:j1].all())
            elif rule == "right-full":
                keep = right < 0 or j1 - 1 <= hi_first
            elif rule == "causal-skip":
                keep = bool(at_or_before(j0, diagonal(i1 - 1)))
            elif rule == "last-row":
                keep = left < 0 or j0 >= (max(0, lo_last) // bk) * bk
            elif rule == "ceil":
                keep = left < 0 or j0 >= -(-lo_first // bk) * bk
            else:  # 'plus-one'
                keep = left < 0 or j0 >= ((lo_first + 1) // bk) * bk
            run[i0:i1, j0:j1] = keep
    return run


def rotate(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pairing: str, narrow: str | None = None
) -> np.ndarray:
    """x (..., N, D) turned by the rows of cos, sin (N, D / 2) with the given pairing; each
    product and sum rounded to `narrow` when given (transformers' apply_rotary_pos_emb)."""
    half = x.shape[-1] // 2
    if pairing == "half":
        a, b = x[..., :half], x[..., half:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    a2 = keep(keep(a * cos, narrow) - keep(b * sin, narrow), narrow)
    b2 = keep(keep(b * cos, narrow) + keep(a * sin, narrow), narrow)
    if pairing == "half":
        return np.concatenate([a2, b2], axis=-1)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a2, b2
    return out


def turned(case: VariantCase, d: VariantData, p: Planted, acc, narrow: str | None = None):
    """q, k turned by RoPE as the case (with p) asks (rounded to `narrow`, when given)."""
    q, k = d.q.astype(acc), d.k.astype(acc)
    return turn_pair(case, d, p, acc, q, k, narrow=narrow)


def keep(xs, narrow: str | None):
    """Arrays (one, or a tuple) rounded to the dtype `narrow` (None: left as they are)."""
    if narrow is None:
        return xs
    return tuple(store(x, narrow) for x in xs) if isinstance(xs, tuple) else store(xs, narrow)


def narrowed(dtype: str) -> str | None:
    """The 16-bit storage dtype a kernel in `dtype` rounds to (None: it stores in its sums')."""
    return None if ACCUMULATE[dtype] == dtype else dtype


def turn_pair(case, d: VariantData, p: Planted, acc, q, k, sign: float = 1.0, narrow=None):
    """q at positions i + S - L (i with p.q_positions 'zero', S - 1 with 'last'), k at j; sign
    -1 turns back; every step rounded to `narrow` when given."""
    if case.rotary is None or p.no_rope:
        return q, k
    if p.rope_slip or p.rope_q_shift or p.rope_freq:
        return slipped_rope(case, p, acc, q, k, sign)
    L = q.shape[2]
    pairing = p.pairing or case.rotary
    cos, sin = d.cos.astype(acc), acc(sign) * d.sin.astype(acc)
    if p.q_positions == "last":  # every query turned at the newest position, S - 1
        at = np.full(L, k.shape[2] - 1)
    else:
        first = 0 if p.q_positions == "zero" else case.shift
        at = np.arange(first, first + L)
    q = rotate(q, cos[at], sin[at], pairing, narrow)
    return q, rotate(k, cos, sin, pairing, narrow)


def scores(
    case: VariantCase, d: VariantData, p: Planted, acc, narrow: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(scores (1, H, L, S) after score changes and mask, kv-head-repeated v) in dtype acc;
    every step rounded to `narrow` when given (eager attention in a 16-bit dtype)."""
    q, k = turned(case, d, p, acc, narrow)
    v = d.v.astype(acc)
    if p.rope_slip == "v" and case.rotary is not None:  # v turned too, key j at position j
        v = rope_full(v, d.cos.astype(acc), d.sin.astype(acc), case.rotary, case.rotary)
    H, L, S = q.shape[1], q.shape[2], k.shape[2]
    group = H // k.shape[1]
    if p.gqa_modulo:  # kv heads 0, 1, ..., Hkv - 1, 0, 1, ...: head h reads h % Hkv
        k, v = np.tile(k, (1, group, 1, 1)), np.tile(v, (1, group, 1, 1))
    else:  # kv heads 0, 0, ..., 1, 1, ...: head h reads h // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = d.scale if p.scale is None else p.scale
    s = keep(q @ np.swapaxes(k, -1, -2), narrow)  # (1, H, L, E) @ (1, H, E, S) -> (1, H, L, S)
    s = keep(s * acc(scale), narrow)
    seen = allowed(case, p, L, S)
    if p.softcap_after_mask:
        s = np.where(seen, s, -np.inf)
    after = (p.alibi_slip or "").startswith("after-softmax")  # added to the weights instead
    bias = None if after else alibi_bias(case, d, p, acc, L, S)
    bias = None if bias is None else keep(bias, narrow)
    if bias is not None and p.alibi_slip == "before-softcap":
        s = keep(s + bias, narrow)
    if case.softcap is not None and not p.no_softcap:
        cap = acc(case.softcap if p.cap is None else p.cap)
        c1, c2 = (cap, cap) if p.softcap_form is None else map(acc, p.softcap_form)
        s = keep(c1 * keep(np.tanh(keep(s / c2, narrow)), narrow), narrow)
    if bias is not None and p.alibi_slip != "before-softcap":
        s = keep(s + bias, narrow)
    if not p.softcap_after_mask:
        s = np.where(seen, s, -np.inf)
    return s, v


def attend(
    case: VariantCase,
    d: VariantData,
    p: Planted = CORRECT,
    *,
    dtype: str = "float64",
    block: int | None = None,
    exp2: bool = False,
    eager: bool = False,
    with_lse: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Output (1, H, L, Ev) as float64: in one softmax, or one pass over key blocks of `block`;
    a 16-bit dtype's roundings as FlashAttention's (eager: transformers' eager attention's).
    with_lse: (output, lse (1, H, L)), the natural-log lse as the pass computed it (m + log l,
    with exp2 (m' + log2 l) ln 2; -inf for a row with no key and no sink)."""
    if with_lse and (p.split is not None or eager or p.bshd_as_bhsd):
        raise ValueError("with_lse: only a one-pass reference reports its lse")
    if p.bshd_as_bhsd:
        return across_heads(case, d, replace(p, bshd_as_bhsd=False), dtype, block, exp2)
    acc = np.dtype(ACCUMULATE[dtype]).type
    narrow = narrowed(dtype)
    if p.zero_keys:  # zero keys past the end: score 0, value 0
        padded = {
            name: np.concatenate([x, np.zeros(x.shape[:2] + (p.zero_keys, x.shape[3]))], axis=2)
            for name, x in (("k", d.k), ("v", d.v))
        }
        d = replace(d, **padded)
    with np.errstate(all="ignore"):
        s, v = scores(case, d, p, acc, narrow if eager else None)
        sink = None
        if d.sinks is not None and not p.sink_out:
            sink = sink_logits(d, p).astype(acc)[None, :, None, None]  # (1, H, 1, 1)
            if p.sink_copies != 1:  # n exp(sink) = exp(sink + log n)
                sink = sink + acc(np.log(p.sink_copies))
            if p.sink_split is not None:  # n exp(sink) = exp(sink + log n), n per row
                live = np.isfinite(s)  # (1, H, L, S)
                n = sum(
                    live[..., j : j + p.sink_split].any(-1, keepdims=True)
                    for j in range(0, s.shape[-1], p.sink_split)
                )  # (1, H, L, 1): the row's splits with a seen key
                sink = sink + np.log(np.maximum(n, 1)).astype(acc)
        if p.split is not None:
            return split_merge(s, v, sink, *p.split)
        if eager:  # the sink as one more score (gpt-oss), weights normalised, then rounded
            return eager_output(s, v, sink, narrow)
        S = s.shape[-1]
        step = S if block is None else block
        exp = np.exp2 if exp2 else np.exp
        fold = acc(1.0 / np.log(2.0)) if exp2 else acc(1.0)
        top = np.full(s.shape[:-1] + (1,), -np.inf, dtype=acc)  # running max
        total = np.zeros_like(top)  # running denominator
        out = np.zeros(s.shape[:-1] + (v.shape[-1],), dtype=acc)
        for j in range(0, S, step):
            t = s[..., j : j + step] * fold
            new = np.maximum(top, t.max(-1, keepdims=True))
            safe = np.where(np.isfinite(new), new, 0)
            alpha = exp(top - safe)
            e = exp(t - safe)
            total = total * alpha + e.sum(-1, keepdims=True)
            # (.., L, Bk) @ (.., Bk, Ev): the weights in the kernel's dtype (16 bits: rounded)
            out = out * alpha + keep(e, narrow) @ v[..., j : j + step, :]
            top = new
        if sink is not None and p.sink_unshifted:  # exp(sink) beside sums relative to the max
            sink = sink + top / fold
        if sink is not None:  # the sink: one more term of the denominator, no value
            new = np.maximum(top, sink * fold)
            alpha = exp(top - new)
            e_sink = exp(sink * fold - new)
            total = total * alpha + e_sink
            out = out if p.sink_unrescaled else out * alpha
            if p.sink_value:  # (wrong) the sink's term added to every output feature
                out = out + e_sink
            top = new
        out = out / total  # a row with no key: 0/0, as an unguarded kernel leaves it
        if with_lse:  # (1, H, L): m + log l in the pass's units, back to natural log
            log = np.log2 if exp2 else np.log
            lse = ((top + log(total)) / fold)[..., 0]
        if (p.alibi_slip or "").startswith("after-softmax"):  # bias @ v: the bias in the weights
            form = "j" if p.alibi_slip.endswith("-j") else "j - i"
            bias = alibi_bias(case, d, p, acc, s.shape[2], s.shape[3], form)
            out = out + np.broadcast_to(bias, s.shape) @ v  # (1, H, L, S) @ (1, H, S, Ev)
        if p.zero_rows:
            out[..., list(p.zero_rows), :] = 0.0
        out = keep(out, narrow).astype(np.float64)
        return (out, lse.astype(np.float64)) if with_lse else out


def eager_output(s: np.ndarray, v: np.ndarray, sink, narrow: str | None) -> np.ndarray:
    """softmax(s) (with the sink's score in each row) in s's dtype, the weights rounded to
    `narrow`, then weights @ v rounded: transformers' eager attention after its scores."""
    if sink is not None:  # (1, H, L, S + 1) scores; the sink's weight meets no value
        s = np.concatenate([s, np.broadcast_to(sink, s.shape[:-1] + (1,))], axis=-1)
        v = np.concatenate([v, np.zeros_like(v[..., :1, :])], axis=-2)
    e = np.exp(s - s.max(-1, keepdims=True))  # every row sees a key: the max is finite
    weights = keep(e / e.sum(-1, keepdims=True), narrow)
    return keep(weights @ v, narrow).astype(np.float64)  # (1, H, L, S) @ (1, H, S, Ev)


def alibi_bias(case, d: VariantData, p: Planted, acc, L: int, S: int, form: str = "j - i"):
    """(1, H, L or 1, S) slope[h] * (j - i) (form 'j': slope[h] * j, BLOOM's, equal under the
    softmax) with p's slopes, sign, order and scale; None without ALiBi."""
    if not case.alibi or p.no_alibi:
        return None
    slopes = d.slopes if p.slopes is None else np.asarray(p.slopes)
    slopes = slopes[::-1] if p.slopes_reversed else slopes
    i = 0 if form == "j" else np.arange(L)[:, None] + case.shift
    distance = (np.arange(S)[None, :] - i).astype(acc)  # (L, S): j - i
    bias = (p.alibi_sign * slopes.astype(acc))[None, :, None, None] * distance
    return bias * acc(d.scale) if p.alibi_slip == "scaled" else bias


def rope_full(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pairing: str, layout: str):
    """x * cos + turned(x) * sin as transformers writes RoPE: the (N, D / 2) tables widened to
    D in `layout` ('half': cat(t, t), HF's; 'interleaved': each repeated, GPT-J's), turned(x)
    rotate_half (pairing 'half') or GPT-J's rotate_every_two ('interleaved')."""

    def widen(t: np.ndarray) -> np.ndarray:  # (N, D / 2) -> (N, D)
        return np.concatenate([t, t], -1) if layout == "half" else np.repeat(t, 2, -1)

    half = x.shape[-1] // 2
    if pairing == "half":
        turned_x = np.concatenate([-x[..., half:], x[..., :half]], -1)
    else:
        turned_x = np.empty_like(x)
        turned_x[..., 0::2], turned_x[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return x * widen(cos) + turned_x * widen(sin)


def slipped_rope(case, p: Planted, acc, q, k, sign: float = 1.0):
    """q, k turned by RoPE with one of p's slips: the tables from p.rope_freq (ROPE_BASE,
    theta_m = base ** (-2m / d) when not given), query i at i + S - L + p.rope_q_shift."""
    L, S, E = q.shape[2], k.shape[2], q.shape[-1]
    base, e = p.rope_freq or (ROPE_BASE, 2.0)
    theta = base ** (-e * np.arange(E // 2) / E)  # (E / 2,)
    first = case.shift + p.rope_q_shift
    tables = []
    for at in (np.arange(first, first + L), np.arange(S)):
        angle = at[:, None] * theta[None, :]  # (N, E / 2)
        cos, sin = np.cos(angle).astype(acc), acc(sign) * np.sin(angle).astype(acc)
        if p.rope_slip == "reversed":
            sin = -sin
        if p.rope_slip == "swapped":
            cos, sin = sin, cos
        tables.append((cos, sin))
    pairing = p.pairing or case.rotary
    other = "interleaved" if pairing == "half" else "half"
    layout = other if p.rope_slip == "tables" else pairing
    q2 = q if p.rope_slip == "k-only" else rope_full(q, *tables[0], pairing, layout)
    k2 = k if p.rope_slip == "q-only" else rope_full(k, *tables[1], pairing, layout)
    return q2, k2


def slipped_documents(cu: tuple[int, ...], S: int, i, j, slip: str) -> np.ndarray:
    """(L, S) bool: the documents rule as a kernel with `slip` (Planted.doc_slip) applies it."""
    ids = doc_ids(cu, S)
    if slip == "left":  # searchsorted side='left': position cu[d] counted in document d - 1
        ids = np.searchsorted(np.asarray(cu), np.arange(S), side="left")
    q_ids = ids[np.clip(i, 0, S - 1)]
    if slip in ("next", "previous"):
        q_ids = q_ids + (1 if slip == "next" else -1)
    return ids[j] == q_ids


def slipped_chunks(n: int, i, j, row, slip: str) -> np.ndarray:
    """(L, S) bool: chunks of n as a kernel with `slip` (Planted.chunk_slip) applies them; i
    the queries' positions, row their indices."""
    if slip == "window":
        return ~at_or_before(j, i - n)  # keys after i - n: a window of n, not a chunk
    if slip == "top-left":
        return j // n == row // n
    edge = 1 if slip == "early" else -1
    return (j + edge) // n == (i + edge) // n


def across_heads(case: VariantCase, d: VariantData, p: Planted, *how) -> np.ndarray:
    """What a kernel that reads FlashAttention's (B, L, H, E) as (B, H, L, E) returns, read back
    as (B, H, L, Ev): at each position, attention of its H queries over the Hkv keys there."""
    swap = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731  (B, H, N, D) <-> (B, N, H, D)
    shapes = {name: (n[0], n[2], n[1], n[3]) for name, n in zip("qkv", (case.q, case.k, case.v))}
    wrong = replace(case, name=f"{case.name} read as BHSD", **shapes)
    data = VariantData(swap(d.q), swap(d.k), swap(d.v), d.scale, None, None, None, None)
    return swap(attend(wrong, data, p, dtype=how[0], block=how[1], exp2=how[2]))


def sink_logits(d: VariantData, p: Planted) -> np.ndarray:
    """(H,) the sink logit each query head uses, with p's head map and scale."""
    sinks = d.sinks
    if p.sink_heads == "first":
        sinks = np.full_like(sinks, sinks[0])
    elif p.sink_heads == "kv":  # the kv head's index h // group used for the query head's
        H, Hkv = d.q.shape[1], d.k.shape[1]
        sinks = sinks[np.arange(H) // (H // Hkv)]
    return sinks * p.sink_scale


def split_merge(s: np.ndarray, v: np.ndarray, sink, size: int, mode: str) -> np.ndarray:
    """Split-KV partials (own max, sum, output each) merged the wrong way: `mode`."""
    parts = []
    for j in range(0, s.shape[-1], size):
        t = s[..., j : j + size]
        m = t.max(-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        e = np.exp(t - m)
        parts.append((e @ v[..., j : j + size, :], e.sum(-1, keepdims=True), m))
    if mode == "average":  # each split's normalised output, averaged
        out = sum(o / np.where(n > 0, n, 1) for o, n, _ in parts) / len(parts)
        return out.astype(np.float64)
    if mode in LSE_MERGES:
        return lse_merge(parts, sink, mode)
    out = sum(o for o, _, _ in parts)
    total = sum(n for _, n, _ in parts)
    if sink is not None:
        total = total + np.exp(sink)
    return (out / total).astype(np.float64)


# flash-decoding merges by each split's lse = m + log(sum), wrongly: weights exp(lse - max)
# without dividing by their sum; lse in log2 units merged with exp (weights exp(lse log2(e)));
# natural lse merged with exp2 (exp(lse ln 2)); an empty split's 0/0 output left NaN
LSE_MERGES = {"unnormalised": 1.0, "log2-in-exp": 1.0 / np.log(2.0), "ln-in-exp2": np.log(2.0),
              "nan-empty": 1.0}  # fmt: skip


def lse_merge(parts: list, sink, mode: str) -> np.ndarray:
    """Split partials (output, sum, max) merged by their lse the wrong way: `mode`."""
    outs = [o / (n if mode == "nan-empty" else np.where(n > 0, n, 1)) for o, n, _ in parts]
    lses = [m + np.log(n) for _, n, m in parts]  # -inf for an empty split
    if sink is not None:  # the sink: a partial with lse = sink and no output
        outs.append(np.zeros_like(outs[0]))
        lses.append(sink + np.zeros_like(lses[0]))
    c = LSE_MERGES[mode]
    top = np.max(np.stack(lses), axis=0)
    w = [np.exp(c * (lse - top)) for lse in lses]
    out = sum(wi * o for wi, o in zip(w, outs))
    return (out if mode == "unnormalised" else out / sum(w)).astype(np.float64)


__all__ = [
    "CORRECT",
    "Planted",
    "VariantData",
    "across_heads",
    "alibi_bias",
    "allowed",
    "attend",
    "doc_ids",
    "rope_full",
    "rotate",
    "slipped_chunks",
    "slipped_documents",
    "slipped_rope",
    "split_merge",
    "tiles_run",
]

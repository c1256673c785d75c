"""Cases for the FlexAttention tests: each built-in variant beside an independent torch form.

A case gives, for shapes (B, H, L, S): the ground truth's variant (scratch.variants), and the
same rule written again here with torch operations, as FlexAttention's mask_mod/score_mod take
them (index tensors in, tensors out). The torch forms are the tests' own statement of each
convention; they share nothing with scratch.variants but the parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scratch.variants import (
    ALiBi,
    BiasTable,
    Causal,
    ChunkedLocal,
    Documents,
    GivenMask,
    GlobalTokens,
    PrefixLM,
    SinkTokens,
    SlidingWindow,
    Softcap,
    SymmetricALiBi,
    Variant,
    alibi_slopes,
    combine,
)
from scratch.variants.dilated import DilatedWindow


@dataclass
class Case:
    """A variant and its torch mask_mod / score_mod (None where it has none)."""

    variant: Variant
    mask_mod: object = None
    score_mod: object = None


def doc_ids(S: int, cuts: tuple[int, ...]) -> list[int]:
    """Document ids for S positions, a new document starting at each cut."""
    return [sum(1 for c in cuts if c <= j) for j in range(S)]


def causal(B, H, L, S, align="top-left"):
    shift = 0 if align == "top-left" else S - L
    return Case(Causal.aligned(align, L, S), lambda b, h, q, kv: kv <= q + shift)


def window(B, H, L, S, left=2, right=1):
    shift = S - L  # FlashAttention's window_size is aligned bottom-right

    def mask(b, h, q, kv):
        ok = kv == kv
        if left != -1:
            ok = ok & (kv >= q + shift - left)
        if right != -1:
            ok = ok & (kv <= q + shift + right)
        return ok

    return Case(SlidingWindow.aligned(left, right, L, S), mask)


def chunked(B, H, L, S, chunk=2):
    return Case(ChunkedLocal(chunk), lambda b, h, q, kv: kv // chunk == q // chunk)


def dilated(B, H, L, S, width=2, dilation=2):
    shift = S - L  # bottom-right, as the window's: query i at position i + S - L

    def mask(b, h, q, kv):
        back = q + shift - kv  # Longformer: 0 <= i - j <= w d and (i - j) % d == 0
        return (back >= 0) & (back <= width * dilation) & (back % dilation == 0)

    return Case(DilatedWindow(width, dilation, shift), mask)


def prefix(B, H, L, S, n=2):
    lengths = tuple((n + b) % (S + 1) for b in range(B))  # one prefix length per batch entry
    t = torch.tensor(lengths)
    return Case(PrefixLM(lengths), lambda b, h, q, kv: (kv < t[b]) | (kv <= q))


def documents(B, H, L, S):
    """Document ids per batch entry; queries use the first L positions' ids."""
    kv_ids = [doc_ids(S, (1 + b, 3 + b)) for b in range(B)]
    q_ids = [row[:L] + [row[-1]] * (L - len(row[:L])) for row in kv_ids]
    tq, tk = torch.tensor(q_ids), torch.tensor(kv_ids)
    return Case(Documents(q_ids, kv_ids), lambda b, h, q, kv: tq[b, q] == tk[b, kv])


def cu_seqlens(B, H, L, S):
    """One packed entry (L == S cases): documents from cumulative lengths [0, 2, 3, ..., S]."""
    cuts = sorted({c for c in (2, 3) if c < S})
    cu = [0, *cuts, S]
    ids = torch.tensor(doc_ids(S, tuple(cuts)))
    return Case(Documents.from_cu_seqlens(cu), lambda b, h, q, kv: ids[q] == ids[kv])


def sink_tokens(B, H, L, S, sinks=1, left=1):
    def mask(b, h, q, kv):
        return (kv <= q) & ((kv < sinks) | (kv >= q - left))

    return Case(SinkTokens(sinks, left), mask)


def global_tokens(B, H, L, S):
    tokens = (0, max(S - 2, 0))  # [CLS] and one more (the same one when S < 3)

    def mask(b, h, q, kv):
        return (kv == tokens[0]) | (kv == tokens[1]) | (q == tokens[0]) | (q == tokens[1])

    return Case(GlobalTokens(tokens), mask)


def alibi(B, H, L, S):
    slopes = torch.tensor(alibi_slopes(H), dtype=torch.float64)  # values pinned elsewhere
    return Case(ALiBi.for_heads(H), score_mod=lambda s, b, h, q, kv: s + slopes[h] * (kv - q))


def alibi_symmetric(B, H, L, S):
    slopes = torch.tensor(alibi_slopes(H), dtype=torch.float64)
    shift = S - L  # bottom-right, as FlashAttention's attention_ref

    def score_mod(s, b, h, q, kv):
        return s - slopes[h] * (q + shift - kv).abs()

    return Case(SymmetricALiBi.for_heads(H, shift), score_mod=score_mod)


def softcap(B, H, L, S, cap=0.7):
    return Case(Softcap(cap), score_mod=lambda s, b, h, q, kv: cap * torch.tanh(s / cap))


def bias_table(B, H, L, S, m=2):
    rows = [[0.3 * (h + 1) * ((c * 7) % 5 - 2) for c in range(2 * m + 1)] for h in range(H)]
    t = torch.tensor(rows, dtype=torch.float64)
    return Case(
        BiasTable(rows),
        score_mod=lambda s, b, h, q, kv: s + t[h, torch.clamp(kv - q, -m, m) + m],
    )


def given_bool(B, H, L, S):
    """A bool attn_mask per head (1, H, L, S): a fixed pattern, some rows seeing nothing."""
    rows = [
        [[(3 * i + 5 * j + h) % 4 != 0 and i != 1 for j in range(S)] for i in range(L)]
        for h in range(H)
    ]
    t = torch.tensor(rows)
    return Case(GivenMask([rows]), lambda b, h, q, kv: t[h, q, kv])


def given_float(B, H, L, S):
    """A float attn_mask (L, S) added to the scores, -inf on some cells."""
    rows = [
        [-math.inf if (i + 2 * j) % 5 == 0 else 0.25 * (i - j) for j in range(S)] for i in range(L)
    ]
    t = torch.tensor(rows, dtype=torch.float64)
    return Case(
        GivenMask(rows),
        lambda b, h, q, kv: t[q, kv] != -math.inf,
        lambda s, b, h, q, kv: s + t[q, kv],
    )


def both(*cases: Case) -> Case:
    """Cases combined: masks and-ed, score_mods applied in order."""
    masks = [c.mask_mod for c in cases if c.mask_mod is not None]
    scores = [c.score_mod for c in cases if c.score_mod is not None]

    def mask(b, h, q, kv):
        ok = masks[0](b, h, q, kv)
        for m in masks[1:]:
            ok = ok & m(b, h, q, kv)
        return ok

    def score(s, b, h, q, kv):
        for f in scores:
            s = f(s, b, h, q, kv)
        return s

    return Case(
        combine(*(c.variant for c in cases)), mask if masks else None, score if scores else None
    )


SINGLE = {
    "causal top-left": causal,
    "causal bottom-right": lambda B, H, L, S: causal(B, H, L, S, "bottom-right"),
    "window (2, 1)": window,
    "window (0, 0)": lambda B, H, L, S: window(B, H, L, S, 0, 0),
    "window (-1, 0)": lambda B, H, L, S: window(B, H, L, S, -1, 0),
    "window (1, -1)": lambda B, H, L, S: window(B, H, L, S, 1, -1),
    "chunked 2": chunked,
    "dilated (2, 2)": dilated,
    "dilated (1, 3)": lambda B, H, L, S: dilated(B, H, L, S, 1, 3),
    "prefix-LM": prefix,
    "documents": documents,
    "sink tokens": sink_tokens,
    "global tokens": global_tokens,
    "alibi": alibi,
    "alibi symmetric": alibi_symmetric,
    "softcap": softcap,
    "bias table": bias_table,
    "given bool mask": given_bool,
    "given float mask": given_float,
}

COMBINED = {
    "window + softcap": lambda B, H, L, S: both(window(B, H, L, S, 1, 0), softcap(B, H, L, S)),
    "documents + causal": lambda B, H, L, S: both(documents(B, H, L, S), causal(B, H, L, S)),
    "chunked + causal": lambda B, H, L, S: both(chunked(B, H, L, S, 3), causal(B, H, L, S)),
    "alibi + causal bottom-right": lambda B, H, L, S: both(
        causal(B, H, L, S, "bottom-right"), alibi(B, H, L, S)
    ),
    "sink tokens + softcap + bias": lambda B, H, L, S: both(
        sink_tokens(B, H, L, S), softcap(B, H, L, S, 2.0), bias_table(B, H, L, S)
    ),
}

CASES = {**SINGLE, **COMBINED}


@dataclass
class Shapes:
    """Sizes of one hypothesis example: H = Hkv * group query heads."""

    B: int
    Hkv: int
    group: int
    L: int
    S: int
    E: int
    Ev: int

    @property
    def H(self) -> int:
        return self.Hkv * self.group


def shapes() -> st.SearchStrategy[Shapes]:
    """Small shapes: batch 1-2, 1-2 kv heads of 1-2 query heads, L and S 1-6 (L > S too)."""
    small = st.integers(1, 2)
    return st.builds(
        Shapes,
        small,
        small,
        small,
        st.integers(1, 6),
        st.integers(1, 6),
        st.integers(1, 3),
        st.integers(1, 3),
    )


def random_problems(test):
    """The hypothesis sweep both comparisons run: a case by name, shapes, sinks or not, a seed."""
    return settings(max_examples=20)(
        given(
            name=st.sampled_from(list(CASES)),
            z=shapes(),
            with_sinks=st.booleans(),
            seed=st.integers(0, 2**16),
        )(test)
    )

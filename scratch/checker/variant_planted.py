"""The records the variant diagnosis plants and computes with: Planted (one mistake; its
defaults are the correct attention), CORRECT, and VariantData (a case's inputs as arrays).
variant_numpy computes attention from them, variant_grads its gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Planted:
    """One mistake (the defaults are the correct attention)."""

    shift: int | None = None  # the diagonal's offset (None: the case's S - L; 0: top-left)
    causal_edge: int = 0  # key j seen iff j <= i + shift + causal_edge
    no_causal: bool = False
    no_mask: bool = False  # no rule at all: every key seen (FlexAttention's mask_mod ignored)
    window_edges: tuple[int | None, int | None] | None = None  # (lo, hi) offsets from diagonal
    no_window: bool = False
    cap: float | None = None  # another cap (None: the case's)
    no_softcap: bool = False
    softcap_after_mask: bool = False  # masked scores become cap * tanh(-inf) = -cap
    alibi_sign: int = 1
    slopes_reversed: bool = False
    no_alibi: bool = False
    sink_out: bool = False  # the sink left out of the denominator
    docs: str = "same"  # 'same', 'ignored', 'no-end' (a query sees later documents) or
    # 'inclusive' (slices [cu[d], cu[d + 1]]: a query also sees the next document's first key)
    doc_edge: int = 0  # every document boundary moved by this many positions
    prefix_edge: int = 0
    no_prefix: bool = False
    chunk: int | None = None  # another chunk size
    no_chunk: bool = False
    pairing: str | None = None  # another RoPE pairing
    no_rope: bool = False  # q and k not turned
    q_positions: str = "offset"  # 'offset' (i + S - L), 'zero' (i: decode not offset) or
    # 'last' (every query at S - 1, the newest position)
    last_key_unseen: bool = False  # key S - 1 seen by no query (a split ending one key short)
    sink_copies: int = 1  # exp(sink) counted this many times in every row's sum
    sink_split: int | None = None  # keys per split: exp(sink) counted once in each split's
    # sum that has a key the row sees (a split-KV kernel adding the sink before its merge)
    split: tuple[int, str] | None = None  # (keys per split, 'no-rescale' | 'average')
    gqa_modulo: bool = False  # query head h reads kv head h % Hkv, not h // (H / Hkv)
    softcap_grad: bool = True  # backward: False leaves out softcap's 1 - tanh^2 factor
    rope_grad: bool = True  # backward: False returns the gradients of the rotated q and k
    params: tuple[tuple[str, object], ...] = ()  # a registered mask's parameters changed
    scale: float | None = None  # another softmax scale (None: the case's)
    bshd_as_bhsd: bool = False  # FlashAttention's (B, L, H, E) read as (B, H, L, E)
    # outside kernels' slips: RoPE, softcap, ALiBi, chunk and document boundaries
    rope_slip: str | None = None  # 'reversed' (-angle), 'swapped' (cos for sin), 'tables' (the
    # full-width tables laid out for the other pairing), 'v' (v turned too), 'q-only', 'k-only'
    rope_q_shift: int = 0  # the queries' RoPE positions moved by this many (keys' kept)
    rope_freq: tuple[float, float] | None = None  # (base, e): theta_m = base ** (-e m / d)
    softcap_form: tuple[float, float] | None = None  # (c1, c2): c1 tanh(q.k scale / c2)
    slopes: tuple[float, ...] | None = None  # other ALiBi slopes (H,)
    alibi_slip: str | None = None  # 'scaled' ((q.k + bias) scale), 'before-softcap' (capped),
    # 'after-softmax' / 'after-softmax-j' (slope (j - i) / slope j added to the weights)
    doc_slip: str | None = None  # 'next' / 'previous' (queries' ids one off the keys') or
    # 'left' (searchsorted side='left': each boundary one late, position 0 alone)
    chunk_slip: str | None = None  # 'window' (j > i - chunk), 'top-left' (query chunk i //
    # chunk), 'early' / 'late' (chunk boundaries one position early / late)
    zero_rows: tuple[int, ...] = ()  # query rows left zero (a chunk or document never computed)
    # outside kernels (issue 35): sinks, split-KV merges, paged caches, tile skipping
    sink_scale: float = 1.0  # the sink logit times this (1/sqrt(d): scaled with the scores)
    sink_heads: str = "own"  # 'own' sinks[h], 'first' sinks[0] for all, 'kv' sinks[h // group]
    sink_unshifted: bool = False  # exp(sink) added to a sum kept relative to the row max m
    sink_value: bool = False  # exp(sink - m) added to the output too (a value of 1s)
    sink_unrescaled: bool = False  # the sink raised the running max; the output not rescaled
    keys_dropped: int = 0  # the last n keys seen by no query (a page or split never read)
    zero_keys: int = 0  # n zero keys (score 0, value 0) read past the end, at positions S, ...
    tiles: tuple[int, int, str] | None = None  # (bq, bk, rule): key tiles a tiled kernel skips


CORRECT = Planted()  # nothing planted


@dataclass
class VariantData:
    """A case's inputs as float64 arrays (already rounded to the checked dtype)."""

    q: np.ndarray  # (1, H, L, E)
    k: np.ndarray  # (1, Hkv, S, E)
    v: np.ndarray  # (1, Hkv, S, Ev)
    scale: float
    slopes: np.ndarray | None  # (H,)
    sinks: np.ndarray | None  # (H,)
    cos: np.ndarray | None  # (S, E / 2)
    sin: np.ndarray | None


__all__ = ["CORRECT", "Planted", "VariantData"]

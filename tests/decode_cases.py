"""Shared inputs of the decode tests: seeded random tensors, the variants at true positions, the
full causal call each decode is compared with, and slicing helpers. Standard library only.
"""

from __future__ import annotations

import random

import scratch
from scratch.variants import (
    ALiBi,
    BiasTable,
    Causal,
    ChunkedLocal,
    Documents,
    SinkTokens,
    SlidingWindow,
    Softcap,
    combine,
)


def tensor(rng: random.Random, *shape: int, spread: float = 1.0) -> list:
    """Nested lists of N(0, spread) floats of the given shape."""
    if len(shape) == 1:
        return [rng.gauss(0.0, spread) for _ in range(shape[0])]
    return [tensor(rng, *shape[1:], spread=spread) for _ in range(shape[0])]


def rows(x: list, lo: int, hi: int) -> list:
    """x (B, H, S, D) cut to the positions lo..hi-1 along the sequence: (B, H, hi - lo, D)."""
    return [[head[lo:hi] for head in batch] for batch in x]


def variants(H: int, S: int) -> dict[str, object]:
    """Each case: a variant written in true positions (shift 0), or None (no mask, no score)."""
    return {
        "plain": None,
        "causal": Causal(),
        "window": SlidingWindow(2, 0),
        "sink tokens": SinkTokens(1, 2),
        "alibi": combine(Causal(), ALiBi.for_heads(H)),
        "softcap": combine(Causal(), Softcap(0.8)),
        "bias table": combine(Causal(), BiasTable([[0.3 * d for d in range(-2, 3)]] * H)),
        "chunked": combine(Causal(), ChunkedLocal(3)),
        "documents": combine(Causal(), Documents.from_cu_seqlens([0, S // 2, S])),
        "window softcap alibi": combine(SlidingWindow(3, 0), Softcap(1.5), ALiBi.for_heads(H)),
    }


def mods(variant: object) -> dict[str, object]:
    """The variant's score_mod and mask_mod as keyword arguments."""
    return {
        "score_mod": getattr(variant, "score_mod", None),
        "mask_mod": getattr(variant, "mask_mod", None),
    }


def full_call(q, k, v, variant, *, enable_gqa=False, sinks=None):
    """One causal flex_attention call over the whole sequence (L = S): (output, lse)."""
    B, H, S = len(q), len(q[0]), len(q[0][0])
    mask = Causal().mask_mod if variant is None else variant.mask_mod
    score_mod = mods(variant)["score_mod"]
    block = scratch.create_block_mask(mask, B, H, S, S)
    return scratch.flex_attention(
        q, k, v, score_mod, block, enable_gqa=enable_gqa, return_lse=True, sinks=sinks
    )


def problem(seed: int, B: int = 2, H: int = 4, Hkv: int = 2, S: int = 7, E: int = 3):
    """Seeded query (B, H, S, E), key (B, Hkv, S, E), value (B, Hkv, S, E+1)."""
    rng = random.Random(seed)
    return tensor(rng, B, H, S, E), tensor(rng, B, Hkv, S, E), tensor(rng, B, Hkv, S, E + 1)

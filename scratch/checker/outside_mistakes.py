"""Outside kernels' mistakes (issue 35): learned sinks entering the softmax wrongly, split-KV
merges weighted wrongly or in the wrong base, paged caches reading too few or too many keys, and
key tiles skipped that the mask only partly hides (tests/outside_kernels_b.py writes them as
gpt-oss, flash-decoding, vLLM and FlashAttention-2 write their kernels). Each is a Planted
change of variant_numpy.attend, named by the one engine (mistake.py) through
variant_diagnosis.candidates.
"""

from __future__ import annotations

import math

from scratch.checker.mistake import Mistake
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_numpy import Planted, allowed
from scratch.variants.causal import Causal

BLOCKS = (8, 16, 32, 64)


def split_sizes(case: VariantCase) -> set[int]:
    """Keys per split a split-KV kernel may use: S split 2-8 ways, or a block size below S."""
    S = case.k[2]
    return {-(-S // n) for n in range(2, 9)} | {b for b in BLOCKS if b < S}


SINK_SCALED = (
    "sink scaled by 1/sqrt(d) with the scores: the sink is a logit of its own, added to the "
    "softmax after the scale"
)
SINK_BASE = (
    "sink in the wrong base: exp2(sink - m) beside scores in log2 units (the sink not "
    "multiplied by log2(e), so it counts as sink * ln 2)"
)
SINK_SHARED = "one sink shared by every head (sinks[0]): each query head h has its own sinks[h]"
SINK_KV = (
    "sink indexed by the kv head under GQA (sinks[h // group]): each query head h has its own "
    "sinks[h]"
)
SINK_UNSHIFTED = (
    "exp(sink) added without the row max subtracted: the sum holds exp(score - m), so the sink "
    "term must be exp(sink - m)"
)
SINK_VALUE = (
    "sink added to the output as a value: exp(sink - m) joins the numerator (a value of 1s), "
    "not only the denominator"
)
SINK_UNRESCALED = (
    "the sink raised the running max but the output accumulator was not rescaled by "
    "exp(m_old - m_new) (only the denominator was)"
)
LSE_MERGE = {
    "unnormalised": "split-KV merge weights not renormalised: each split's output weighted by "
    "exp(lse_split - max lse) without dividing by the weights' sum",
    "log2-in-exp": "split-KV lse in log2 units merged with exp: each split's weight "
    "exp(lse_split) taken to the power log2(e) (merge log2 lse with exp2)",
    "ln-in-exp2": "split-KV natural-log lse merged with exp2: each split's weight exp(lse_split) "
    "taken to the power ln 2 (merge natural lse with exp)",
    "nan-empty": "an empty split (every key of it masked for the row) gives NaN: its 0/0 output "
    "reaches the merge with lse -inf (give it weight 0 and output 0)",
}
TILES = (16, 32, 64, 128)
TILE_PARTIAL = (
    "key tiles only partly inside the mask skipped: a tile crossing the causal diagonal or a "
    "window edge must be computed (masked inside), not skipped; its seen keys were left out"
)
TILE_LEFT = (
    "the window's left boundary tile skipped: a key tile some query of the query tile sees "
    "at the window's left edge left out (the first key tile taken as ceil(lo / bk), found from "
    "lo + 1, or from the tile's last query; lo = i0 + S - L - window_size[0], use floor)"
)

TILE_PAST_DIAGONAL = (
    "key tiles past the causal diagonal skipped, as a causal kernel skips them, under a mask "
    "that sees keys there (prefix-LM: the prefix's keys in them left out; a window's right side; "
    "whole documents): skip a tile only when the mask hides all of it"
)


def sees_past_diagonal(case: VariantCase) -> bool:
    """Whether the case's mask hides some key and lets some query see a key past its diagonal."""
    L, S = case.q[2], case.k[2]
    seen = allowed(case, Planted(), L, S)
    causal = Causal(case.shift).tile(range(L), range(S))  # (L, S): j <= i + shift
    return not seen.all() and bool((seen & ~causal).any())


def dropped_name(n: int) -> str:
    """The name of the last n keys seen by no query (n >= 2; one key: split_candidates')."""
    return (
        f"the last {n} keys (j >= S - {n}) seen by no query: a partial last page or split never "
        f"read (a page count S // page_size rounded down, or a last-page length S % page_size "
        f"that is 0 when that page is full)"
    )


def zero_name(n: int) -> str:
    """The name of n zero keys read past the end."""
    what = "the last page's length one too long" if n == 1 else "the last page's padding read"
    return (
        f"{n} slot{'s' if n > 1 else ''} past the last key read as keys ({what}): a zero key "
        f"scores 0 and adds exp(0 - m) to the sum, with no value"
    )


def outside_candidates(case: VariantCase, masked: bool) -> list[Mistake]:
    """The sinks', split-KV merges', paged caches' and skipped tiles' mistakes outside kernels
    make (tests/outside_kernels_b.py)."""
    H, Hkv, S, E = case.q[1], case.k[1], case.k[2], case.q[3]
    found = []
    if case.sinks:
        found += [
            Mistake(SINK_SCALED, Planted(sink_scale=1.0 / math.sqrt(E))),
            Mistake(SINK_BASE, Planted(sink_scale=math.log(2.0))),
            Mistake(SINK_UNSHIFTED, Planted(sink_unshifted=True)),
            Mistake(SINK_VALUE, Planted(sink_value=True)),
            Mistake(SINK_UNRESCALED, Planted(sink_unrescaled=True)),
        ]
        if H > 1:
            found.append(Mistake(SINK_SHARED, Planted(sink_heads="first")))
        if 1 < Hkv < H:
            found.append(Mistake(SINK_KV, Planted(sink_heads="kv")))
    for size in split_sizes(case):
        found += [Mistake(LSE_MERGE[mode], Planted(split=(size, mode))) for mode in LSE_MERGE
                  if masked or mode != "nan-empty"]  # fmt: skip
    pages = {S % n or n for n in BLOCKS if n <= S}
    found += [Mistake(dropped_name(n), Planted(keys_dropped=n)) for n in sorted(pages) if n > 1]
    plain = not (case.rotary or case.alibi or case.cu_seqlens or case.registered_mask)
    if plain:
        pads = {1} | {-S % n for n in BLOCKS if S % n}
        found += [Mistake(zero_name(n), Planted(zero_keys=n)) for n in sorted(pads)]
    if sees_past_diagonal(case):  # tiles skipped as a causal kernel skips them
        rows, keys = {min(b, case.q[2]) for b in TILES}, {min(b, S) for b in TILES}
        found += [Mistake(TILE_PAST_DIAGONAL, Planted(tiles=(bq, bk, "causal-skip")))
                  for bq in sorted(rows) for bk in sorted(keys)]  # fmt: skip
    if case.causal or case.window is not None:
        rules = {"full": TILE_PARTIAL, "right-full": TILE_PARTIAL}
        if case.window is not None and case.window[0] >= 0:
            rules |= {"ceil": TILE_LEFT, "plus-one": TILE_LEFT, "last-row": TILE_LEFT}
        rows, keys = {min(b, case.q[2]) for b in TILES}, {min(b, S) for b in TILES}
        found += [
            Mistake(name, Planted(tiles=(bq, bk, rule)))
            for rule, name in rules.items()
            for bq in sorted(rows)
            for bk in sorted(keys)
        ]
    return found


__all__ = ["BLOCKS", "outside_candidates", "split_sizes"]

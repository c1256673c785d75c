"""Name a variant kernel's mistake, only when its output lands on one planted wrong attention.

Each candidate is variant_numpy.attend with one `Planted` change, in float64. A name is given
when exactly one candidate matches (diagnosis.structural_score <= 2: within the allowed error,
or 1/1000 of how far that candidate is from the truth) and that candidate is told apart from
the truth in this case; two matching names give none. A cap other than the case's is fitted
(softcap with the wrong cap) and named with the cap found; so is a RoPE base other than 10000.
"""

from __future__ import annotations

import math

import numpy as np

from scratch.checker import ignored
from scratch.checker.diagnosis import GQA_MODULO, OVERFLOW
from scratch.checker.mistake import Mistake, matches, named, one, outputs, structural_score
from scratch.checker.variant_cases import ROPE_BASE, VariantCase
from scratch.checker.variant_layout import FLASH_ATTN
from scratch.checker.variant_numpy import CORRECT, Planted, allowed, attend, grads, scores
from scratch.checker.variant_prepare import VariantPrepared
from scratch.trace.compare import LARGEST

BLOCKS = (8, 16, 32, 64)
MERGED = (
    "split-KV partials merged without rescaling: each split's output and sum added as they "
    "are, not weighted by exp(m_split - m) (flash-decoding merges by each split's lse)"
)
AVERAGED = (
    "split-KV partial outputs averaged: each split's output needs the weight "
    "exp(lse_split - lse), not 1/splits"
)
TOP_LEFT = (
    "decode aligned top-left: the diagonal at j = i instead of j = i + S - L (the L queries "
    "are the last L positions; FlashAttention's causal and window_size are bottom-right)"
)
SOFTCAP_GRAD = (
    "softcap's backward misses its 1 - tanh^2(score / cap) factor (d cap tanh(s / cap) / ds)"
)
ROPE_GRAD = (
    "RoPE's backward missing: the gradients of the rotated q and k returned, not turned back by "
    "-angle to the unrotated inputs"
)
INCLUSIVE = (
    "document ends taken as inclusive: each document also sees the next one's first key "
    "(sequence d is rows cu_seqlens[d] .. cu_seqlens[d + 1] - 1; a slice [cu_seqlens[d] : "
    "cu_seqlens[d + 1] + 1] takes one too many)"
)
BSHD_AS_BHSD = (
    "(batch, seqlen, nheads, headdim) read as (batch, nheads, seqlen, headdim): attention across "
    "the heads at each position, not across the positions (flash_attn_func's q is (B, L, H, E); "
    "transpose to (B, H, L, E) before q @ k^T, and the output back)"
)
PAIRING = {
    "half": "RoPE pairing swapped: pairs (2m, 2m+1) turned (interleaved, GPT-J) where "
    "rotary_interleaved=False asks for (m, m + d/2) (half-split, Llama / GPT-NeoX)",
    "interleaved": "RoPE pairing swapped: pairs (m, m + d/2) turned (half-split) where "
    "rotary_interleaved=True asks for (2m, 2m+1) (interleaved)",
}


def window_candidates(case: VariantCase, style: str = "flash") -> list[Mistake]:
    """Each window edge off by one, and (FlashAttention's keywords) window_size ignored."""
    left, right = case.window
    lo, hi = (None if left == -1 else -left), (None if right == -1 else right)
    found = [
        Mistake(
            f"window off by one on the left: {n} keys before the diagonal seen, not "
            f"window_size[0] = {left} (j >= i - left counts keys beside the diagonal)",
            Planted(window_edges=(-n, hi)),
        )
        for n in ((left - 1, left + 1) if lo is not None else ())
    ]
    found += [
        Mistake(
            f"window off by one on the right: {n} keys after the diagonal seen, not "
            f"window_size[1] = {right}" + (" (the diagonal key left out)" if n == -1 else ""),
            Planted(window_edges=(lo, n)),
        )
        for n in ((right + 1, right - 1) if hi is not None else ())
    ]
    if left != right:  # read as (right, left)
        swapped = (None if right == -1 else -right), (None if left == -1 else left)
        found.append(
            Mistake(
                f"window_size read as (right, left): {right} keys before the diagonal and "
                f"{left} after seen, not window_size=({left}, {right}) (keys i - left .. "
                "i + right)",
                Planted(window_edges=swapped),
            )
        )
    if style != "flex":
        found.append(Mistake(ignored.WINDOW, Planted(no_window=True)))
    return found


def mask_candidates(case: VariantCase, style: str = "flash") -> list[Mistake]:
    """Mistakes of the mask: alignment, causal edge, window, documents, prefix, chunks; a
    keyword of the mask ignored (FlashAttention's keywords) or the mask_mod ignored ('flex')."""
    flash = style != "flex"
    found = []
    rules = any(f in ignored.MASK_RULES for f in case.features())
    rules = rules or case.registered_mask is not None
    if not flash and rules:
        found.append(Mistake(ignored.MASK_MOD, Planted(no_mask=True)))
    shifted = case.causal or case.window or case.chunk or case.prefix or case.registered_mask
    if case.shift > 0 and shifted:
        found.append(Mistake(TOP_LEFT, Planted(shift=0)))
    if case.causal:
        found += [
            Mistake(
                "causal mask off by one (diagonal excluded: j < i + S - L)", Planted(causal_edge=-1)
            ),
            Mistake("causal mask off by one (one future key seen)", Planted(causal_edge=1)),
        ]
        if flash:
            found.append(Mistake(ignored.CAUSAL, Planted(no_causal=True)))
    if case.window is not None:
        found += window_candidates(case, style)
    if case.cu_seqlens is not None:
        if flash:
            found.append(Mistake(ignored.DOCUMENTS, Planted(docs="ignored")))
        found += [
            Mistake(
                "documents leak into each other: keys of later documents seen (a document's "
                "end, cu_seqlens[d + 1], not applied)",
                Planted(docs="no-end"),
            ),
            Mistake(INCLUSIVE, Planted(docs="inclusive")),
        ]
        for edge in (-1, 1):
            found.append(
                Mistake(
                    f"document boundaries off by one: each document taken to start at "
                    f"cu_seqlens[d] {'-' if edge < 0 else '+'} 1",
                    Planted(doc_edge=edge),
                )
            )
    if case.prefix is not None:
        found.append(
            Mistake(
                "prefix-LM prefix not seen bidirectionally (plain causal)", Planted(no_prefix=True)
            )
        )
        for edge in (-1, 1):
            n = case.prefix + edge
            found.append(
                Mistake(f"prefix-LM prefix length off by one ({n} keys, not {case.prefix})",
                 Planted(prefix_edge=edge))
            )  # fmt: skip
    if case.registered_mask is not None:
        found += registered_candidates(case)
    if case.chunk is not None:
        if flash:
            found.append(Mistake(ignored.CHUNK, Planted(no_chunk=True)))
        for n in (case.chunk - 1, case.chunk + 1):
            found.append(
                Mistake(
                    f"chunk size off by one ({n} keys per chunk, not {case.chunk})",
                    Planted(chunk=n),
                )
            )
    return found


def registered_candidates(case: VariantCase) -> list[Mistake]:
    """A registered mask's integer parameters, each off by one (within the values it takes)."""
    rule, found = case.registered(), []
    for p in rule.params:
        value = dict(case.registered_mask[1])[p.key]
        if p.is_list:
            continue
        for n in (value - 1, value + 1):
            if n >= p.least:
                found.append(
                    Mistake(f"{rule.label}: {p.label} off by one ({n}, not {value})",
                     Planted(params=((p.key, n),)))
                )  # fmt: skip
    return found


def score_candidates(case: VariantCase, masked: bool, style: str = "flash") -> list[Mistake]:
    """Mistakes of the scale, the score changes, the sinks and RoPE; a keyword ignored
    (softmax_scale, softcap and alibi_slopes with FlashAttention's keywords, score_mod with
    'flex', sinks, rotary_cos and rotary_sin)."""
    flash = style != "flex"
    found = []
    if case.scale is not None:
        found.append(Mistake(ignored.SOFTMAX_SCALE, Planted(scale=1.0 / math.sqrt(case.q[3]))))
    if not flash and (case.softcap is not None or case.alibi):
        found.append(Mistake(ignored.SCORE_MOD, Planted(no_softcap=True, no_alibi=True)))
    if case.softcap is not None:
        if flash:
            found.append(Mistake(ignored.SOFTCAP, Planted(no_softcap=True)))
        if masked:
            found.append(
                Mistake(
                    "softcap applied after the mask: masked keys get cap * tanh(-inf) = -cap, "
                    "a finite score, and are seen (cap the scores, then mask)",
                    Planted(softcap_after_mask=True),
                )
            )
    if case.alibi:
        found += [
            Mistake(
                "ALiBi sign reversed: slope * (i - j) added, farther keys count more",
                Planted(alibi_sign=-1),
            ),
            Mistake(
                "ALiBi slope order reversed: head h given slope[H - 1 - h] (the first head is the "
                "steepest)",
                Planted(slopes_reversed=True),
            ),
        ]
        if flash:
            found.append(Mistake(ignored.ALIBI, Planted(no_alibi=True)))
    if case.sinks:
        found.append(Mistake(ignored.SINKS, Planted(sink_out=True)))
    if case.rotary is not None:
        other = "interleaved" if case.rotary == "half" else "half"
        found.append(Mistake(PAIRING[case.rotary], Planted(pairing=other)))
        found.append(Mistake(ignored.ROTARY, Planted(no_rope=True)))
        if case.shift > 0:
            found.append(
                Mistake(
                    "decode positions not offset: query i turned by RoPE position i, not "
                    "i + S - L (its position after the cached keys)",
                    Planted(q_positions="zero"),
                )
            )
        if case.shift > 0 and case.q[2] > 1:
            found.append(
                Mistake(
                    "decode queries all turned at RoPE position S - 1 (the newest): query i's "
                    "position is i + S - L",
                    Planted(q_positions="last"),
                )
            )
    return found


def split_sizes(case: VariantCase) -> set[int]:
    """Keys per split a split-KV kernel may use: S split 2-8 ways, or a block size below S."""
    S = case.k[2]
    return {-(-S // n) for n in range(2, 9)} | {b for b in BLOCKS if b < S}


def split_candidates(case: VariantCase) -> list[Mistake]:
    """Split-KV merges without the max correction, for split counts 2-8 and block sizes; the
    last key dropped; the sink counted once per split."""
    S = case.k[2]
    sizes = split_sizes(case)
    found = [
        Mistake(
            "the last key (j = S - 1) seen by no query (does a split or key tile end one key "
            "short?)",
            Planted(last_key_unseen=True),
        )
    ]
    if case.sinks:
        found += [
            Mistake(  # named by the count (without a mask, splits as many give the same output)
                f"the sink counted once per split ({-(-S // size)} splits of the {S} keys): "
                f"exp(sink[h]) added to the sum of each split with a key the row sees, before "
                f"the merge; add it once, to the merged sum",
                Planted(sink_split=size),
            )
            for size in sorted(sizes)
        ]
        # the same sink counted n times in every row: where every row sees every split it
        # matches the per-split candidate too, and the two matches give no name
        found += [
            Mistake(f"the sink counted {n} times in each row's sum: add exp(sink[h]) once",
             Planted(sink_copies=n))
            for n in range(2, 9)
        ]  # fmt: skip
    for size in sorted(sizes):
        found.append(Mistake(MERGED, Planted(split=(size, "no-rescale"))))
        found.append(Mistake(AVERAGED, Planted(split=(size, "average"))))
    return found


def head_candidates(case: VariantCase) -> list[Mistake]:
    """The grouped-query head map interleaved (h % Hkv), where it differs from h // group."""
    H, Hkv = case.q[1], case.k[1]
    return [Mistake(GQA_MODULO, Planted(gqa_modulo=True))] if 1 < Hkv < H else []


def layout_candidates(case: VariantCase, style: str) -> list[Mistake]:
    """flash_attn_func's (B, L, H, E) read as (B, H, L, E), where such a kernel runs at all
    (L == S, H == Hkv: q @ k^T broadcasts) and per-head tables do not make it raise."""
    (_, H, L, _), (_, Hkv, S, _) = case.q, case.k
    plain = not (case.alibi or case.sinks or case.cu_seqlens or case.rotary)
    if style != FLASH_ATTN or L != S or H != Hkv or not plain:
        return []
    return [Mistake(BSHD_AS_BHSD, Planted(bshd_as_bhsd=True))]


def candidates(case: VariantCase, masked: bool, style: str = "flash") -> list[Mistake]:
    """(name, planted mistake) for every mistake this case may reveal to a kernel of `style`."""
    found = mask_candidates(case, style) + score_candidates(case, masked, style)
    found += head_candidates(case) + layout_candidates(case, style)
    found += slip_candidates(case, style)
    found += split_candidates(case)
    return found + outside_candidates(case, masked)


# ---- outside kernels' mistakes (issue 35): sinks, split-KV lse merges, pages, skipped tiles

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


def fit_cap(prep: VariantPrepared, got: np.ndarray, bound: np.ndarray) -> str | None:
    """The cap that explains got, when it is not the case's: 'softcap with the wrong cap'."""
    case, d = prep.case, prep.data
    cap = case.softcap

    def miss(log_c: float) -> float:
        out = attend(case, d, Planted(cap=cap * math.exp(log_c)))
        return float(np.max(np.abs(got - out)))

    c = cap * math.exp(fitted(miss, np.linspace(-4.0, 4.0, 49)))
    if abs(c / cap - 1) < 0.02:
        return None
    out = attend(case, d, Planted(cap=c))
    if structural_score(got, out, prep.truth, bound) > 2.0:
        return None
    return f"softcap with the wrong cap: the output matches cap ~ {c:.3g}, not {cap:g}" + "".join(
        f" (= {words})" for value, words in cap_reasons(case) if abs(c / value - 1) < 0.02
    )


def fitted(miss, grid: np.ndarray) -> float:
    """The x of the least miss(x): the best point of an even grid, then a golden-section search
    within a grid step of it."""
    best = min(grid, key=miss)
    step = float(grid[1] - grid[0])
    lo, hi = best - step, best + step
    for _ in range(40):
        a, b = hi - 0.618 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (lo, b) if miss(a) < miss(b) else (a, hi)
    return (lo + hi) / 2


def diagnose(prep: VariantPrepared, got: np.ndarray, style: str = "flash") -> str | None:
    """The one planted mistake got matches, or None (style: how fn took the variant)."""
    case, truth = prep.case, prep.truth
    if overflows(prep, got):
        return OVERFLOW
    bound = np.full(truth.shape, prep.allowed)
    catalogue = lambda: candidates(case, masked(case), style)  # noqa: E731
    made = outputs(prep.memo, ("outputs", style), catalogue, lambda p: attend(case, prep.data, p))
    matched = matches(got, made, truth, bound)
    if matched:  # two names: this case cannot tell which (but see ignored.pick)
        return ignored.pick(matched)
    found = None if case.softcap is None else fit_cap(prep, got, bound)
    return found if found or case.rotary is None else fit_base(prep, got, bound)


def overflows(prep: VariantPrepared, got: np.ndarray) -> bool:
    """inf or NaN in got where the truth is finite, in a case whose scores pass the largest
    argument exp takes in the checked dtype (float16: 11.09; its kernels' exp overflows first)."""
    if np.all(np.isfinite(got)):
        return False
    with np.errstate(all="ignore"):
        s, _ = scores(prep.case, prep.data, CORRECT, np.float64)
    return bool(np.max(s) > math.log(LARGEST[prep.dtype]))


def masked(case: VariantCase) -> bool:
    """Whether the case's rule hides some key from some query."""
    return not allowed(case, Planted(), case.q[2], case.k[2]).all()


def backward_candidates(case: VariantCase) -> list[Mistake]:
    """The forward's mask and score mistakes (in P's recompute) and the backward's own."""
    found = mask_candidates(case) + score_candidates(case, masked(case))
    if case.softcap is not None:
        found.append(Mistake(SOFTCAP_GRAD, Planted(softcap_grad=False)))
    if case.rotary is not None:
        found.append(Mistake(ROPE_GRAD, Planted(rope_grad=False)))
    return found


def diagnose_backward(made, got: list[np.ndarray]) -> str | None:
    """The one planted mistake whose dq, dk, dv got matches, or None (dsinks not compared: a
    kernel that leaves the sink out of lse still reports some dsinks of its own)."""
    case = made.prep.case
    flat = lambda gs: np.concatenate([g.ravel() for g in gs[:3]])  # noqa: E731
    truth = flat(made.truth)
    bound = flat([np.full(t.shape, a) for t, a in zip(made.truth, made.allowed)])
    run = lambda p: flat(grads(case, made.prep.data, made.d_out, p))  # noqa: E731
    found = outputs(made.memo, "outputs", lambda: backward_candidates(case), run)
    return named(flat(got), found, truth, bound, pick=one)


# ---- outside kernels' slips (issue 35): RoPE, softcap, ALiBi, chunk and document boundaries


def slip_candidates(case: VariantCase, style: str = "flash") -> list[Mistake]:
    """Slips of kernels written outside: RoPE's rotation and positions (either style); with
    FlashAttention's keywords also the softcap's formula, ALiBi's slopes and where its bias
    goes, and chunk and document boundaries (FlexAttention's mods carry those rules whole)."""
    found = rope_slips(case)
    if style != "flex":
        found += softcap_slips(case) + alibi_slips(case) + boundary_slips(case)
    return found


def rope_slips(case: VariantCase) -> list[Mistake]:
    """RoPE turned the wrong way, cos and sin swapped, tables widened for the other pairing, v
    turned, one of q and k left unturned, the queries' positions one off the keys'."""
    if case.rotary is None:
        return []
    other = "interleaved" if case.rotary == "half" else "half"
    widen = {"half": "cat(freqs, freqs) (HF's)", "interleaved": "repeat_interleave (GPT-J's)"}
    turn = {"half": "rotate_half", "interleaved": "rotate_every_two"}[case.rotary]
    # cos and sin swapped turns by pi/2 - angle: q.k then sees the same angle as by -angle
    backwards = (
        "RoPE turned the wrong way (q.k sees angle i - j, not j - i): sin's sign flipped (a "
        "rotate_half returning cat(x2, -x1) for cat(-x2, x1)) or cos and sin swapped "
        "(x * sin + rotated(x) * cos), which give the same scores"
    )
    found = [
        Mistake(backwards, Planted(rope_slip="reversed")),
        Mistake(backwards, Planted(rope_slip="swapped")),
        Mistake(
            f"RoPE's cos and sin tables widened to the head dim for the other pairing: "
            f"{widen[other]} with {turn} (pairing '{case.rotary}' needs {widen[case.rotary]}), "
            "so each pair's two features turn by different angles",
            Planted(rope_slip="tables"),
        ),
        *(Mistake(base_name(b), Planted(rope_freq=(b, 2.0))) for b in BASE_SLIPS),
        Mistake("RoPE applied to k only: q not turned", Planted(rope_slip="k-only")),
        Mistake("RoPE applied to q only: k not turned", Planted(rope_slip="q-only")),
    ]
    if case.q[3] == case.v[3]:
        found.append(
            Mistake("RoPE applied to v too: only q and k are turned", Planted(rope_slip="v"))
        )
    for n, words in ((1, "ahead of"), (-1, "behind")):
        found.append(
            Mistake(
                f"RoPE positions of the queries one {words} the keys': query i turned at "
                f"position i + S - L {'+' if n > 0 else '-'} 1 relative to key j at j (an "
                "off-by-one position of q or of k: only their difference counts)",
                Planted(rope_q_shift=n),
            )
        )
    return found


def fit_base(prep: VariantPrepared, got: np.ndarray, bound: np.ndarray) -> str | None:
    """The RoPE base that explains got (theta_m = base ** (-2m / d)), when it is not 10000: a
    wrong base, the exponent m / d for 2m / d (base 100), or its sign lost (base 1 / 10000)."""
    case, d = prep.case, prep.data

    def miss(log_b: float) -> float:
        out = attend(case, d, Planted(rope_freq=(10.0**log_b, 2.0)))
        return float(np.max(np.abs(got - out)))

    base = 10.0 ** fitted(miss, np.linspace(-6.0, 8.0, 113))
    if abs(math.log10(base / ROPE_BASE)) < 0.01:
        return None
    out = attend(case, d, Planted(rope_freq=(base, 2.0)))
    if structural_score(got, out, prep.truth, bound) > 2.0:
        return None
    return base_name(base)


# bases that slips give (theta_m = base ** (-2m / d)), and the slip in words
BASE_SLIPS = {
    ROPE_BASE**0.5: "10000 ** (-m / d): the exponent's 2 missing, arange(0, d, 2) / d is meant",
    1 / ROPE_BASE: "10000 ** (+2m / d): the exponent's sign lost, inv_freq = 1 / base ** ... is "
    "meant",
}


def base_name(base: float) -> str:
    """The name of RoPE frequencies from another base (the slip in words where one gives it)."""
    why = "".join(f" ({w})" for b, w in BASE_SLIPS.items() if abs(math.log10(base / b)) < 0.01)
    return f"RoPE frequencies from base ~ {base:.3g}, not 10000 (theta_m = base ** (-2m / d))" + (
        why
    )


def cap_reasons(case: VariantCase) -> list[tuple[float, str]]:
    """The caps a slip gives the form cap' tanh(s / cap'), and the slip in words."""
    cap, scale = case.softcap, 1.0 / math.sqrt(case.q[3])
    return [
        (cap * scale, "cap * scale: the cap applied before the scale, cap * tanh(q.k / cap) * "
         "scale; cap the scaled scores"),
        (1.0 / cap, "1 / cap: the cap inverted"),
    ]  # fmt: skip


def softcap_slips(case: VariantCase) -> list[Mistake]:
    """The softcap's formula c1 tanh(s / c2) with c1 or c2 wrong (s = scale q.k; the cap
    applied before the scale is cap' tanh(s / cap'): fit_cap names it)."""
    if case.softcap is None:
        return []
    cap, scale = case.softcap, 1.0 / math.sqrt(case.q[3])
    forms = [
        ((cap * scale, scale), "cap * tanh(q.k) * scale: the unscaled score not divided by the "
         "cap"),
        ((cap, 1.0), "cap * tanh(s): the score not divided by the cap"),
        ((cap, 1.0 / cap), "cap * tanh(s * cap): the score multiplied by the cap, not divided"),
        ((1.0, cap), "tanh(s / cap): not multiplied by the cap"),
        ((cap * scale, cap), "cap * tanh(s / cap) * scale: the scale applied again after the cap"),
    ]  # fmt: skip
    return [
        Mistake(f"softcap computed as {words} (cap * tanh(s / cap) with s = scale q.k is meant)",
                Planted(softcap_form=form))
        for form, words in forms
    ]  # fmt: skip


def paper_slopes(H: int, shift: int = 0) -> list[float]:
    """The ALiBi paper's slopes for H heads, each exponent's head index moved by `shift`."""
    powers = lambda n: [2.0 ** (-8.0 * (h + 1 + shift) / n) for h in range(n)]  # noqa: E731
    p = 2 ** int(math.log2(H))
    return powers(p) + powers(2 * p)[0::2][: H - p]


def alibi_slips(case: VariantCase) -> list[Mistake]:
    """ALiBi's slopes off by one in the exponent, or computed for a power of two; the bias
    scaled, capped, or added to the weights after the softmax."""
    if not case.alibi:
        return []
    H = case.q[1]
    p, up = 2 ** int(math.log2(H)), 2 ** math.ceil(math.log2(H))
    paper = f"the paper takes the {p} slopes of {p} heads, then every other slope of {2 * p}"
    slopes = [
        (paper_slopes(H, -1), "ALiBi slopes off by one in the exponent: 2^(-8 h / n) for head "
         "h = 0, 1, ... (the paper's are 2^(-8 (h + 1) / n), the first 2^(-8 / n))"),
        (paper_slopes(H, 1), "ALiBi slopes off by one in the exponent: 2^(-8 (h + 2) / n) for "
         "head h = 0, 1, ... (the paper's are 2^(-8 (h + 1) / n), the first 2^(-8 / n))"),
        ([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], f"ALiBi slopes for {H} heads computed "
         f"as 2^(-8 (h + 1) / H), the formula for a power of two: for {H} heads {paper}"),
        (paper_slopes(up)[:H], f"ALiBi slopes of {up} heads cut to the first {H}: for a head "
         f"count that is not a power of two {paper}"),
    ]  # fmt: skip
    found = [Mistake(words, Planted(slopes=tuple(v))) for v, words in slopes]
    after = "ALiBi bias added to the weights after the softmax, not to the scores before it"
    found += [
        Mistake(
            "ALiBi bias scaled with the scores: (q.k + bias) * scale; add the bias after the scale",
            Planted(alibi_slip="scaled"),
        ),
        Mistake(after, Planted(alibi_slip="after-softmax")),
        Mistake(after, Planted(alibi_slip="after-softmax-j")),
    ]
    if case.softcap is not None:
        found.append(
            Mistake(
                "ALiBi bias added before the softcap: the bias capped with the scores (cap the "
                "scores, then add the bias, as FlashAttention does)",
                Planted(alibi_slip="before-softcap"),
            )
        )
    return found


def boundary_slips(case: VariantCase) -> list[Mistake]:
    """Document ids one off between queries and keys, found with side='left', the last
    document never computed (an inclusive end is mask_candidates' INCLUSIVE); chunks as a
    sliding window, chunk of a decode query from its index, chunk boundaries one off, the last
    partial chunk dropped."""
    found, L, S = [], case.q[2], case.k[2]
    positions = np.arange(L) + case.shift  # each query's position
    if case.cu_seqlens is not None:
        cu = case.cu_seqlens
        for slip, words in (("next", "ahead of"), ("previous", "behind")):
            found.append(
                Mistake(
                    f"document ids of the queries one {words} the keys' (one counted from 1, "
                    f"the other from 0): each query sees the {slip} document's keys",
                    Planted(doc_slip=slip),
                )
            )
        found += [
            Mistake(
                "document of each position found by searchsorted(cu_seqlens, pos) with "
                "side='left' (torch.bucketize's default, right=False): each document's first "
                "position counted in the document before, position 0 alone; side='right' - 1 "
                "is meant",
                Planted(doc_slip="left"),
            ),
            Mistake(
                "the last document never computed: its rows left zero (a loop over "
                "len(cu_seqlens) - 2 documents; there are len(cu_seqlens) - 1)",
                Planted(zero_rows=tuple(int(r) for r in np.flatnonzero(positions >= cu[-2]))),
            ),
        ]
    if case.chunk is not None:
        n = case.chunk
        found += [
            Mistake(
                "chunked attention computed as a sliding window of chunk keys (j > i - chunk), "
                "not fixed chunks (j // chunk == i // chunk)",
                Planted(chunk_slip="window"),
            ),
            Mistake(
                "chunk boundaries one position early: positions counted from 1, (p + 1) // chunk",
                Planted(chunk_slip="early"),
            ),
            Mistake(
                "chunk boundaries one position late: (p - 1) // chunk, not p // chunk",
                Planted(chunk_slip="late"),
            ),
        ]
        if case.shift > 0:
            found.append(
                Mistake(
                    "chunk of decode query i taken as i // chunk, not (i + S - L) // chunk (the "
                    "L queries are the last L positions)",
                    Planted(chunk_slip="top-left"),
                )
            )
        if S % n:
            rows = tuple(int(r) for r in np.flatnonzero(positions >= S - S % n))
            found.append(
                Mistake(
                    "the last partial chunk never computed: S // chunk chunks, not "
                    "ceil(S / chunk); its rows left zero",
                    Planted(zero_rows=rows),
                )
            )
    return found


__all__ = ["candidates", "diagnose", "diagnose_backward"]

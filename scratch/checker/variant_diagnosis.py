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
from scratch.checker.mistake import Mistake, matches, named, one, outputs
from scratch.checker.outside_mistakes import outside_candidates, split_sizes
from scratch.checker.outside_slips import cap_reasons, fit, fit_base, slip_candidates
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_grads import grads
from scratch.checker.variant_layout import FLASH_ATTN
from scratch.checker.variant_numpy import CORRECT, Planted, allowed, attend, scores
from scratch.checker.variant_prepare import VariantPrepared
from scratch.trace.compare import LARGEST

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


def fit_cap(prep: VariantPrepared, got: np.ndarray, bound: np.ndarray) -> str | None:
    """The cap that explains got, when it is not the case's: 'softcap with the wrong cap'."""
    case, cap = prep.case, prep.case.softcap
    grid = np.linspace(-4.0, 4.0, 49)  # log(c / cap)
    log_c = fit(prep, got, bound, lambda x: Planted(cap=cap * math.exp(x)), grid)
    if log_c is None or abs(math.exp(log_c) - 1) < 0.02:
        return None
    c = cap * math.exp(log_c)
    return f"softcap with the wrong cap: the output matches cap ~ {c:.3g}, not {cap:g}" + "".join(
        f" (= {words})" for value, words in cap_reasons(case) if abs(c / value - 1) < 0.02
    )


def diagnose(prep: VariantPrepared, got: np.ndarray, style: str = "flash") -> str | None:
    """The one planted mistake got matches, or None (style: how fn took the variant)."""
    case, truth = prep.case, prep.truth
    if empty_rows_wrong(prep, got):
        return EMPTY_ROWS
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


EMPTY_ROWS = (
    "a row that sees no key (here causal with more queries than keys: the first L - S rows) "
    "must give output 0, as FlashAttention and FlexAttention do, not NaN from 0/0: guard the "
    "division by the row's sum"
)


def empty_rows_wrong(prep: VariantPrepared, got: np.ndarray) -> bool:
    """Whether got is wrong only in the rows that see no key (the others within the bound)."""
    empty = np.broadcast_to(prep.empty_rows, got.shape)  # (1, H, L, Ev)
    if not empty.any() or np.all(got[empty] == 0):
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(got[~empty] - prep.truth[~empty]) <= prep.allowed))


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


__all__ = ["candidates", "diagnose", "diagnose_backward"]

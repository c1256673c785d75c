"""Outside kernels' slips (issue 35): RoPE turned or paired wrongly, softcap's cap and scale
composed the wrong way, ALiBi's slopes or bias off, chunk and document boundaries off by one
(tests/outside_kernels_a.py writes them as transformers, FlashAttention, Gemma, BLOOM and Llama 4
write theirs). Each is a Planted change of variant_numpy.attend, named by the one engine
(mistake.py) through variant_diagnosis.candidates; a RoPE base is fitted as softcap's cap is.
"""

from __future__ import annotations

import math

import numpy as np

from scratch.checker.mistake import Mistake, structural_score
from scratch.checker.variant_cases import ROPE_BASE, VariantCase
from scratch.checker.variant_numpy import Planted, attend
from scratch.checker.variant_prepare import VariantPrepared


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


def fit(prep: VariantPrepared, got: np.ndarray, bound: np.ndarray, plant, grid) -> float | None:
    """The x whose plant(x) (a Planted) comes closest to got, fitted over `grid`; None unless
    that attention lands on got (structural score <= 2: got is plant(x) up to rounding)."""
    case, d = prep.case, prep.data

    def miss(x: float) -> float:
        return float(np.max(np.abs(got - attend(case, d, plant(x)))))

    x = fitted(miss, grid)
    out = attend(case, d, plant(x))
    return x if structural_score(got, out, prep.truth, bound) <= 2.0 else None


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
    log_b = fit(
        prep, got, bound, lambda x: Planted(rope_freq=(10.0**x, 2.0)), np.linspace(-6.0, 8.0, 113)
    )
    if log_b is None or abs(math.log10(10.0**log_b / ROPE_BASE)) < 0.01:
        return None
    return base_name(10.0**log_b)


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


__all__ = ["cap_reasons", "fit", "fit_base", "fitted", "paper_slopes", "slip_candidates"]

"""A variant's steps in the ground truth's worked example: RoPE, score change, mask, sinks.

The trace of a call whose Options hold a `variant` (scratch.variants) computes, per head:
  1.5 q_rotated, k_rotated = RoPE(q), RoPE(k)   when the variant holds a Rotary part
  2.  scores = q @ k^T                          (L, d) @ (d, S) -> (L, S)
  3.  scaled = score_mod(scores * scale)        the score change (softcap, ALiBi, ...), if any
  4.  masked = scaled, -inf where mask_mod says the key is not seen
  5.  weights = exp(masked - top) / (sum_j exp(masked - top) + exp(sink[h] - top))
      and sink_weights = exp(sink[h] - top) / (the same sum): the learned sink's column
  6.  output = weights @ v
the same rule as scratch.flex_attention (tests/test_variant_trace.py compares them). is_causal
and a given attn_mask join the variant (Options.attention_variant: causal, then the mask, then
the variant). Without sinks a fully masked row follows masked_rows; with them the
sink takes the whole row (weights 0, output 0), as flex_attention does.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import exp, fsum, inf

from .attention import Steps
from .linalg import matmul_nt, transpose_rows
from .options import Options
from .softmax import softmax_row
from .variants import Combined, LearnedSinks, Rotary, Variant, combine

Matrix = list[list[float]]


def parts_of(variant: Variant | None) -> list[Variant]:
    """The variant's parts, combinations opened (nested ones too), in order."""
    if variant is None:
        return []
    if isinstance(variant, Combined):
        return [p for part in variant.parts for p in parts_of(part)]
    return [variant]


@dataclass(frozen=True)
class Pieces:
    """A variant taken apart: RoPE, learned sinks, and the rest (masks and score changes)."""

    rotary: Rotary | None
    sinks: LearnedSinks | None
    rule: Variant | None  # the mask_mod and/or score_mod; None when there is neither

    @property
    def rules(self) -> list[Variant]:
        """The mask and score parts in order."""
        return parts_of(self.rule)


def pieces(options: Options) -> Pieces:
    """The call's variant as RoPE, sinks and its mask/score rule."""
    parts = parts_of(options.attention_variant)
    rotary = next((p for p in parts if isinstance(p, Rotary)), None)
    sinks = next((p for p in parts if isinstance(p, LearnedSinks)), None)
    rest = [p for p in parts if not isinstance(p, (Rotary, LearnedSinks))]
    rule = None if not rest else rest[0] if len(rest) == 1 else combine(*rest)
    return Pieces(rotary, sinks, rule)


@dataclass
class VariantSteps(Steps):
    """One head's steps under a variant: Steps plus the rotated q, k and the sink's weights."""

    q_rotated: Matrix | None = None  # (L, d_head) when the variant holds RoPE
    k_rotated: Matrix | None = None  # (S, d_head) of the kv head this head reads
    sink_weights: list[float] | None = None  # (L,) when the variant holds learned sinks


def weights_with_sink(row: list[float], sink: float) -> tuple[list[float], float]:
    """Softmax of a row with one more term, the sink logit, in the denominator (no value)."""
    top = max(max(row, default=-inf), sink)  # subtract the max (sink included): exp <= 1
    e = [exp(x - top) for x in row]
    s = exp(sink - top)
    total = fsum(e + [s])
    return [x / total for x in e], s / total


def attend_head(
    q: Matrix,
    k: Matrix,
    v: Matrix,
    h: int,
    scale: float,
    p: Pieces,
    masked_rows: str,
    rows: tuple[list[int], int] | None = None,
) -> VariantSteps:
    """Steps 1.5-6 for query head h, q (L, E), k (S, E), v (S, Ev) of its kv head.

    rows = (indices, L): q holds only those query rows of L, and the steps are theirs (rows
    are independent: each is exactly that row of the full steps)."""
    S = len(k)
    L, at = (len(q), range(len(q))) if rows is None else (rows[1], rows[0])  # at: q's indices
    q_rot = k_rot = None
    if p.rotary is not None:  # step 1.5: RoPE, queries at positions i + S - L, keys at j
        q_pos, k_pos = Rotary.positions(L, S)
        q_rot, k_rot = p.rotary.turn(q, [q_pos[i] for i in at]), p.rotary.turn(k, k_pos)
        q, k = q_rot, k_rot
    # step 2: scores = q @ k^T            (L, E) @ (E, S) -> (L, S)
    scores = matmul_nt(q, k)
    # step 3: scaled = score_mod(scores * scale)   (L, S)
    score_mod = None if p.rule is None else p.rule.score_mod
    scaled = [[x * scale for x in row] for row in scores]
    if score_mod is not None:
        scaled = [
            [score_mod(x, 0, h, i, j) for j, x in enumerate(row)] for i, row in zip(at, scaled)
        ]
    # step 4: masked = scaled with -inf where mask_mod says "not seen" (x - inf: NaN stays NaN)
    mask_mod = None if p.rule is None else p.rule.mask_mod
    masked = scaled
    if mask_mod is not None:
        masked = [
            [x if mask_mod(0, h, i, j) else x - inf for j, x in enumerate(row)]
            for i, row in zip(at, scaled)
        ]
    fully_masked = [all(x == -inf for x in row) for row in masked]
    # step 5: weights = softmax(masked) along each row, the sink in the denominator when given
    sink_weights = None
    if p.sinks is None:
        weights = [softmax_row(row, masked_rows, full) for row, full in zip(masked, fully_masked)]
    else:
        pairs = [weights_with_sink(row, p.sinks.logits[h]) for row in masked]
        weights, sink_weights = [w for w, _ in pairs], [s for _, s in pairs]
    # step 6: output = weights @ v        (L, S) @ (S, Ev) -> (L, Ev)
    output = matmul_nt(weights, transpose_rows(v))
    if masked_rows == "zero" or p.sinks is not None:  # zero weights: zero output, inf in v too
        Ev = len(v[0])
        output = [[0.0] * Ev if full else row for row, full in zip(output, fully_masked)]
    return VariantSteps(
        scores, scaled, masked, weights, output, fully_masked, q_rot, k_rot, sink_weights
    )


def attend_variant_all(
    q: list,
    k: list,
    v: list,
    head_lead: tuple[int, ...],
    scale: float,
    options: Options,
    group: int,
) -> list[VariantSteps]:
    """attend_head for every head of one example: q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev)."""
    if len(head_lead) != 1:
        raise ValueError(
            "variant: the ground truth traces a variant for one example (L, d_model), "
            f"found {len(head_lead) - 1} batch dims"
        )
    if options.dropout_p:
        raise ValueError("dropout_p: a variant's trace has no dropout; expected 0.0")
    H = head_lead[0]
    p = pieces(options)
    L, S = len(q[0]), len(k[0])
    for part in parts_of(options.attention_variant):
        part.check(1, H, L, S)
    return [
        attend_head(q[h], k[h // group], v[h // group], h, scale, p, options.masked_rows)
        for h in range(H)
    ]


__all__ = [
    "Pieces",
    "VariantSteps",
    "attend_variant_all",
    "parts_of",
    "pieces",
    "weights_with_sink",
]

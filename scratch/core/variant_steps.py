"""A variant's steps in the ground truth's worked example: RoPE, score change, mask, sinks.

The trace of a call whose Options hold a `variant` (scratch.variants) computes, per head, with
the one head kernel (`scratch.core.attention.attend`) given the variant's hooks (`head_hooks`):
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

from scratch.core.attention import Steps, attend
from scratch.core.options import Options
from scratch.ops.softmax import weights_with_sink
from scratch.variants import Combined, LearnedSinks, Rotary, Variant, combine


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


VariantSteps = Steps  # one head's steps under a variant: the kernel's Steps (RoPE, sinks too)


def head_hooks(p: Pieces, h: int) -> dict:
    """The kernel's keyword arguments for query head h under the variant's pieces."""
    return {
        "h": h,
        "rotary": p.rotary,
        "score_mod": None if p.rule is None else p.rule.score_mod,
        "mask_mod": None if p.rule is None else p.rule.mask_mod,
        "sink": None if p.sinks is None else p.sinks.logits[h],
    }


def attend_heads(
    q: list,
    k: list,
    v: list,
    scale: float,
    p: Pieces,
    masked_rows: str,
    group: int,
    rows: tuple[list[int], int] | None = None,
) -> list[VariantSteps]:
    """attend with the variant's hooks, each query head h reading kv head h // group: q (H, L, E)
    (or its sampled rows, rows = (indices, L)), k (Hkv, S, E), v (Hkv, S, Ev)."""
    return [
        attend(q[h], k[h // group], v[h // group], scale, None, masked_rows, rows=rows,
               **head_hooks(p, h))
        for h in range(len(q))
    ]  # fmt: skip


def head_steps(heads: list[VariantSteps], group: int) -> dict[str, list]:
    """The heads' steps stacked by head: scores, scaled, masked, weights (H, L, S), output
    (H, L, Ev); under RoPE q_rotated (H, L, E) and k_rotated (Hkv, S, E), one per kv head; with
    learned sinks sink_weights (H, L)."""
    found = {
        name: [getattr(s, name) for s in heads]
        for name in ("scores", "scaled", "masked", "weights", "output")
    }
    if heads[0].q_rotated is not None:
        found["q_rotated"] = [s.q_rotated for s in heads]
        found["k_rotated"] = [s.k_rotated for s in heads[::group]]  # head g * group reads g
    if heads[0].sink_weights is not None:
        found["sink_weights"] = [s.sink_weights for s in heads]
    return found


def attend_variant_all(
    q: list,
    k: list,
    v: list,
    head_lead: tuple[int, ...],
    scale: float,
    options: Options,
    group: int,
) -> list[VariantSteps]:
    """attend with the variant's hooks, each head: q (H, L, E), k (Hkv, S, E), v (Hkv, S, Ev)."""
    if len(head_lead) != 1:
        raise ValueError(
            "variant: the ground truth traces a variant for one example (L, d_model), "
            f"found {len(head_lead) - 1} batch dims"
        )
    if options.dropout_p:
        raise ValueError("dropout_p: a variant's trace has no dropout; expected 0.0")
    L, S = len(q[0]), len(k[0])
    for part in parts_of(options.attention_variant):
        part.check(1, head_lead[0], L, S)
    return attend_heads(q, k, v, scale, pieces(options), options.masked_rows, group)


__all__ = [
    "Pieces",
    "VariantSteps",
    "attend_heads",
    "attend_variant_all",
    "head_hooks",
    "head_steps",
    "parts_of",
    "pieces",
    "weights_with_sink",
]

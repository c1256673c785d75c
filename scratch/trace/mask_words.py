"""The words for each kind of mask: the masked step's formula, its note, why one cell is masked.

A trace's mask kind is the `Options.mask_kind` of its call, with a user's mask split by dtype
("bool" or "float"). A new mask kind adds a row here (and its `build_mask` in each backend).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MaskWords:
    """How the trace speaks of one mask kind; `{s}` is the scaled step, `{q}`/`{k}` tokens."""

    formula: str  # masked = ..., after "masked = "
    note: str
    why: str  # why key k is masked for query q


MASK_WORDS = {
    "none": MaskWords("{s} (no mask)", "no mask: every query may attend every key", ""),
    "causal": MaskWords(
        "{s}, with -inf where key j > query i (causal)",
        "causal: each token sees itself and the tokens before it",
        "key '{k}' comes after query '{q}' (causal mask)",
    ),
    "variant": MaskWords(
        "{s}, with -inf where the variant's rule does not see the key",
        "variant: {rule}",
        "the variant's rule does not see key '{k}' from query '{q}'",
    ),
    "bool": MaskWords(
        "{s}, with -inf where attn_mask is False",
        "attn_mask: True = may attend, False = masked (-inf)",
        "attn_mask is False for query '{q}', key '{k}'",
    ),
    "float": MaskWords(
        "{s} + attn_mask",
        "attn_mask is added; -inf entries mask a key",
        "attn_mask is -inf for query '{q}', key '{k}'",
    ),
}


def trace_mask_kind(mask_kind: str, is_bool: bool | None) -> str:
    """The trace's kind: `Options.mask_kind`, with a given mask named "bool" or "float"."""
    if mask_kind != "given":
        return mask_kind
    return "bool" if is_bool else "float"


__all__ = ["MASK_WORDS", "MaskWords", "trace_mask_kind"]

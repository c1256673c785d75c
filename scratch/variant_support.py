"""The variants an SDPA pipeline computes (is_causal's top-left Causal(0), a given attn_mask) and
the refusal of any other: another diagonal, a window, ALiBi or a combination needs a
flex_attention (the ground truth's, or a backend's where it has one)."""

from __future__ import annotations

from .options import Options
from .variants import Causal, GivenMask


def sdpa_variant(options: Options, who: str) -> Causal | GivenMask | None:
    """`options.attention_variant` when `who` (a pipeline's name) computes it, else refused."""
    found = options.attention_variant
    if found is None or found == Causal(0) or isinstance(found, GivenMask):
        return found
    raise NotImplementedError(
        f"variant: {who} computes is_causal (Causal(0)) and attn_mask only, not {found!r}; "
        f"scratch.flex_attention computes any variant"
    )


__all__ = ["sdpa_variant"]

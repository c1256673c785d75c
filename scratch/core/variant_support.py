"""The variants an SDPA pipeline computes (is_causal's top-left Causal(0), a given attn_mask) and
the refusal of any other: a window, ALiBi or a combination needs a flex_attention (the ground
truth's, or a backend's where it has one). `as_sdpa` gives a lone mask variant back to SDPA's
keywords, for the paths that take only those (the backward trace and the backends' backward)."""

from __future__ import annotations

import dataclasses

from scratch.core.options import Options
from scratch.variants import Causal, GivenMask


def sdpa_variant(options: Options, who: str) -> Causal | GivenMask | None:
    """`options.attention_variant` when `who` (a pipeline's name) computes it, else refused.

    Args:
        options: the call's Options.
        who: the pipeline's name, for the NotImplementedError's message.

    Returns:
        Causal(0), a GivenMask or None: the variants SDPA's pipelines compute.
    """
    found = options.attention_variant
    if found is None or found == Causal(0) or isinstance(found, GivenMask):
        return found
    raise NotImplementedError(
        f"variant: {who} computes is_causal (Causal(0)) and attn_mask only, not {found!r}; "
        f"scratch.flex_attention computes any variant"
    )


def as_sdpa(options: Options, L: int, S: int) -> Options:
    """`options` with a lone mask variant given as SDPA's keywords instead.

    Causal(0) becomes is_causal, another diagonal its (L, S) bool grid, a GivenMask its
    attn_mask; any other options come back unchanged (the same object).

    Args:
        options: the call's Options.
        L: the query length.
        S: the key length.

    Returns:
        The Options SDPA's keywords can say.
    """
    v = options.variant
    if options.attn_mask is not None or options.is_causal or not isinstance(v, Causal | GivenMask):
        return options
    if v == Causal(0):
        return dataclasses.replace(options, variant=None, is_causal=True)
    grid = v.cells(range(L), range(S)) if isinstance(v, Causal) else v.attn_mask
    return dataclasses.replace(options, variant=None, attn_mask=grid)


__all__ = ["as_sdpa", "sdpa_variant"]

"""Attention variants, each one object: a mask_mod and/or score_mod and what follows from it.

Masks: Causal, SlidingWindow, ChunkedLocal, PrefixLM, Documents, SinkTokens, GlobalTokens,
GivenMask (SDPA's attn_mask, bool or float). Score changes:
ALiBi, SymmetricALiBi, Softcap, BiasTable. Learned sinks (a denominator term): LearnedSinks.
RoPE on q and k (before the scores): Rotary.
Combining: combine, and_masks, or_masks, compose. A variant as plain data (the window's picker,
session files): VariantChoice. See base.py for what every variant provides; the masks the picker
offers are registered by declaring a key (mask_variants, mask_params: any module in this folder,
so a new mask is one file here).
"""

from scratch.variants import dual
from scratch.variants.alibi import ALiBi, alibi_slopes
from scratch.variants.alibi_symmetric import SymmetricALiBi
from scratch.variants.base import Variant
from scratch.variants.bias_table import BiasTable
from scratch.variants.causal import Causal, causal_array, causal_cells, causal_shift
from scratch.variants.choice import VariantChoice
from scratch.variants.chunked import ChunkedLocal
from scratch.variants.combine import Combined, and_masks, combine, compose, or_masks
from scratch.variants.documents import Documents
from scratch.variants.given_mask import GivenMask
from scratch.variants.global_tokens import GlobalTokens
from scratch.variants.params import Param
from scratch.variants.prefix import PrefixLM
from scratch.variants.registry import mask_params, mask_variants
from scratch.variants.rotary import Rotary
from scratch.variants.sinks import LearnedSinks
from scratch.variants.softcap import Softcap
from scratch.variants.streaming import SinkTokens
from scratch.variants.window import SlidingWindow

__all__ = [
    "ALiBi",
    "BiasTable",
    "Causal",
    "ChunkedLocal",
    "Combined",
    "Documents",
    "GivenMask",
    "GlobalTokens",
    "LearnedSinks",
    "Param",
    "PrefixLM",
    "Rotary",
    "SinkTokens",
    "SlidingWindow",
    "SymmetricALiBi",
    "Softcap",
    "Variant",
    "VariantChoice",
    "alibi_slopes",
    "causal_array",
    "causal_cells",
    "causal_shift",
    "and_masks",
    "combine",
    "compose",
    "dual",
    "mask_params",
    "mask_variants",
    "or_masks",
]

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

from . import dual
from .alibi import ALiBi, alibi_slopes
from .alibi_symmetric import SymmetricALiBi
from .base import Variant
from .bias_table import BiasTable
from .causal import Causal, causal_array, causal_cells, causal_shift
from .choice import VariantChoice
from .chunked import ChunkedLocal
from .combine import Combined, and_masks, combine, compose, or_masks
from .documents import Documents
from .given_mask import GivenMask
from .global_tokens import GlobalTokens
from .params import Param
from .prefix import PrefixLM
from .registry import mask_params, mask_variants
from .rotary import Rotary
from .sinks import LearnedSinks
from .softcap import Softcap
from .streaming import SinkTokens
from .window import SlidingWindow

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

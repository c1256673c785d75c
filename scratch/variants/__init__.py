"""Attention variants, each one object: a mask_mod and/or score_mod and what follows from it.

Masks: Causal, SlidingWindow, ChunkedLocal, PrefixLM, Documents, SinkTokens, GlobalTokens,
GivenMask (SDPA's attn_mask, bool or float). Score changes:
ALiBi, SymmetricALiBi, Softcap, BiasTable. Learned sinks (a denominator term): LearnedSinks.
RoPE on q and k (before the scores): Rotary.
Combining: combine, and_masks, or_masks, compose. A variant as plain data (the window's picker,
session files): VariantChoice. See base.py for what every variant provides.
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
from .prefix import PrefixLM
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
    "or_masks",
]

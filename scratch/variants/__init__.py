"""Attention variants, each one object: a mask_mod and/or score_mod and what follows from it.

Masks: Causal, SlidingWindow, ChunkedLocal, PrefixLM, Documents, SinkTokens. Score changes:
ALiBi, Softcap, BiasTable. Learned sinks (a denominator term): LearnedSinks. Combining:
combine, and_masks, or_masks, compose. See base.py for what every variant provides.
"""

from . import dual
from .alibi import ALiBi, alibi_slopes
from .base import Variant
from .bias_table import BiasTable
from .causal import Causal
from .chunked import ChunkedLocal
from .combine import Combined, and_masks, combine, compose, or_masks
from .documents import Documents
from .prefix import PrefixLM
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
    "LearnedSinks",
    "PrefixLM",
    "SinkTokens",
    "SlidingWindow",
    "Softcap",
    "Variant",
    "alibi_slopes",
    "and_masks",
    "combine",
    "compose",
    "dual",
    "or_masks",
]

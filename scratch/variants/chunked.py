"""Chunked local attention (Llama 4's local layers): queries see keys of their own chunk only.

Positions are cut into chunks of `chunk` keys: 0..chunk-1, chunk..2*chunk-1, ... Query i (at
position i + shift) sees key j iff j // chunk == (i + shift) // chunk. Llama 4 combines it with
causal: combine(ChunkedLocal(chunk), Causal()).
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.base import Variant
from scratch.variants.causal import _plus
from scratch.variants.params import Param


@dataclass(frozen=True)
class ChunkedLocal(Variant):
    """Key j seen by query i iff j // chunk == (i + shift) // chunk.

    Attributes:
        chunk: keys per chunk (Llama 4's attention_chunk).
        shift: the diagonal: query i sits at key position i + shift (0: top-left; S - L:
            bottom-right, as in decoding).
    """

    key, label = "chunked", "chunked local"
    params = (Param("chunk", 4, 1, "keys per chunk"),)
    chunk: int
    shift: int = 0

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        return kv_idx // self.chunk == (q_idx + self.shift) // self.chunk

    def rule(self) -> str:
        n = self.chunk
        return f"chunks of {n}: key j seen by query i iff j // {n} == (i{_plus(self.shift)}) // {n}"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        n = self.chunk
        return f" (key {kv_idx} in chunk {kv_idx // n}, query in chunk {(q_idx + self.shift) // n})"

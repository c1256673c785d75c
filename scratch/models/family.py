"""The family protocol: one record per model family answering what the rest of the code asks.

Is it a decoder, which key/value head each query head reads, how RoPE pairs its features, where
its readable forward lives and which forward a run takes. Code outside a family's own modules
asks these records, never `family == "llama"`: a new family is a record here and the readers
that fill its weights.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """What a model family computes, as the loaders, the runs, the traces and the window ask."""

    name: str  # config.json's model_type, the GGUF file's general.architecture
    layout: str  # the module of its readable forward: "bert", "gpt2" or "llama"
    decoder: bool  # rotary positions, an output head, generation with a key/value cache
    pairing: str | None = None  # RoPE's pairing of a head's features as the forward holds them
    gguf_interleaved: bool = False  # llama.cpp's converter interleaved q, k rows (put back)
    qkv_bias: bool = False  # q, k and v projections with biases (blk.N.attn_q.bias, ...)
    tied_head: bool = True  # the output head may be the token table (no output.weight)
    own_head: bool = False  # the output head may be a matrix of its own (output.weight)

    def module(self) -> object:
        """The module of the readable forward (layer, forward; decoders also head_weights)."""
        return importlib.import_module(f"{__package__}.{self.layout}")

    def forward(self, config: object, weights: dict, ids: list[int]) -> tuple:
        """A whole text's (attentions, attention inputs[, logits]): a decoder's by the fast
        path (scratch.backends.numpy_llama, checked against the readable forward)."""
        if self.decoder:
            from scratch.backends import numpy_llama

            return numpy_llama.forward(config, weights, ids)
        return self.module().forward(config, weights, ids)

    def step(self, config: object, weights: dict, ids: list[int], cache: object = None) -> tuple:
        """A decoder's step: ids after `cache` (None: none yet) through the fast path:
        (attentions, attention inputs, logits, the cache grown by len(ids))."""
        if not self.decoder:
            raise ValueError(f"{self.name} is not a decoder; it has no key/value cache to step")
        from scratch.backends import numpy_llama

        return numpy_llama.step(config, weights, ids, cache)

    def kv_heads(self, config: object) -> list[int]:
        """The key/value head each query head reads (grouped-query attention); an encoder's or
        GPT-2's heads each read their own."""
        if not self.decoder:
            return list(range(config.heads))
        return [self.module().kv_head(config, h) for h in range(config.heads)]


FAMILIES = {
    "bert": Family("bert", "bert", decoder=False),
    "gpt2": Family("gpt2", "gpt2", decoder=False),
    "llama": Family("llama", "llama", decoder=True, pairing="half", gguf_interleaved=True),
    "qwen2": Family("qwen2", "llama", decoder=True, pairing="half", qkv_bias=True, own_head=True),
}


def decoders() -> list[str]:
    """The decoder families' names (a GGUF file's general.architecture may be one of them)."""
    return [name for name, family in FAMILIES.items() if family.decoder]


def family_of(name: str) -> Family:
    """The record of family `name`; ValueError naming the families known."""
    if name not in FAMILIES:
        raise ValueError(f"family: {name!r} is not known; expected one of {', '.join(FAMILIES)}")
    return FAMILIES[name]

"""GGUF tensor bytes straight to float64, the numbers gguf.quants.dequantize gives, widened.

llama.cpp's formats store blocks of 32 numbers: Q8_0 a float16 scale d and 32 int8 q (x = d q),
Q4_0 d and 32 nibbles (x = d (q - 8)), Q4_1 d, a float16 offset m and 32 nibbles (x = d q + m;
the low nibbles of the 16 bytes are the block's first 16 numbers). d q is exact in float32 (an
11-bit by 8-bit product), so those are computed here in float64 directly; d q + m is rounded
to float32 first, as llama.cpp and gguf do, and then widened. Tests compare every tensor type
with gguf's own dequantizer bit for bit.
"""

from __future__ import annotations

import numpy as np

BLOCK = 32


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(blocks, 16) bytes -> (blocks, 32) numbers 0-15: low nibbles first, then high."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _scale(raw: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte `at` of every block, as a (blocks, 1) float32 column."""
    return raw[:, at : at + 2].copy().view("<f2").astype(np.float32)


def to_float64(data: np.ndarray, kind: str, shape: tuple[int, ...], out: np.ndarray) -> None:
    """Write tensor bytes `data` (uint8) of type `kind` into `out` (float64, of `shape`)."""
    if kind == "F32":
        out[...] = data.view("<f4").reshape(shape)
        return
    if kind == "F16":
        out[...] = data.view("<f2").reshape(shape)
        return
    size = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}[kind]
    raw = data.reshape(-1, size)  # (blocks, bytes of a block)
    target = out.view()
    target.shape = (-1, BLOCK)  # (blocks, 32): rows of `out` in order (never a copy)
    if kind == "Q8_0":
        np.multiply(raw[:, 2:].view(np.int8), _scale(raw, 0), out=target)
    elif kind == "Q4_0":
        q = _nibbles(raw[:, 2:]).view(np.int8) - np.int8(8)
        np.multiply(q, _scale(raw, 0), out=target)
    else:  # Q4_1: d q + m rounded to float32, as gguf computes it
        target[...] = _scale(raw, 0) * _nibbles(raw[:, 4:]).astype(np.float32) + _scale(raw, 2)

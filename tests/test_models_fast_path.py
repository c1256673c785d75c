"""The decoder's fast path (scratch.backends.numpy_llama) against the readable forward
(scratch.models.llama): the same attentions, attention inputs and logits, whole texts and
cached steps, on random Llama and Qwen2 weights (q, k, v biases, an output head of its own)
sized so that products and rows are shared in blocks.

Tolerance: both compute the same float64 sums, the fast path in other blocks and orders (BLAS
kernels per block, silu as x / (1 + e^-x) against x * sigmoid(x)); each value is a sum of at
most d_inner = 96 products of numbers of size ~1, through two layers, so each differs by a few
hundred ulps at most: ~1e-13. 1e-11 leaves that room a hundred times over, and any changed
operation (a lost scale, bias, norm, or sign) moves weights and logits by more than 1e-3."""

import dataclasses

import pytest

np = pytest.importorskip("numpy")

from scratch.backends import numpy_llama as fast  # noqa: E402
from scratch.models import llama  # noqa: E402
from scratch.models.config import Config  # noqa: E402
from scratch.models.gguf_file import allocate  # noqa: E402

TOLERANCE = 1e-11
CONFIG = Config(family="llama", vocab_size=50, d_model=64, layers=2, heads=4, max_positions=64,
                d_inner=96, eps=1e-5, activation="silu", kv_heads=2, rope_base=500.0)  # fmt: skip
CONFIGS = {"llama": CONFIG, "qwen2": dataclasses.replace(CONFIG, family="qwen2")}


def random_weights(seed: int, config: Config = CONFIG) -> dict:
    """Every tensor of `config`, random (norm weights near 1), in the readers' fused arrays."""
    rng = np.random.default_rng(seed)
    w = allocate(config)
    for name, array in w.items():
        fused = name.endswith(("attn_qkv.weight", "attn_qkv.bias", "ffn_gate_up.weight"))
        if fused or (name == "output.weight" and array is w["token_embd.weight"]):
            continue  # views of these are filled under their own names
        scale = 0.1 if name.endswith("norm.weight") else 1.0 / np.sqrt(array.shape[-1])
        array[...] = rng.standard_normal(array.shape) * scale + name.endswith("norm.weight")
    return w


def gaps(fast_out: tuple, readable_out: tuple) -> dict[str, float]:
    """The largest difference of each output: attentions, attention inputs, logits."""
    return {
        "attentions": float(np.abs(fast_out[0] - readable_out[0]).max()),
        "inputs": max(float(np.abs(a - b).max()) for a, b in zip(fast_out[1], readable_out[1])),
        "logits": float(np.abs(fast_out[2] - readable_out[2]).max()),
    }


@pytest.mark.parametrize("family", CONFIGS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("T", [1, 3, 17, 40])
def test_the_fast_path_is_the_readable_forward(family, seed, T):
    config = CONFIGS[family]
    w = random_weights(seed, config)
    ids = np.random.default_rng(100 + seed).integers(0, config.vocab_size, T).tolist()
    found = gaps(fast.forward(config, w, ids), llama.forward(config, w, ids))
    assert all(gap <= TOLERANCE for gap in found.values()), found


@pytest.mark.parametrize("family", CONFIGS)
@pytest.mark.parametrize("seed", range(3))
def test_each_cached_step_is_the_readable_forwards_next_row(family, seed):
    """A prompt of 19 tokens, then three single-token steps against the cache: each step's
    attention row and logits are the readable forward's over the whole text so far."""
    config = CONFIGS[family]
    w = random_weights(seed, config)
    ids = np.random.default_rng(200 + seed).integers(0, config.vocab_size, 22).tolist()
    _, _, _, cache = fast.step(config, w, ids[:19])
    attentions, _, logits = llama.forward(config, w, ids)
    for t in range(19, 22):
        row, _, last, cache = fast.step(config, w, ids[t : t + 1], cache)
        assert row.shape == (config.layers, config.heads, 1, t + 1)
        assert np.abs(row[:, :, 0] - attentions[:, :, t, : t + 1]).max() <= TOLERANCE, t
        assert np.abs(last[0] - logits[t]).max() <= TOLERANCE, t

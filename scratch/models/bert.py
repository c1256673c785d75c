"""BERT (all-MiniLM-L6-v2 and the BERT family): the encoder forward pass in NumPy float64.

Weights follow torch's nn.Linear: `weight` is (out, in) and a layer computes x @ weight.T + bias.
"""

from __future__ import annotations

import numpy as np

from scratch.models.config import Config
from scratch.models.layers import ACTIVATIONS, attention_heads, layer_norm, run_layers

TABLES = ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight")
ATTENTION_INPUT = "input"  # post-LN: the heads read the layer's input itself


def projections(w: dict, layer: int) -> dict[str, np.ndarray]:
    """Layer `layer`'s w_q, w_k, w_v as (d_model, d_model) right-multiplied matrices, and biases."""
    p = f"encoder.layer.{layer}.attention.self."
    out = {}
    for name, part in (("q", "query"), ("k", "key"), ("v", "value")):
        weight = w[p + part + ".weight"].astype(np.float64, copy=False)  # (out, in)
        out[f"w_{name}"] = weight.T  # (in, out): right-multiplied
        out[f"b_{name}"] = w[p + part + ".bias"].astype(np.float64, copy=False)
    return out


def tensors(c: Config) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor the forward reads: name -> (shape, the config.json keys that decide it)."""
    d, inner, model = (c.d_model,), (c.d_inner,), "hidden_size"
    need = {
        "embeddings.word_embeddings.weight": ((c.vocab_size, c.d_model), "vocab_size, " + model),
        "embeddings.position_embeddings.weight": (
            (c.max_positions, c.d_model),
            "max_position_embeddings, " + model,
        ),
        "embeddings.token_type_embeddings.weight": (
            (c.type_vocab_size, c.d_model),
            "type_vocab_size, " + model,
        ),
        "embeddings.LayerNorm.weight": (d, model),
        "embeddings.LayerNorm.bias": (d, model),
    }
    for n in range(c.layers):
        p = f"encoder.layer.{n}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value"):
            need[p + part + ".weight"] = ((c.d_model, c.d_model), model)
            need[p + part + ".bias"] = (d, model)
        need[p + "attention.output.dense.weight"] = ((c.d_model, c.d_model), model)
        for name in ("attention.output.dense.bias", "output.dense.bias"):
            need[p + name] = (d, model)
        for norm in ("attention.output.LayerNorm.", "output.LayerNorm."):
            need[p + norm + "weight"] = need[p + norm + "bias"] = (d, model)
        sizes = "intermediate_size, " + model
        need[p + "intermediate.dense.weight"] = ((c.d_inner, c.d_model), sizes)
        need[p + "intermediate.dense.bias"] = (inner, "intermediate_size")
        need[p + "output.dense.weight"] = ((c.d_model, c.d_inner), sizes)
    return need


def embed(config: Config, w: dict, ids: list[int]) -> np.ndarray:
    """Word + position + token type 0 embeddings, then LayerNorm: layer 0's input (T, d_model)."""
    f64 = lambda name: w[name].astype(np.float64, copy=False)  # noqa: E731
    T = len(ids)
    h = (
        w["embeddings.word_embeddings.weight"][ids].astype(np.float64, copy=False)
        + f64("embeddings.position_embeddings.weight")[:T]
        + f64("embeddings.token_type_embeddings.weight")[0]
    )  # (T, d_model)
    ln = f64("embeddings.LayerNorm.weight"), f64("embeddings.LayerNorm.bias")
    return layer_norm(h, *ln, config.eps)


def layer(c: Config, w: dict, n: int, h: np.ndarray) -> dict[str, np.ndarray]:
    """Encoder layer n on its input h (T, d_model), normalised after each residual (post-LN):
    every intermediate by name, in order (the block view's stages)."""
    p = f"encoder.layer.{n}."
    f64 = lambda name: w[p + name].astype(np.float64, copy=False)  # noqa: E731
    ln = lambda x, name: layer_norm(x, f64(name + ".weight"), f64(name + ".bias"), c.eps)  # noqa: E731
    # step 1: project q, k, v, each with its bias
    proj = projections(w, n)
    q, k, v = (h @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d) -> (T, d)
    # step 2: every head's attention
    weights, context = attention_heads(q, k, v, c.heads, c.causal, c.scale(n))  # (H, T, T)
    # step 3: the heads side by side, projected back, added to the input, then LayerNorm
    attn = context @ f64("attention.output.dense.weight").T + f64("attention.output.dense.bias")
    residual = h + attn  # (T, d_model)
    mid = ln(residual, "attention.output.LayerNorm")
    # step 4: the feed-forward, added to its input, then LayerNorm: the next layer's input
    inner = ACTIVATIONS[c.activation](
        mid @ f64("intermediate.dense.weight").T + f64("intermediate.dense.bias")
    )  # (T, d_model) @ (d_model, d_inner) -> (T, d_inner)
    mlp = inner @ f64("output.dense.weight").T + f64("output.dense.bias")  # (T, d_model)
    return {"input": h, "attention": weights, "attention output": attn, "residual": residual,
            "norm": mid, "mlp": inner, "mlp output": mlp,
            "residual 2": ln(mid + mlp, "output.LayerNorm")}  # fmt: skip


def forward(config: Config, w: dict, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(attentions (layers, heads, T, T), each layer's attention input x (T, d_model))."""
    return run_layers(embed, layer, ATTENTION_INPUT, config, w, ids)[:2]

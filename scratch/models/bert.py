"""BERT (all-MiniLM-L6-v2 and the BERT family): the encoder forward pass in NumPy float64.

Weights follow torch's nn.Linear: `weight` is (out, in) and a layer computes x @ weight.T + bias.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .layers import ACTIVATIONS, attention_heads, layer_norm


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


def forward(config: Config, w: dict, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(attentions (layers, heads, T, T), each layer's attention input x (T, d_model))."""
    f64 = lambda name: w[name].astype(np.float64, copy=False)  # noqa: E731
    eps, act, heads = config.eps, ACTIVATIONS[config.activation], config.heads
    T = len(ids)
    # embeddings: word + position + token type 0, then LayerNorm          (T, d_model)
    h = (
        w["embeddings.word_embeddings.weight"][ids].astype(np.float64, copy=False)
        + f64("embeddings.position_embeddings.weight")[:T]
        + f64("embeddings.token_type_embeddings.weight")[0]
    )
    h = layer_norm(h, f64("embeddings.LayerNorm.weight"), f64("embeddings.LayerNorm.bias"), eps)
    attentions, inputs = [], []
    for n in range(config.layers):
        p = f"encoder.layer.{n}."
        proj = projections(w, n)
        inputs.append(h)
        q, k, v = (h @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d)
        weights, context = attention_heads(q, k, v, heads, config.causal, config.scale(n))
        attentions.append(weights)
        out = context @ f64(p + "attention.output.dense.weight").T + f64(
            p + "attention.output.dense.bias"
        )
        h = layer_norm(
            out + h,
            f64(p + "attention.output.LayerNorm.weight"),
            f64(p + "attention.output.LayerNorm.bias"),
            eps,
        )
        inner = act(h @ f64(p + "intermediate.dense.weight").T + f64(p + "intermediate.dense.bias"))
        out = inner @ f64(p + "output.dense.weight").T + f64(p + "output.dense.bias")
        h = layer_norm(
            out + h, f64(p + "output.LayerNorm.weight"), f64(p + "output.LayerNorm.bias"), eps
        )
    return np.stack(attentions), inputs

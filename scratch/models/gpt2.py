"""GPT-2 family: the decoder forward pass in NumPy float64, causal heads.

GPT-2's Conv1D layers are right-multiplied (x @ weight + bias, weight (in, out)), the seed
notebooks' convention; c_attn holds w_q, w_k and w_v side by side.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .layers import ACTIVATIONS, attention_heads, layer_norm


def projections(w: dict, layer: int, d_model: int) -> dict[str, np.ndarray]:
    """Layer `layer`'s w_q, w_k, w_v (d_model, d_model) and biases, cut out of c_attn."""
    W = w[f"h.{layer}.attn.c_attn.weight"].astype(np.float64, copy=False)  # (d, 3d)
    b = w[f"h.{layer}.attn.c_attn.bias"].astype(np.float64, copy=False)  # (3d,)
    out = {}
    for n, name in enumerate("qkv"):
        cols = slice(n * d_model, (n + 1) * d_model)
        out[f"w_{name}"], out[f"b_{name}"] = W[:, cols], b[cols]
    return out


def tensors(c: Config) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor the forward reads: name -> (shape, the config.json keys that decide it)."""
    d, model = (c.d_model,), "n_embd"
    need = {
        "wte.weight": ((c.vocab_size, c.d_model), "vocab_size, " + model),
        "wpe.weight": ((c.max_positions, c.d_model), "n_positions, " + model),
    }
    for n in range(c.layers):
        p = f"h.{n}."
        for norm in ("ln_1.", "ln_2."):
            need[p + norm + "weight"] = need[p + norm + "bias"] = (d, model)
        need[p + "attn.c_attn.weight"] = ((c.d_model, 3 * c.d_model), model)
        need[p + "attn.c_attn.bias"] = ((3 * c.d_model,), model)
        need[p + "attn.c_proj.weight"] = ((c.d_model, c.d_model), model)
        need[p + "attn.c_proj.bias"] = need[p + "mlp.c_proj.bias"] = (d, model)
        need[p + "mlp.c_fc.weight"] = ((c.d_model, c.d_inner), "n_inner, " + model)
        need[p + "mlp.c_fc.bias"] = ((c.d_inner,), "n_inner, " + model)
        need[p + "mlp.c_proj.weight"] = ((c.d_inner, c.d_model), "n_inner, " + model)
    return need


def forward(config: Config, w: dict, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(attentions (layers, heads, T, T), each layer's attention input ln_1(h) (T, d_model))."""
    f64 = lambda name: w[name].astype(np.float64, copy=False)  # noqa: E731
    eps, act, heads, d = config.eps, ACTIVATIONS[config.activation], config.heads, config.d_model
    T = len(ids)
    h = w["wte.weight"][ids].astype(np.float64, copy=False) + f64("wpe.weight")[:T]  # (T, d)
    attentions, inputs = [], []
    for n in range(config.layers):
        p = f"h.{n}."
        x = layer_norm(h, f64(p + "ln_1.weight"), f64(p + "ln_1.bias"), eps)
        inputs.append(x)
        proj = projections(w, n, d)
        q, k, v = (x @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d)
        weights, context = attention_heads(q, k, v, heads, config.causal, config.scale(n))
        attentions.append(weights)
        h = h + context @ f64(p + "attn.c_proj.weight") + f64(p + "attn.c_proj.bias")
        m = layer_norm(h, f64(p + "ln_2.weight"), f64(p + "ln_2.bias"), eps)
        inner = act(m @ f64(p + "mlp.c_fc.weight") + f64(p + "mlp.c_fc.bias"))
        h = h + inner @ f64(p + "mlp.c_proj.weight") + f64(p + "mlp.c_proj.bias")
    return np.stack(attentions), inputs

"""GPT-2 family: the decoder forward pass in NumPy float64, causal heads.

GPT-2's Conv1D layers are right-multiplied (x @ weight + bias, weight (in, out)), the seed
notebooks' convention; c_attn holds w_q, w_k and w_v side by side.
"""

from __future__ import annotations

import numpy as np

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


def forward(config: dict, w: dict, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(attentions (layers, heads, T, T), each layer's attention input ln_1(h) (T, d_model))."""
    f64 = lambda name: w[name].astype(np.float64, copy=False)  # noqa: E731
    eps = float(config.get("layer_norm_epsilon", 1e-5))
    act = ACTIVATIONS[config.get("activation_function", "gelu_new")]
    heads, d = int(config["n_head"]), int(config["n_embd"])
    T = len(ids)
    h = w["wte.weight"][ids].astype(np.float64, copy=False) + f64("wpe.weight")[:T]  # (T, d)
    attentions, inputs = [], []
    for n in range(int(config["n_layer"])):
        p = f"h.{n}."
        x = layer_norm(h, f64(p + "ln_1.weight"), f64(p + "ln_1.bias"), eps)
        inputs.append(x)
        proj = projections(w, n, d)
        q, k, v = (x @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d)
        weights, context = attention_heads(q, k, v, heads, causal=True)
        attentions.append(weights)
        h = h + context @ f64(p + "attn.c_proj.weight") + f64(p + "attn.c_proj.bias")
        m = layer_norm(h, f64(p + "ln_2.weight"), f64(p + "ln_2.bias"), eps)
        inner = act(m @ f64(p + "mlp.c_fc.weight") + f64(p + "mlp.c_fc.bias"))
        h = h + inner @ f64(p + "mlp.c_proj.weight") + f64(p + "mlp.c_proj.bias")
    return np.stack(attentions), inputs

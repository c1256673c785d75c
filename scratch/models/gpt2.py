"""GPT-2 family: the decoder forward pass in NumPy float64, causal heads.

GPT-2's Conv1D layers are right-multiplied (x @ weight + bias, weight (in, out)), the seed
notebooks' convention; c_attn holds w_q, w_k and w_v side by side.
"""

from __future__ import annotations

import numpy as np

from scratch.models.config import Config
from scratch.models.layers import ACTIVATIONS, attention_heads, layer_norm, run_layers

TABLES = ("wte.weight", "wpe.weight")  # the token and position tables
ATTENTION_INPUT = "norm"  # pre-LN: the heads read ln_1(h)


def projections(w: dict, layer: int) -> dict[str, np.ndarray]:
    """Layer `layer`'s w_q, w_k, w_v (d_model, d_model) and biases, cut out of c_attn."""
    W = w[f"h.{layer}.attn.c_attn.weight"].astype(np.float64, copy=False)  # (d, 3d)
    b = w[f"h.{layer}.attn.c_attn.bias"].astype(np.float64, copy=False)  # (3d,)
    d_model, out = W.shape[0], {}
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


def layer(c: Config, w: dict, n: int, h: np.ndarray) -> dict[str, np.ndarray]:
    """Decoder layer n on the residual stream h (T, d_model), normalised before each part
    (pre-LN): every intermediate by name, in order (the block view's stages)."""
    p = f"h.{n}."
    f64 = lambda name: w[p + name].astype(np.float64, copy=False)  # noqa: E731
    # step 1: LayerNorm: x is what the heads read
    x = layer_norm(h, f64("ln_1.weight"), f64("ln_1.bias"), c.eps)  # (T, d_model)
    # step 2: project q, k, v (c_attn's three column blocks), each with its bias
    proj = projections(w, n)
    q, k, v = (x @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d) -> (T, d)
    # step 3: every head's causal attention
    weights, context = attention_heads(q, k, v, c.heads, c.causal, c.scale(n))  # (H, T, T)
    # step 4: the heads side by side, projected back, added to the residual stream
    attn = context @ f64("attn.c_proj.weight") + f64("attn.c_proj.bias")  # (T, d_model)
    residual = h + attn
    # step 5: the feed-forward on the LayerNorm'd residual, added to it
    m = layer_norm(residual, f64("ln_2.weight"), f64("ln_2.bias"), c.eps)  # (T, d_model)
    inner = ACTIVATIONS[c.activation](m @ f64("mlp.c_fc.weight") + f64("mlp.c_fc.bias"))
    mlp = inner @ f64("mlp.c_proj.weight") + f64("mlp.c_proj.bias")  # (T, d_inner) -> (T, d)
    return {"input": h, "norm": x, "attention": weights, "attention output": attn,
            "residual": residual, "norm 2": m, "mlp": inner, "mlp output": mlp,
            "residual 2": residual + mlp}  # fmt: skip


def embed(config: Config, w: dict, ids: list[int]) -> np.ndarray:
    """Token embeddings + the position table's first T rows: layer 0's input (T, d_model)."""
    wpe = w["wpe.weight"].astype(np.float64, copy=False)
    return w["wte.weight"][ids].astype(np.float64, copy=False) + wpe[: len(ids)]


def forward(config: Config, w: dict, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(attentions (layers, heads, T, T), each layer's attention input ln_1(h) (T, d_model))."""
    return run_layers(embed, layer, ATTENTION_INPUT, config, w, ids)[:2]

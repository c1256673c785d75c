"""Llama family (SmolLM2): the decoder forward written to be read, in NumPy float64.

RMSNorm, rotary positions (RoPE, "half" pairing: feature i turns with i + d_head/2, as in
Hugging Face; the GGUF reader has put llama.cpp's interleaved rows back), grouped-query
attention (query head h reads key/value head h // group), SwiGLU and the output head. Weights
are (out, in), as PyTorch's Linear stores them: x @ w.T. The block view and the tests read this
forward; Model.run takes the same arithmetic in its fast form (scratch.backends.numpy_llama),
checked against this one.
"""

from __future__ import annotations

import numpy as np

from scratch.models.config import Config
from scratch.models.layers import head_attention, run_layers, sigmoid

TABLES = ("token_embd.weight", None)  # a token table, no position table
ATTENTION_INPUT = "norm"  # RMSNorm(h): what the heads read
PAIRING = "half"  # how features pair for rotation once the GGUF reader has unpermuted q and k


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def rotate(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """RoPE on (..., T, d): pair (i, i + d/2) of row t turns by positions[t] * base^(-2i/d)."""
    d = x.shape[-1]
    angle = positions[:, None] * base ** (-np.arange(d // 2) * 2.0 / d)  # (T, d/2)
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each: the pairs' two halves
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)  # (..., T, d)


def kv_head(config: Config, head: int) -> int:
    """The key/value head query head `head` reads: heads come in groups of heads // kv_heads."""
    return head // (config.heads // config.kv_heads)


def layer(c: Config, w: dict, n: int, h: np.ndarray) -> dict[str, np.ndarray]:
    """Decoder layer n on the residual stream h (T, d_model) at positions 0..T-1: every
    intermediate by name, in order (the block view's stages)."""
    p = f"blk.{n}."
    T, d, H, G = h.shape[0], c.d_head, c.heads, c.kv_heads
    heads = lambda m, k: m.reshape(T, k, d).transpose(1, 0, 2)  # noqa: E731 (T, k d) -> (k, T, d)
    positions = np.arange(T, dtype=np.float64)
    # step 1: RMSNorm the residual stream: x is what the heads read
    x = rms_norm(h, w[p + "attn_norm.weight"], c.eps)  # (T, d_model)
    # step 2: project q, k, v, adding their biases where the family has them (Qwen2; else 0)
    q = x @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0.0)  # (T, d_model) @
    k = x @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0.0)  # (d_model, n d) -> (T, n d)
    v = x @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0.0)
    # step 3: turn q and k by their positions (RoPE); v is not turned
    q = rotate(heads(q, H), positions, c.rope_base)  # (H, T, d)
    k = rotate(heads(k, G), positions, c.rope_base)  # (G, T, d)
    v = heads(v, G)  # (G, T, d)
    # step 4: causal attention, query head i reading key/value head kv_head(i)
    share = [kv_head(c, i) for i in range(H)]
    weights, context = head_attention(q, k[share], v[share], True, None)  # (H, T, T), (H, T, d)
    # step 5: the heads side by side, projected back, added to the residual stream
    attn = context.transpose(1, 0, 2).reshape(T, H * d) @ w[p + "attn_output.weight"].T
    residual = h + attn  # (T, d_model)
    # step 6: SwiGLU on the RMSNorm'd residual: silu(m W_gate) * (m W_up), then W_down
    m = rms_norm(residual, w[p + "ffn_norm.weight"], c.eps)  # (T, d_model)
    gate = m @ w[p + "ffn_gate.weight"].T  # (T, d_inner)
    inner = gate * sigmoid(gate) * (m @ w[p + "ffn_up.weight"].T)  # (T, d_inner)
    mlp = inner @ w[p + "ffn_down.weight"].T  # (T, d_inner) @ (d_inner, d_model)
    return {"input": h, "norm": x, "attention": weights, "attention output": attn,
            "residual": residual, "norm 2": m, "mlp": inner, "mlp output": mlp,
            "residual 2": residual + mlp}  # fmt: skip


def embed(config: Config, w: dict, ids: list[int]) -> np.ndarray:
    """The token table's rows: layer 0's input (T, d_model); positions come later, by RoPE."""
    return w["token_embd.weight"][ids].astype(np.float64)


def forward(
    config: Config, w: dict, ids: list[int]
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(attentions (layers, heads, T, T), attention inputs (T, d_model), logits (T, vocab))."""
    attentions, inputs, h = run_layers(embed, layer, ATTENTION_INPUT, config, w, ids)
    h = rms_norm(h, w["output_norm.weight"], config.eps)  # (T, d_model)
    logits = h @ w["output.weight"].T  # (T, d_model) @ (d_model, vocab): the output head
    return attentions, inputs, logits


def head_weights(config: Config, w: dict, layer: int, head: int) -> dict[str, np.ndarray]:
    """w_q of query head `head`, w_k and w_v of the key/value head it reads: (d_model, d_head)
    each, right-multiplied (x @ w_q); and b_q, b_k, b_v (d_head,) where the family has biases."""
    d, g, p = config.d_head, kv_head(config, head), f"blk.{layer}."
    cols = lambda name, i: w[p + name][i * d : (i + 1) * d].T  # noqa: E731 (d_model, d)
    out = {"w_q": cols("attn_q.weight", head), "w_k": cols("attn_k.weight", g),
           "w_v": cols("attn_v.weight", g)}  # fmt: skip
    for name, i in (("q", head), ("k", g), ("v", g)):
        if p + f"attn_{name}.bias" in w:
            out[f"b_{name}"] = w[p + f"attn_{name}.bias"][i * d : (i + 1) * d]  # (d,)
    return out


def ground_truth(run: object, layer: int, head: int) -> object:
    """The pure-Python Trace of one head: q, k, v projected by fsum sums (plus their biases
    where the family has them), turned by scratch.rotary, key/value head h // group, causal."""
    from scratch.ops.linalg import matmul
    from scratch.ops.rope import rotary
    from scratch.trace.forward import trace_attention

    c = run.model.config
    x = run.inputs[layer].tolist()  # (T, d_model)
    w = {name: m.tolist() for name, m in head_weights(c, run.model.weights, layer, head).items()}
    positions = list(range(len(run.ids)))
    turn = lambda m: rotary(m, positions, base=c.rope_base, pairing=PAIRING)  # noqa: E731

    def project(name: str) -> list[list[float]]:  # (T, d_model) @ (d_model, d) -> (T, d)
        rows, bias = matmul(x, w[f"w_{name}"]), w.get(f"b_{name}")
        return rows if bias is None else [[a + b for a, b in zip(row, bias)] for row in rows]

    q, k, v = turn(project("q")), turn(project("k")), project("v")  # (T, d) each
    return trace_attention(q, k, v, tokens=run.tokens, is_causal=True)

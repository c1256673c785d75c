"""A real model's head as a window session (no Qt): its x, W_q, W_k, W_v and biases; a
decoder's (Llama, Qwen2) with the variant causal + RoPE, its k and v from the shared key/value
head.

The session has no bias fields, so each bias rides in the weights: x gets a last column of
ones and W_q, W_k, W_v a last row holding b_q, b_k, b_v, so x @ W is exactly x @ W + b (one more
term in each sum, 1 * b_c) and the hover arithmetic shows the bias like any other term. A head
without biases (Llama's) keeps x and its weights as they are.
"""

from __future__ import annotations

import numpy as np

import scratch
from gui import core_api
from gui import session as sm
from gui.token_text import session_label
from scratch.variants import VariantChoice


def head_session(run: object, layer: int, head: int) -> sm.Session:
    """The session that recomputes head `head` of layer `layer` of a model run."""
    model = run.model
    if model.decoder:
        return rotated_session(run, layer, head)
    x = np.asarray(run.inputs[layer], dtype=np.float64)  # (T, d_model): the layer's attention input
    x, weights = with_biases(x, model.head_projections(layer, head))  # (T, d_model + 1): ones
    scale = model.scale(layer)  # None: 1/sqrt(d_head); a GPT-2 config may ask for another
    tokens = tuple(session_label(t) for t in run.tokens)
    return sm.Session(
        tokens=tokens,
        key_tokens=tokens,
        query=_matrix(x),
        w_q=_matrix(weights["q"]),
        w_k=_matrix(weights["k"]),
        w_v=_matrix(weights["v"]),
        mode="project",
        num_heads=1,
        num_kv_heads=1,
        scale_mode="sqrt" if scale is None else "custom",
        scale_value=1.0 if scale is None else scale,
        variant=sm.with_mask_mode(VariantChoice(), "causal-top-left")
        if model.causal
        else VariantChoice(),
        preset=f"model:{model.name}:layer {layer}:head {head}",
    )


def rotated_session(run: object, layer: int, head: int) -> sm.Session:
    """A decoder head (rotary positions) in projection mode: x is the layer's RMSNorm'd input,
    W_q the head's columns, W_k and W_v those of the key/value head it shares (GQA), each with
    its bias where the family has them (Qwen2), and the variant causal + RoPE turns q and k after
    the projections (steps q_rotated, k_rotated), as the model adds the biases before RoPE."""
    w, rope = core_api.decoder_head(run.model, layer, head)
    x = np.asarray(run.inputs[layer], dtype=np.float64)  # (T, d_model): RMSNorm'd input
    x, weights = with_biases(x, w)  # Qwen2: (T, d_model + 1), a last column of ones
    kv = core_api.kv_heads_of(run.model)[head]
    names = (scratch.models.token_name(run.model.tokenizer, i) for i in run.ids)
    tokens = tuple(session_label(t) for t in names)  # '␣Paris', not 'ĠParis'
    return sm.Session(
        tokens=tokens,
        key_tokens=tokens,
        query=_matrix(x),
        w_q=_matrix(weights["q"]),  # (d_model [+ 1], d_head): this head's columns
        w_k=_matrix(weights["k"]),  # (d_model [+ 1], d_head): its key/value head's
        w_v=_matrix(weights["v"]),
        mode="project",
        num_heads=1,
        num_kv_heads=1,
        variant=rope,
        preset=f"model:{run.model.name}:layer {layer}:head {head} (RoPE; KV head {kv})",
    )


def with_biases(x: np.ndarray, p: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """x and {"q": W_q, "k": W_k, "v": W_v} with the biases b_q, b_k, b_v of `p` folded in: a
    last column of ones in x, a last row of b in each W; both unchanged when `p` has no biases."""
    names = ("q", "k", "v")
    if "b_q" not in p:  # a family has biases on all three projections or on none
        return x, {name: p[f"w_{name}"] for name in names}
    x1 = np.hstack([x, np.ones((x.shape[0], 1))])  # (T, d_model + 1): ones multiply the bias row
    weights = {
        name: np.vstack([p[f"w_{name}"], p[f"b_{name}"][None, :]])  # (d_model + 1, d_head)
        for name in names
    }
    return x1, weights


def _matrix(a: np.ndarray) -> sm.Matrix:
    """A float64 array as the session's tuple of tuples."""
    return tuple(tuple(float(v) for v in row) for row in a)

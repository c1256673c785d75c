"""A real model's head as a window session (no Qt): its x, W_q, W_k, W_v and biases; a
decoder's (Llama: rotary positions) as its rotated q, k and its v.

The session has no bias fields, so each bias rides in the weights: x gets a last column of
ones and W_q, W_k, W_v a last row holding b_q, b_k, b_v, so x @ W is exactly x @ W + b (one more
term in each sum, 1 * b_c) and the hover arithmetic shows the bias like any other term.
"""

from __future__ import annotations

import numpy as np

from gui import core_api
from gui import session as sm
from gui.token_text import readable


def head_session(run: object, layer: int, head: int) -> sm.Session:
    """The session that recomputes head `head` of layer `layer` of a model run."""
    model = run.model
    if model.family == "llama":
        return rotated_session(run, layer, head)
    p = model.head_projections(layer, head)
    x = np.asarray(run.inputs[layer], dtype=np.float64)  # (T, d_model): the layer's attention input
    scale = model.scale(layer)  # None: 1/sqrt(d_head); a GPT-2 config may ask for another
    ones = np.ones((x.shape[0], 1))
    x1 = np.hstack([x, ones])  # (T, d_model + 1): the last column multiplies the bias row
    weights = {
        name: np.vstack([p[f"w_{name}"], p[f"b_{name}"][None, :]])  # (d_model + 1, d_head)
        for name in ("q", "k", "v")
    }
    return sm.Session(
        tokens=tuple(run.tokens),
        key_tokens=tuple(run.tokens),
        query=_matrix(x1),
        w_q=_matrix(weights["q"]),
        w_k=_matrix(weights["k"]),
        w_v=_matrix(weights["v"]),
        mode="project",
        num_heads=1,
        num_kv_heads=1,
        scale_mode="sqrt" if scale is None else "custom",
        scale_value=1.0 if scale is None else scale,
        mask_mode="causal-top-left" if model.causal else "none",
        preset=f"model:{model.name}:layer {layer}:head {head}",
    )


def rotated_session(run: object, layer: int, head: int) -> sm.Session:
    """A decoder head as q, k, v (mode 'qkv'): rotary positions turn q and k after the
    projections, so the session holds the ground truth's rotated q and k (run.trace: q, k
    turned by RoPE at their positions, k and v of the key/value head this head shares)."""
    trace = run.trace(layer, head)  # pure Python; refuses a gap > 1e-9 to the NumPy forward
    q, k, v = (np.asarray(trace[name].value, dtype=np.float64) for name in ("q", "k", "v"))
    kv = core_api.kv_heads_of(run.model)[head]
    decode = run.model.tokenizer.decode
    tokens = tuple(readable(decode([i])) for i in run.ids)  # '␣Paris', not 'ĠParis'
    return sm.Session(
        tokens=tokens,
        key_tokens=tokens,
        query=_matrix(q),  # (T, d_head): q after RoPE
        key=_matrix(k),  # (T, d_head): k after RoPE
        value=_matrix(v),
        mode="qkv",
        num_heads=1,
        num_kv_heads=1,
        mask_mode="causal-top-left",
        preset=f"model:{run.model.name}:layer {layer}:head {head} (RoPE q, k; KV head {kv})",
    )


def _matrix(a: np.ndarray) -> sm.Matrix:
    """A float64 array as the session's tuple of tuples."""
    return tuple(tuple(float(v) for v in row) for row in a)

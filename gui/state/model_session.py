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
from gui.state import session as sm
from gui.state.token_text import session_label
from scratch.variants import VariantChoice


def head_session(run: object, layer: int, head: int) -> sm.Session:
    """The session that recomputes head `head` of layer `layer` of a model run.

    A decoder's head (rotary positions) is in projection mode too: x is the layer's RMSNorm'd
    input, W_q the head's columns, W_k and W_v those of the key/value head it shares (GQA), each
    with its bias where the family has them (Qwen2), and the variant causal + RoPE turns q and k
    after the projections (steps q_rotated, k_rotated), as the model adds the biases before RoPE."""
    model = run.model
    preset = f"model:{model.name}:layer {layer}:head {head}"
    scale_mode, scale_value = "sqrt", 1.0
    if model.decoder:
        projections, variant = decoder_head(model, layer, head)
        names = (scratch.models.token_name(model.tokenizer, i) for i in run.ids)
        tokens = tuple(session_label(t) for t in names)  # '␣Paris', not 'ĠParis'
        preset += f" (RoPE; KV head {kv_heads_of(model)[head]})"
    else:
        projections = model.head_projections(layer, head)
        causal = VariantChoice(mask="causal", align="top-left")  # SDPA's is_causal
        variant = causal if model.causal else VariantChoice()
        tokens = tuple(session_label(t) for t in run.tokens)
        scale = model.scale(layer)  # None: 1/sqrt(d_head); a GPT-2 config may ask for another
        if scale is not None:
            scale_mode, scale_value = "custom", scale
    x = np.asarray(run.inputs[layer], dtype=np.float64)  # (T, d_model): the layer's attention input
    x, weights = with_biases(x, projections)  # (T, d_model + 1) with biases: a column of ones
    return sm.Session(
        tokens=tokens,
        key_tokens=tokens,
        query=sm.as_matrix(x),
        w_q=sm.as_matrix(weights["q"]),  # (d_model [+ 1], d_head): this head's columns
        w_k=sm.as_matrix(weights["k"]),  # (d_model [+ 1], d_head): its key/value head's
        w_v=sm.as_matrix(weights["v"]),
        mode="project",
        num_heads=1,
        num_kv_heads=1,
        scale_mode=scale_mode,
        scale_value=scale_value,
        variant=variant,
        preset=preset,
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


def start_model(path: str | None, text: str, progress: object = None) -> object:
    """A decoder's Decoding of `text` (scratch.models.start: the prompt run, its cache kept for
    Decoding.extend), or model.run(text) for a model without an output head; the load (of
    scratch.models.load(path), None for the default model; ImportError without NumPy,
    safetensors or tokenizers, its .name says which) and the run report to `progress` (a
    scratch.Progress: stages, Cancel)."""
    with scratch.reporting(progress):
        model = scratch.models.load(path)
        decoder = getattr(model, "decoder", False)
        return scratch.models.start(model, text) if decoder else model.run(text)


def kv_heads_of(model: object) -> list[int]:
    """The key/value head each query head reads (the model's Family record: grouped-query
    attention); BERT's and GPT-2's heads each read their own."""
    return model.family_record.kv_heads(model.config)


def decoder_head(model: object, layer: int, head: int) -> tuple[dict, VariantChoice]:
    """A decoder's head as the window computes it: its w_q and its key/value head's w_k, w_v
    (the family's head_weights, (d_model, d_head) each, with b_q, b_k, b_v where it has them),
    and the variant the model applies after the projections: causal with RoPE (the Family
    record's pairing, the model's base)."""
    model.check_head(layer, head)
    family = model.family_record
    rope = VariantChoice(
        mask="causal",
        align="top-left",
        rope=family.pairing,
        rope_base=float(model.config.rope_base),
    )
    return family.module().head_weights(model.config, model.weights, layer, head), rope

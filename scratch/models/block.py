"""One Transformer block of a model run, every intermediate kept: where attention sits.

`block(run, layer)` writes layer `layer` out step by step (embeddings and positions, the norm,
attention, the residual, the MLP, the residual again) and the model's output, each a named
array. The residual stream entering the layer is the run's own (BERT: run.inputs) or is walked
from the embeddings through the layers before it; either way each step's numbers are checked
against the run's (the attention input x, the weights, the next layer's input, the logits) and a
gap above AGREEMENT is refused, as run.trace refuses one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import bert, gpt2, llama
from .layers import ACTIVATIONS, attention_heads, head_attention, layer_norm, sigmoid
from .run import AGREEMENT

TOP = 16  # a decoder's output: the logit columns of the likeliest next tokens after the text


@dataclass(frozen=True)
class Stage:
    """One step of the block: its name, what it computes in words, and its array."""

    name: str  # embeddings, positions, input, norm, attention, attention output, residual, ...
    words: str  # "RMSNorm(h) * g", "softmax(q k^T / sqrt(d)) v, 9 heads", ...
    value: np.ndarray  # (T, width); attention: (heads, T, T)
    columns: tuple[str, ...] = ()  # the columns' names when not features (the output's tokens)


@dataclass(frozen=True)
class Block:
    """Layer `layer` of a run written out, and the model's output."""

    family: str
    layer: int
    tokens: list[str]
    stages: tuple[Stage, ...]

    def __getitem__(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage {name!r}; stages: {', '.join(s.name for s in self.stages)}")

    def names(self) -> list[str]:
        """The stages in order."""
        return [s.name for s in self.stages]


def block(run: object, layer: int) -> Block:
    """Layer `layer` of `run` step by step, checked against the run; RuntimeError on a gap."""
    model = run.model
    model.check_head(layer, 0)
    stages = {"bert": _bert, "gpt2": _gpt2, "llama": _llama}[model.family](run, layer)
    return Block(model.family, layer, list(run.tokens), tuple(stages))


WORDS = {  # what each step computes, where the families say it alike
    "input": "h: layer {n}'s input (the residual stream)",
    "attention output": "the heads' outputs side by side @ W_o + b_o",
    "residual": "h + attention output",
    "mlp output": "mlp @ W_2 + b_2",
    "residual 2": "residual + mlp output: the layer's output",
}


def _stages(n: int, arrays: dict, common: dict, own: dict) -> list[Stage]:
    """The layer's arrays as Stages in the order given, each with its words (the family's own
    where it has them)."""
    words = {**common, **own}
    return [Stage(name, words[name].format(n=n), value) for name, value in arrays.items()]


def _agree(name: str, mine: np.ndarray, run_value: np.ndarray) -> None:
    """Refuse a step whose numbers differ from the run's by more than AGREEMENT."""
    gap = float(np.max(np.abs(mine - run_value)))
    if not gap <= AGREEMENT:
        raise RuntimeError(f"{name}: the block differs from the model run by {gap:.3g}")


def _f64(w: dict, name: str) -> np.ndarray:
    return w[name].astype(np.float64, copy=False)


# ---------------------------------------------------------------- BERT: norms after the residuals


def _bert_layer(run: object, n: int) -> list[Stage]:
    """Encoder layer n from its input h = run.inputs[n] (BERT normalises after each residual)."""
    c, w, p = run.model.config, run.model.weights, f"encoder.layer.{n}."
    act, ln = (
        ACTIVATIONS[c.activation],
        lambda x, name: layer_norm(  # noqa: E731
            x, _f64(w, p + name + ".weight"), _f64(w, p + name + ".bias"), c.eps
        ),
    )
    h = run.inputs[n]  # (T, d_model)
    proj = bert.projections(w, n)
    q, k, v = (h @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d)
    weights, context = attention_heads(q, k, v, c.heads, c.causal, c.scale(n))  # (H, T, T)
    _agree(f"layer {n} attention", weights, run.attentions[n])
    attn = context @ _f64(w, p + "attention.output.dense.weight").T  # (T, d) @ (d, d)
    attn = attn + _f64(w, p + "attention.output.dense.bias")
    residual = h + attn
    mid = ln(residual, "attention.output.LayerNorm")
    inner = mid @ _f64(w, p + "intermediate.dense.weight").T  # (T, d_inner)
    inner = act(inner + _f64(w, p + "intermediate.dense.bias"))
    mlp = inner @ _f64(w, p + "output.dense.weight").T + _f64(w, p + "output.dense.bias")
    out = ln(mid + mlp, "output.LayerNorm")  # (T, d_model): the next layer's input
    if n + 1 < c.layers:
        _agree(f"layer {n} output", out, run.inputs[n + 1])
    arrays = {"input": h, "attention": weights, "attention output": attn, "residual": residual,
              "norm": mid, "mlp": inner, "mlp output": mlp, "residual 2": out}  # fmt: skip
    return _stages(n, arrays, WORDS, {
        "attention": f"softmax(q k^T / sqrt(d)) for {c.heads} heads",
        "norm": "LayerNorm(residual)",
        "mlp": f"{c.activation}(norm @ W_1 + b_1)",
        "residual 2": "LayerNorm(norm + mlp output): the layer's output",
    })  # fmt: skip


def _embedded(run: object, words: str, positions: str, note: str = "") -> list[Stage]:
    """The token embeddings (one row per token id) and the position table's first T rows."""
    w = run.model.weights
    return [
        Stage("embeddings", "token embeddings (one row per token id)",
              w[words][run.ids].astype(np.float64)),  # (T, d_model)
        Stage("positions", "position embeddings" + note, _f64(w, positions)[: len(run.ids)]),
    ]  # fmt: skip


def _bert(run: object, layer: int) -> list[Stage]:
    c = run.model.config
    stages = [
        *_embedded(run, "embeddings.word_embeddings.weight",
                   "embeddings.position_embeddings.weight", " (+ token type 0)"),
        *_bert_layer(run, layer),
    ]  # fmt: skip
    last = stages[-1].value if layer == c.layers - 1 else _bert_layer(run, c.layers - 1)[-1].value
    return [*stages, Stage("output", f"layer {c.layers - 1}'s output: one vector per token", last)]


# ---------------------------------------------------------------- GPT-2: norms before


def _gpt2_layer(run: object, n: int, h: np.ndarray) -> list[Stage]:
    """Decoder layer n from the residual stream h entering it."""
    c, w, p = run.model.config, run.model.weights, f"h.{n}."
    act = ACTIVATIONS[c.activation]
    x = layer_norm(h, _f64(w, p + "ln_1.weight"), _f64(w, p + "ln_1.bias"), c.eps)  # (T, d)
    _agree(f"layer {n} attention input", x, run.inputs[n])
    proj = gpt2.projections(w, n, c.d_model)
    q, k, v = (x @ proj[f"w_{m}"] + proj[f"b_{m}"] for m in "qkv")  # (T, d) @ (d, d)
    weights, context = attention_heads(q, k, v, c.heads, c.causal, c.scale(n))  # (H, T, T)
    _agree(f"layer {n} attention", weights, run.attentions[n])
    attn = context @ _f64(w, p + "attn.c_proj.weight") + _f64(w, p + "attn.c_proj.bias")
    residual = h + attn
    m = layer_norm(residual, _f64(w, p + "ln_2.weight"), _f64(w, p + "ln_2.bias"), c.eps)
    inner = act(m @ _f64(w, p + "mlp.c_fc.weight") + _f64(w, p + "mlp.c_fc.bias"))  # (T, inner)
    mlp = inner @ _f64(w, p + "mlp.c_proj.weight") + _f64(w, p + "mlp.c_proj.bias")  # (T, d)
    arrays = {"input": h, "norm": x, "attention": weights, "attention output": attn,
              "residual": residual, "norm 2": m, "mlp": inner, "mlp output": mlp,
              "residual 2": residual + mlp}  # fmt: skip
    return _stages(n, arrays, WORDS, {
        "norm": "x = LayerNorm(h): what the heads read",
        "attention": f"softmax(q k^T / sqrt(d), causal) for {c.heads} heads",
        "norm 2": "LayerNorm(residual)",
        "mlp": f"{c.activation}(norm 2 @ W_1 + b_1)",
    })  # fmt: skip


def _gpt2(run: object, layer: int) -> list[Stage]:
    c = run.model.config
    start = _embedded(run, "wte.weight", "wpe.weight")
    h, chosen = start[0].value + start[1].value, []  # (T, d_model)
    for n in range(c.layers):  # the residual stream, layer by layer (no head: no logits here)
        stages = _gpt2_layer(run, n, h)
        chosen = stages if n == layer else chosen
        h = stages[-1].value
    out = Stage("output", f"layer {c.layers - 1}'s output: one vector per token", h)
    return [*start, *chosen, out]


# ---------------------------------------------------------------- Llama: RMSNorm, RoPE, GQA, SwiGLU


def _llama_layer(run: object, n: int, h: np.ndarray) -> list[Stage]:
    """Decoder layer n from the residual stream h entering it (RoPE positions 0..T-1)."""
    c, w, p = run.model.config, run.model.weights, f"blk.{n}."
    T, d, H, G = h.shape[0], c.d_head, c.heads, c.kv_heads
    split = lambda m, k: m.reshape(T, k, d).transpose(1, 0, 2)  # noqa: E731 (T, k d) -> (k, T, d)
    positions = np.arange(T, dtype=np.float64)
    x = llama.rms_norm(h, w[p + "attn_norm.weight"], c.eps)  # (T, d_model)
    _agree(f"layer {n} attention input", x, run.inputs[n])
    q = llama.rotate(split(x @ w[p + "attn_q.weight"].T, H), positions, c.rope_base)  # (H, T, d)
    k = llama.rotate(split(x @ w[p + "attn_k.weight"].T, G), positions, c.rope_base)  # (G, T, d)
    v = split(x @ w[p + "attn_v.weight"].T, G)  # (G, T, d)
    share = [llama.kv_head(c, i) for i in range(H)]  # query head -> its key/value head
    weights, context = head_attention(q, k[share], v[share], True, None)  # (H, T, T)
    _agree(f"layer {n} attention", weights, run.attentions[n])
    attn = context.transpose(1, 0, 2).reshape(T, H * d) @ w[p + "attn_output.weight"].T
    residual = h + attn  # (T, d_model)
    m = llama.rms_norm(residual, w[p + "ffn_norm.weight"], c.eps)
    gate = m @ w[p + "ffn_gate.weight"].T  # (T, d_inner)
    inner = gate * sigmoid(gate) * (m @ w[p + "ffn_up.weight"].T)  # SwiGLU (T, d_inner)
    mlp = inner @ w[p + "ffn_down.weight"].T  # (T, d_model)
    arrays = {"input": h, "norm": x, "attention": weights, "attention output": attn,
              "residual": residual, "norm 2": m, "mlp": inner, "mlp output": mlp,
              "residual 2": residual + mlp}  # fmt: skip
    return _stages(n, arrays, WORDS, {
        "norm": "x = RMSNorm(h): what the heads read",
        "attention": f"softmax(RoPE(q) RoPE(k)^T / sqrt(d), causal): {H} query heads sharing "
                     f"{G} key/value heads",
        "attention output": "the heads' outputs side by side @ W_o",
        "norm 2": "RMSNorm(residual)",
        "mlp": "SwiGLU: silu(norm 2 @ W_gate) * (norm 2 @ W_up)",
        "mlp output": "mlp @ W_down",
    })  # fmt: skip


def _llama(run: object, layer: int) -> list[Stage]:
    w = run.model.weights
    h = w["token_embd.weight"][run.ids].astype(np.float64)  # (T, d_model): no position table
    stages = [Stage("embeddings", "token embeddings (positions come later, by RoPE)", h)]
    for n in range(layer + 1):  # the residual stream up to the chosen layer
        chosen = _llama_layer(run, n, h)
        h = chosen[-1].value
    if layer + 1 < run.model.layers:
        _agree(f"layer {layer} output", llama.rms_norm(h, w[f"blk.{layer + 1}.attn_norm.weight"],
               run.model.config.eps), run.inputs[layer + 1])  # fmt: skip
    top = np.argsort(-run.logits[-1], kind="stable")[:TOP]  # the likeliest next tokens
    decode = run.model.tokenizer.decode
    names = ", ".join(repr(decode([int(i)])) for i in top[:3])
    out = Stage("output", f"next-token logits (T, {run.logits.shape[1]}): the {TOP} likeliest "
                f"tokens' columns ({names}, ...)", run.logits[:, top],  # fmt: skip
                columns=tuple(decode([int(i)]) for i in top))  # fmt: skip
    return [*stages, *chosen, out]

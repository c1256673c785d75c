"""One Transformer block of a model run, every intermediate kept: where attention sits.

`layer_block(run, layer)` writes layer `layer` out step by step (embeddings and positions, the norm,
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
from .family import family_of
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

    family: str  # the model's family: "bert", "gpt2", "llama", "qwen2"
    layout: str  # its Family record's layout, the layer's shape: "bert", "gpt2" or "llama"
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


def layer_block(run: object, layer: int) -> Block:
    """Layer `layer` of `run` step by step, checked against the run; RuntimeError on a gap."""
    model = run.model
    model.check_head(layer, 0)
    layout = family_of(model.family).layout  # the layer's shape: Qwen2's is Llama's
    stages = {"bert": _bert, "gpt2": _gpt2, "llama": _llama}[layout](run, layer)
    return Block(model.family, layout, layer, list(run.tokens), tuple(stages))


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
    c = run.model.config
    arrays = bert.layer(c, run.model.weights, n, run.inputs[n])
    _agree(f"layer {n} attention", arrays["attention"], run.attentions[n])
    if n + 1 < c.layers:
        _agree(f"layer {n} output", arrays["residual 2"], run.inputs[n + 1])
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
    c = run.model.config
    arrays = gpt2.layer(c, run.model.weights, n, h)
    _agree(f"layer {n} attention input", arrays["norm"], run.inputs[n])
    _agree(f"layer {n} attention", arrays["attention"], run.attentions[n])
    return _stages(n, arrays, WORDS, {
        "norm": "x = LayerNorm(h): what the heads read",
        "attention": f"softmax(q k^T / sqrt(d), causal) for {c.heads} heads",
        "norm 2": "LayerNorm(residual)",
        "mlp": f"{c.activation}(norm 2 @ W_1 + b_1)",
    })  # fmt: skip


def _gpt2(run: object, layer: int) -> list[Stage]:
    c = run.model.config
    start = _embedded(run, "wte.weight", "wpe.weight")
    h, chosen = gpt2.embed(c, run.model.weights, run.ids), []  # (T, d_model)
    for n in range(c.layers):  # the residual stream, layer by layer (no head: no logits here)
        stages = _gpt2_layer(run, n, h)
        chosen = stages if n == layer else chosen
        h = stages[-1].value
    out = Stage("output", f"layer {c.layers - 1}'s output: one vector per token", h)
    return [*start, *chosen, out]


# ---------------------------------------------------------------- Llama: RMSNorm, RoPE, GQA, SwiGLU


def _llama_layer(run: object, n: int, h: np.ndarray) -> list[Stage]:
    """Decoder layer n from the residual stream h entering it (RoPE positions 0..T-1)."""
    c = run.model.config
    arrays = llama.layer(c, run.model.weights, n, h)
    _agree(f"layer {n} attention input", arrays["norm"], run.inputs[n])
    _agree(f"layer {n} attention", arrays["attention"], run.attentions[n])
    return _stages(n, arrays, WORDS, {
        "norm": "x = RMSNorm(h): what the heads read",
        "attention": f"softmax(RoPE(q) RoPE(k)^T / sqrt(d), causal): {c.heads} query heads "
                     f"sharing {c.kv_heads} key/value heads",
        "attention output": "the heads' outputs side by side @ W_o",
        "norm 2": "RMSNorm(residual)",
        "mlp": "SwiGLU: silu(norm 2 @ W_gate) * (norm 2 @ W_up)",
        "mlp output": "mlp @ W_down",
    })  # fmt: skip


def _llama(run: object, layer: int) -> list[Stage]:
    c, w = run.model.config, run.model.weights
    h = w["token_embd.weight"][run.ids].astype(np.float64)  # (T, d_model): no position table
    stages = [Stage("embeddings", "token embeddings (positions come later, by RoPE)", h)]
    for n in range(layer + 1):  # the residual stream up to the chosen layer
        chosen = _llama_layer(run, n, h)
        h = chosen[-1].value
    if layer + 1 < run.model.layers:
        _agree(f"layer {layer} output", llama.rms_norm(h, w[f"blk.{layer + 1}.attn_norm.weight"],
               c.eps), run.inputs[layer + 1])  # fmt: skip
    top = np.argsort(-run.logits[-1], kind="stable")[:TOP]  # the likeliest next tokens
    decode = run.model.tokenizer.decode
    names = ", ".join(repr(decode([int(i)])) for i in top[:3])
    out = Stage("output", f"next-token logits (T, {run.logits.shape[1]}): the {len(top)} likeliest "
                f"tokens' columns ({names}, ...)", run.logits[:, top],  # fmt: skip
                columns=tuple(decode([int(i)]) for i in top))  # fmt: skip
    return [*stages, *chosen, out]

"""One Transformer block of a model run, every intermediate kept: where attention sits.

`layer_block(run, layer)` writes layer `layer` out step by step (embeddings and positions, the norm,
attention, the residual, the MLP, the residual again) and the model's output, each a named
array. The residual stream is walked from the embeddings by the family's readable forward
(layers.walk), and each step's numbers are checked against the run's (the attention input x,
the weights, the next layer's input) and a gap above AGREEMENT is refused, as run.trace refuses
one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratch.models.family import family_of
from scratch.models.layers import walk
from scratch.models.run import AGREEMENT

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


WORDS = {  # what each step computes, where the families say it alike
    "input": "h: layer {n}'s input (the residual stream)",
    "attention output": "the heads' outputs side by side @ W_o + b_o",
    "residual": "h + attention output",
    "mlp output": "mlp @ W_2 + b_2",
    "residual 2": "residual + mlp output: the layer's output",
}


OWN_WORDS = {  # each layout's own words ({heads}, {kv_heads}, {activation}: the config's)
    "bert": {
        "embeddings": "token embeddings (one row per token id)",
        "positions": "position embeddings (+ token type 0)",
        "attention": "softmax(q k^T / sqrt(d)) for {heads} heads",
        "norm": "LayerNorm(residual)",
        "mlp": "{activation}(norm @ W_1 + b_1)",
        "residual 2": "LayerNorm(norm + mlp output): the layer's output",
    },
    "gpt2": {
        "embeddings": "token embeddings (one row per token id)",
        "positions": "position embeddings",
        "norm": "x = LayerNorm(h): what the heads read",
        "attention": "softmax(q k^T / sqrt(d), causal) for {heads} heads",
        "norm 2": "LayerNorm(residual)",
        "mlp": "{activation}(norm 2 @ W_1 + b_1)",
    },
    "llama": {
        "embeddings": "token embeddings (positions come later, by RoPE)",
        "norm": "x = RMSNorm(h): what the heads read",
        "attention": "softmax(RoPE(q) RoPE(k)^T / sqrt(d), causal): {heads} query heads "
        "sharing {kv_heads} key/value heads",
        "attention output": "the heads' outputs side by side @ W_o",
        "norm 2": "RMSNorm(residual)",
        "mlp": "SwiGLU: silu(norm 2 @ W_gate) * (norm 2 @ W_up)",
        "mlp output": "mlp @ W_down",
    },
}


def layer_block(run: object, layer: int) -> Block:
    """Layer `layer` of `run` step by step, checked against the run; RuntimeError on a gap.

    The residual stream is walked from the embeddings through every layer the check needs (an
    encoder's output is its last layer's; a decoder's chosen layer is checked against the next
    layer's input, its output is the run's logits), each layer's attention input and weights
    compared with the run's.

    Args:
        run: a Run (model.run(text)).
        layer: the layer, 0..layers-1.

    Returns:
        The Block: the layer's steps (T, d_model) and the model's output.
    """
    model = run.model
    model.check_head(layer, 0)
    c, w, family = model.config, model.weights, family_of(model.family)
    module = family.module()
    table, positions = module.TABLES
    words = {**WORDS, **OWN_WORDS[family.layout]}
    say = lambda name: words[name].format(n=layer, heads=c.heads, kv_heads=c.kv_heads,  # noqa: E731
                                          activation=c.activation)  # fmt: skip
    stages = [Stage("embeddings", say("embeddings"), w[table][run.ids].astype(np.float64))]
    if positions is not None:
        stages.append(Stage("positions", say("positions"), _f64(w, positions)[: len(run.ids)]))
    last = c.layers if not model.decoder else min(layer + 2, c.layers)
    h = module.embed(c, w, run.ids)  # (T, d_model): layer 0's input
    for n, arrays in enumerate(walk(module.layer, c, w, h, last)):
        _agree(f"layer {n} attention input", arrays[module.ATTENTION_INPUT], run.inputs[n])
        _agree(f"layer {n} attention", arrays["attention"], run.attentions[n])
        if n == layer:
            stages += [Stage(name, say(name), value) for name, value in arrays.items()]
        h = arrays["residual 2"]
    if model.decoder:
        stages.append(_logits(run))
    else:
        stages.append(Stage("output", f"layer {c.layers - 1}'s output: one vector per token", h))
    return Block(model.family, family.layout, layer, list(run.tokens), tuple(stages))


def _logits(run: object) -> Stage:
    """A decoder's output: the logit columns of the TOP likeliest next tokens after the text."""
    top = np.argsort(-run.logits[-1], kind="stable")[:TOP]
    decode = run.model.tokenizer.decode
    names = ", ".join(repr(decode([int(i)])) for i in top[:3])
    words = f"next-token logits (T, {run.logits.shape[1]}): the {len(top)} likeliest tokens' "
    columns = tuple(decode([int(i)]) for i in top)
    return Stage("output", words + f"columns ({names}, ...)", run.logits[:, top], columns)


def _agree(name: str, mine: np.ndarray, run_value: np.ndarray) -> None:
    """Refuse a step whose numbers differ from the run's by more than AGREEMENT."""
    gap = float(np.max(np.abs(mine - run_value)))
    if not gap <= AGREEMENT:
        raise RuntimeError(f"{name}: the block differs from the model run by {gap:.3g}")


def _f64(w: dict, name: str) -> np.ndarray:
    return w[name].astype(np.float64, copy=False)

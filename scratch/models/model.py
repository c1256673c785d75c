"""A real model's attention, recomputed: load a model once, run a text, trace any head."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import bert, gpt2
from .files import (
    ModelError,
    check_dir,
    default_dir,
    read_config,
    read_tokenizer,
    read_weights,
    verify_default_weights,
)

FAMILIES = {"bert": bert, "gpt2": gpt2}
AGREEMENT = 1e-9  # the ground truth's weights of a head vs the NumPy forward's (float64 both)


@dataclass(frozen=True)
class Model:
    """Weights (read once), tokenizer and shape of one model."""

    name: str
    path: Path
    family: str  # "bert" (bidirectional heads) or "gpt2" (causal heads)
    config: dict = field(repr=False)
    weights: dict = field(repr=False)
    tokenizer: object = field(repr=False)

    @property
    def layers(self) -> int:
        """Number of attention layers."""
        return int(self.config.get("num_hidden_layers", self.config.get("n_layer", 0)))

    @property
    def heads(self) -> int:
        """Heads per layer."""
        return int(self.config.get("num_attention_heads", self.config.get("n_head", 0)))

    @property
    def d_model(self) -> int:
        """Width of the hidden states."""
        return int(self.config.get("hidden_size", self.config.get("n_embd", 0)))

    @property
    def max_positions(self) -> int:
        """The most tokens the model has positions for."""
        return int(self.config.get("max_position_embeddings", self.config.get("n_positions", 0)))

    @property
    def causal(self) -> bool:
        """Whether each token attends only to itself and earlier tokens."""
        return self.family == "gpt2"

    def tokenize(self, text: object) -> tuple[list[str], list[int]]:
        """The tokens and ids of `text`, special tokens included; refuses empty or too long text."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, found {type(text).__name__}")
        if not text.strip():
            raise ValueError("text: empty; type a sentence to run the model on")
        encoding = self.tokenizer.encode(text)
        tokens, ids = list(encoding.tokens), list(encoding.ids)
        if len(ids) > self.max_positions:
            raise ValueError(
                f"text: {len(ids)} tokens, more than {self.name}'s {self.max_positions} "
                f"positions; shorten the text"
            )
        if not ids:
            raise ValueError("text: the tokenizer found no tokens in it")
        return tokens, ids

    def run(self, text: str) -> Run:
        """Run the model on `text`: every layer's and head's attention weights, in float64."""
        tokens, ids = self.tokenize(text)
        attentions, inputs = FAMILIES[self.family].forward(self.config, self.weights, ids)
        return Run(self, text, tokens, ids, attentions, inputs)

    def head_projections(self, layer: int, head: int) -> dict[str, np.ndarray]:
        """w_q, w_k, w_v (d_model, d_head) and b_q, b_k, b_v (d_head,) of one head."""
        self.check_head(layer, head)
        family = FAMILIES[self.family]
        if self.family == "gpt2":
            full = family.projections(self.weights, layer, self.d_model)
        else:
            full = family.projections(self.weights, layer)
        d = self.d_model // self.heads
        cols = slice(head * d, (head + 1) * d)  # head h is the column block h*d:(h+1)*d
        return {
            name: (m[:, cols] if name.startswith("w_") else m[cols]) for name, m in full.items()
        }

    def check_head(self, layer: object, head: object) -> None:
        """layer and head are ints in range."""
        for name, value, top in (("layer", layer, self.layers), ("head", head, self.heads)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, found {type(value).__name__}")
            if not 0 <= value < top:
                raise ValueError(f"{name}: expected 0 to {top - 1}, found {value}")


@dataclass(frozen=True)
class Run:
    """One text through one model: tokens and the attention weights of every head."""

    model: Model
    text: str
    tokens: list[str]
    ids: list[int]
    attentions: np.ndarray = field(repr=False)  # (layers, heads, T, T), float64
    inputs: list = field(repr=False)  # per layer: the attention block's input x (T, d_model)

    def trace(self, layer: int, head: int) -> object:
        """The ground truth's Trace of one head: x is the layer's attention input, W its columns.

        The pure-Python ground truth recomputes the head from x and the head's w_q, w_k, w_v
        and biases; its weights must agree with the NumPy forward's to AGREEMENT, else this
        raises (a mismatch would be a bug in one of them).
        """
        from ..trace import trace_attention

        p = self.model.head_projections(layer, head)
        d_head = self.model.d_model // self.model.heads
        trace = trace_attention(
            self.inputs[layer].tolist(),
            w_q=p["w_q"].tolist(),
            w_k=p["w_k"].tolist(),
            w_v=p["w_v"].tolist(),
            b_q=p["b_q"].tolist(),
            b_k=p["b_k"].tolist(),
            b_v=p["b_v"].tolist(),
            tokens=self.tokens,
            is_causal=self.model.causal,
            scale=1.0 / math.sqrt(d_head),
        )
        gap = float(
            np.max(np.abs(np.asarray(trace["weights"].value) - self.attentions[layer, head]))
        )
        if not gap <= AGREEMENT:
            raise RuntimeError(
                f"layer {layer} head {head}: the ground truth's weights differ from the model "
                f"run's by {gap:.3g} (more than {AGREEMENT:g})"
            )
        return trace

    def sinks(self, threshold: float = 0.5) -> dict[str, float]:
        """Share of heads whose average weight on one token is at least `threshold`, by token.

        Many heads park most of their weight on [CLS], [SEP] or the first token (an "attention
        sink"): a head with nothing useful to look at still has to put its softmax mass
        somewhere, and a token every row can see is the cheapest place.
        """
        mean = self.attentions.mean(axis=2)  # (layers, heads, T): average over query rows
        top = mean.argmax(axis=-1)  # (layers, heads)
        found: dict[str, float] = {}
        count = mean.shape[0] * mean.shape[1]
        for (layer, head), j in np.ndenumerate(top):
            if mean[layer, head, j] >= threshold:
                key = f"{self.tokens[j]} (position {j})"
                found[key] = found.get(key, 0.0) + 1.0 / count
        return found


def load(path: object = None) -> Model:
    """The default model (all-MiniLM-L6-v2, verified by SHA-256) or a local model directory."""
    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path: expected a directory name, found {type(path).__name__}")
    resolved = default_dir() if path in (None, "default") else Path(path).expanduser()
    return _load(str(resolved.resolve()), path in (None, "default"))


@functools.lru_cache(maxsize=4)
def _load(path: str, verify: bool) -> Model:
    """Read a model directory once; later loads of the same directory reuse it."""
    folder = Path(path)
    check_dir(folder)
    config = read_config(folder / "config.json")
    family = config.get("model_type")
    if family not in FAMILIES:
        raise ModelError(
            f"{folder / 'config.json'}: model_type {family!r} is not supported; "
            f"supported: {', '.join(FAMILIES)} (BERT and GPT-2 families)"
        )
    if verify:
        verify_default_weights(folder / "model.safetensors")
    # float64 once here, not on every run; the token tables stay float32 (rows are gathered)
    tables = ("embeddings.word_embeddings.weight", "wte.weight")
    weights = {
        name: w if name in tables or w.dtype.kind != "f" else w.astype(np.float64)
        for name, w in read_weights(folder / "model.safetensors").items()
    }
    tokenizer = read_tokenizer(folder / "tokenizer.json")
    name = "all-MiniLM-L6-v2" if verify else folder.name
    model = Model(name, folder, family, config, weights, tokenizer)
    _check_weights(model, folder / "model.safetensors")
    return model


def _check_weights(model: Model, path: Path) -> None:
    """The tensors the forward pass reads are there (a clear message instead of a KeyError)."""
    need = (
        ["embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight"]
        if model.family == "bert"
        else ["wte.weight", "h.0.attn.c_attn.weight"]
    )
    missing = [n for n in need if n not in model.weights]
    if missing or model.layers < 1 or model.heads < 1 or model.d_model % model.heads:
        raise ModelError(
            f"{path}: not a {model.family} checkpoint that config.json describes "
            f"(missing {', '.join(missing) or 'nothing'}; {model.layers} layers, "
            f"{model.heads} heads, width {model.d_model})"
        )

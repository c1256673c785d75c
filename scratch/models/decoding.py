"""Decoding: a prompt and the tokens generated after it so far, continued one token per call.

Model.generate runs every step in one call; a window that shows each step keeps a Decoding and
asks for one more token at a time. Each call feeds one token against the cached rotated keys and
values, so the cache grows by one token per call; the attention of the newest token over the
cache is kept, row by row, and the assembled (S, S) weights equal a full run's (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import llama
from .generate import check_sampling, choose
from .run import Run, top_tokens


@dataclass(frozen=True)
class Decoding:
    """A prompt's run, the new tokens so far, and the cache and logits to continue from."""

    prompt: Run
    ids: tuple[int, ...]  # the new tokens' ids, in order
    rows: tuple = field(repr=False)  # new token i: (layers, heads, T + i + 1), its row of weights
    logits: np.ndarray = field(repr=False)  # (vocab,): the logits the next token is chosen from
    cache: llama.Cache = field(repr=False)  # rotated keys and values of every token so far
    chances: tuple[float, ...] = ()  # new token i's probability when it was chosen (softmax)

    @property
    def tokens(self) -> list[str]:
        """Every token so far (prompt and new), each decoded on its own (' Paris', '\\n')."""
        decode = self.prompt.model.tokenizer.decode
        return [decode([i]) for i in (*self.prompt.ids, *self.ids)]

    @property
    def length(self) -> int:
        """S: the tokens in the cache (the prompt's and the new ones)."""
        return self.cache.length

    def attentions(self) -> np.ndarray:
        """(layers, heads, S, S): the prompt's weights, then each new token's row beneath them
        (zeros right of the diagonal, where a causal row has none)."""
        layers, heads, T, _ = self.prompt.attentions.shape
        S = T + len(self.ids)
        full = np.zeros((layers, heads, S, S))  # (layers, heads, S, S)
        full[:, :, :T, :T] = self.prompt.attentions
        for i, row in enumerate(self.rows):  # row: (layers, heads, T + i + 1)
            full[:, :, T + i, : T + i + 1] = row
        return full

    def run(self) -> Run:
        """Every token so far as one Run (one full forward): its attentions equal attentions(),
        and run.trace(layer, head) recomputes a head with the ground truth."""
        model, ids = self.prompt.model, [*self.prompt.ids, *self.ids]
        tokens = [model.tokenizer.id_to_token(i) for i in ids]
        text = self.prompt.text + model.tokenizer.decode(list(self.ids))
        return Run(model, text, tokens, ids, *llama.forward(model.config, model.weights, ids))

    def next_tokens(self, k: int = 10) -> list[tuple[str, float]]:
        """The k likeliest next tokens and their probabilities (largest first)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k: expected a whole number >= 1, found {k!r}")
        return top_tokens(self.prompt.model.tokenizer, self.logits, k)

    def extend(self, temperature: float = 0.0, seed: int | None = None) -> Decoding:
        """One more token: the likeliest (temperature 0) or a draw from softmax(logits / t) with
        a generator seeded by (seed, step), so a step's draw does not depend on earlier calls."""
        check_sampling(temperature, seed)
        model = self.prompt.model
        if self.length >= model.max_positions:
            raise ValueError(f"{model.name} has no position after {model.max_positions} tokens")
        rng = np.random.default_rng(None if seed is None else [seed, len(self.ids)])
        new = choose(self.logits, temperature, rng)
        attentions, _, logits, cache = llama.step(model.config, model.weights, [new], self.cache)
        row = attentions[:, :, 0, :]  # (layers, heads, S + 1): the new token over the cache
        shifted = np.exp(self.logits - self.logits.max())  # (vocab,)
        chance = float(shifted[new] / shifted.sum())
        ids, rows, chances = (*self.ids, new), (*self.rows, row), (*self.chances, chance)
        return Decoding(self.prompt, ids, rows, logits[-1], cache, chances)


def start(model: object, text: str) -> Decoding:
    """The prompt run once, its cache kept: a Decoding with no new token yet."""
    if model.family != "llama":
        raise ValueError(f"{model.name} is not a decoder with an output head; it cannot generate")
    tokens, ids = model.tokenize(text)
    attentions, inputs, logits, cache = llama.step(model.config, model.weights, ids)
    prompt = Run(model, text, tokens, ids, attentions, inputs, logits)
    return Decoding(prompt, (), (), logits[-1], cache)

"""Decoding: a prompt and the tokens generated after it so far, continued one token per call.

Decoding.extend is the one decode step (choose a token, feed it against the cache) and its one
seeding rule: step n draws with a generator seeded by (seed, n). Model.generate and
`python -m scratch.models --generate` repeat it (`generate`, a Generation); the window's Generate
calls it once per click, so a seeded sample is the same text in the API, the CLI and the window.
Each call feeds one token against the cached rotated keys and values, so the cache grows by one
token per call; the attention of the newest token over the cache is kept, row by row, and the
assembled (S, S) weights equal a full run's (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scratch.models.run import Run, token_name, top_tokens


@dataclass(frozen=True)
class Decoding:
    """A prompt's run, the new tokens so far, and the cache and logits to continue from."""

    prompt: Run
    ids: tuple[int, ...]  # the new tokens' ids, in order
    rows: tuple = field(repr=False)  # new token i: (layers, heads, T + i + 1), its row of weights
    logits: np.ndarray = field(repr=False)  # (vocab,): the logits the next token is chosen from
    cache: object = field(repr=False)  # numpy_llama.Cache: rotated keys and values so far
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
        return Run(
            model, text, tokens, ids, *model.family_record.forward(model.config, model.weights, ids)
        )

    def next_tokens(self, k: int = 10) -> list[tuple[str, float]]:
        """The k likeliest next tokens and their probabilities (largest first)."""
        return top_tokens(self.prompt.model.tokenizer, self.logits, k)

    def extend(self, temperature: float = 0.0, seed: int | None = None) -> Decoding:
        """One more token: the likeliest (temperature 0) or a draw from softmax(logits / t) with
        a generator seeded by (seed, step), so a step's draw does not depend on earlier calls."""
        check_sampling(temperature, seed)
        model = self.prompt.model
        if self.length >= model.max_positions:
            raise ValueError(f"{model.name} has no position after {model.max_positions} tokens")
        new = choose(self.logits, temperature, step_rng(seed, len(self.ids)))
        step = model.family_record.step
        attentions, _, logits, cache = step(model.config, model.weights, [new], self.cache)
        row = attentions[:, :, 0, :]  # (layers, heads, S + 1): the new token over the cache
        shifted = np.exp(self.logits - self.logits.max())  # (vocab,)
        chance = float(shifted[new] / shifted.sum())
        ids, rows, chances = (*self.ids, new), (*self.rows, row), (*self.chances, chance)
        return Decoding(self.prompt, ids, rows, logits[-1], cache, chances)


def start(model: object, text: str) -> Decoding:
    """The prompt run once, its cache kept: a Decoding with no new token yet.

    Args:
        model: a decoder Model (SmolLM2, a Llama or Qwen2 family .gguf).
        text: the prompt.

    Returns:
        The Decoding to add tokens to, one step at a time with the key/value cache.
    """
    check_decoder(model)
    tokens, ids = model.tokenize(text)
    attentions, inputs, logits, cache = model.family_record.step(model.config, model.weights, ids)
    prompt = Run(model, text, tokens, ids, attentions, inputs, logits)
    return Decoding(prompt, (), (), logits[-1], cache)


@dataclass(frozen=True)
class Generation:
    """A prompt's run and the tokens added after it, with each step's attention and logits."""

    prompt: object  # the Run of the prompt (its attentions, logits, trace)
    ids: list[int]  # the new tokens' ids
    tokens: list[str]  # the new tokens, decoded one by one
    attentions: list = field(repr=False)  # step i: (layers, heads, S_i) over every token so far
    logits: list = field(repr=False)  # step i: (vocab,) the logits the token was chosen from

    @property
    def text(self) -> str:
        """The new text (the tokens decoded together)."""
        return self.prompt.model.tokenizer.decode(self.ids)


def generate(
    model: object, text: str, max_new_tokens: int, temperature: float, seed: int | None
) -> Generation:
    """Greedy (temperature 0) or sampled tokens after `text`: max_new_tokens Decoding.extend
    steps after the prompt, step n seeded by (seed, n)."""
    check_decoder(model)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens: expected an int, found {type(max_new_tokens).__name__}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected a whole number >= 1, found {max_new_tokens}")
    check_sampling(temperature, seed)
    _, ids = model.tokenize(text)
    if len(ids) + max_new_tokens > model.max_positions:
        raise ValueError(
            f"max_new_tokens: {len(ids)} prompt tokens + {max_new_tokens} exceed "
            f"{model.name}'s {model.max_positions} positions"
        )
    decoding, rows = start(model, text), []
    for _ in range(max_new_tokens):
        rows.append(decoding.logits)  # (vocab,): what the next token is chosen from
        decoding = decoding.extend(temperature, seed)
    words = [token_name(model.tokenizer, i) for i in decoding.ids]
    return Generation(decoding.prompt, list(decoding.ids), words, list(decoding.rows), rows)


def check_decoder(model: object) -> None:
    """ValueError unless `model` is a decoder (Model.decoder: an output head to generate with)."""
    if not model.decoder:
        raise ValueError(f"{model.name} is not a decoder with an output head; it cannot generate")


def check_sampling(temperature: object, seed: object) -> None:
    """temperature a finite number >= 0, seed None or an int; else ValueError/TypeError."""
    ok = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not ok or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature: expected a finite number >= 0, found {temperature!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed: expected None or an int, found {type(seed).__name__} {seed!r}")


def step_rng(seed: int | None, step: int) -> np.random.Generator:
    """The generator new token `step` (0 first) draws with: seeded by (seed, step), so a step's
    draw depends on neither earlier calls nor who makes them; fresh entropy when seed is None."""
    return np.random.default_rng(None if seed is None else [seed, step])


def choose(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """argmax at temperature 0 (the first of ties), else a draw from softmax(logits / t)."""
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = (logits - logits.max()) / temperature
    probs = np.exp(scaled)
    return int(rng.choice(len(probs), p=probs / probs.sum()))

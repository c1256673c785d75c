"""Text generation with a key/value cache: the prompt once, then one token per step."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .run import Run, token_name


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
    """Greedy (temperature 0) or sampled tokens after `text`; each step feeds one token."""
    from . import llama

    if model.family != "llama":
        raise ValueError(f"{model.name} is not a decoder with an output head; it cannot generate")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens: expected an int, found {type(max_new_tokens).__name__}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected a whole number >= 1, found {max_new_tokens}")
    check_sampling(temperature, seed)
    tokens, ids = model.tokenize(text)
    if len(ids) + max_new_tokens > model.max_positions:
        raise ValueError(
            f"max_new_tokens: {len(ids)} prompt tokens + {max_new_tokens} exceed "
            f"{model.name}'s {model.max_positions} positions"
        )

    rng = np.random.default_rng(seed)
    attentions, inputs, logits, cache = llama.step(model.config, model.weights, ids)
    prompt = Run(model, text, tokens, ids, attentions, inputs, logits)
    row = logits[-1]
    new, steps, rows = [], [], []
    for _ in range(max_new_tokens):
        rows.append(row)
        new.append(choose(row, temperature, rng))
        attentions, _, logits, cache = llama.step(model.config, model.weights, new[-1:], cache)
        steps.append(attentions[:, :, 0, :])  # (layers, heads, S): the newest token's row
        row = logits[-1]
    words = [token_name(model.tokenizer, i) for i in new]
    return Generation(prompt, new, words, steps, rows)


def check_sampling(temperature: object, seed: object) -> None:
    """temperature a finite number >= 0, seed None or an int; else ValueError/TypeError."""
    ok = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not ok or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature: expected a finite number >= 0, found {temperature!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed: expected None or an int, found {type(seed).__name__} {seed!r}")


def choose(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """argmax at temperature 0 (the first of ties), else a draw from softmax(logits / t)."""
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = (logits - logits.max()) / temperature
    probs = np.exp(scaled)
    return int(rng.choice(len(probs), p=probs / probs.sum()))

"""Text generation with a key/value cache: the prompt once, then one token per step.

The steps are Decoding.extend's (scratch.models.decoding: the one decode step and its seeding
rule), so Model.generate, `python -m scratch.models --generate` and the window's Generate agree
token for token at any seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .decoding import check_decoder, check_sampling, choose, start
from .run import token_name

__all__ = ["Generation", "check_sampling", "choose", "generate"]


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

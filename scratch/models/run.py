"""Run: one text through one model (tokens, every head's weights, the decoder's logits)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

AGREEMENT = 1e-9  # the ground truth's weights of a head vs the NumPy forward's (float64 both)


@dataclass(frozen=True)
class Run:
    """One text through one model: tokens and the attention weights of every head.

    Attributes:
        model: the scratch.models.Model it ran on.
        text: the text.
        tokens: its T tokens as text.
        ids: their T ids.
        attentions: every head's weights (layers, heads, T, T), float64.
        inputs: per layer, the attention block's input x (T, d_model).
        logits: a decoder's next-token logits (T, vocab); None for an encoder.
    """

    model: object  # the scratch.models.Model it ran on (run sits below model: no import of it)
    text: str
    tokens: list[str]
    ids: list[int]
    attentions: np.ndarray = field(repr=False)  # (layers, heads, T, T), float64
    inputs: list = field(repr=False)  # per layer: the attention block's input x (T, d_model)
    logits: np.ndarray | None = field(default=None, repr=False)  # (T, vocab): decoders' head

    def _repr_html_(self) -> str:
        """Jupyter shows a run as its first and last layers' weights (scratch.trace.html_view)."""
        from scratch.trace.html_view import run_html

        return run_html(self)

    def next_tokens(self, k: int = 10) -> list[tuple[str, float]]:
        """The k likeliest tokens after the text, with their probabilities (largest first).

        Args:
            k: how many tokens.
        """
        if self.logits is None:
            raise ValueError(f"{self.model.name} has no output head: it predicts no next token")
        return top_tokens(self.model.tokenizer, self.logits[-1], k)

    def trace(self, layer: int, head: int) -> object:
        """The ground truth's Trace of one head: x is the layer's attention input, W its columns.

        The pure-Python ground truth recomputes the head from x and the head's w_q, w_k, w_v
        and biases; its weights must agree with the NumPy forward's to AGREEMENT, else this
        raises (a mismatch would be a bug in one of them).

        Args:
            layer: the layer, 0 to layers - 1.
            head: the head, 0 to heads - 1.
        """
        from scratch.trace.forward import trace_attention

        if self.model.decoder:  # rotary positions sit between projection and scores
            self.model.check_head(layer, head)
            trace = self.model.family_record.module().ground_truth(self, layer, head)
            return self._agree(trace, layer, head)
        p = self.model.head_projections(layer, head)  # w_q, w_k, w_v, b_q, b_k, b_v
        trace = trace_attention(
            self.inputs[layer].tolist(),
            **{name: m.tolist() for name, m in p.items()},
            tokens=self.tokens,
            is_causal=self.model.causal,
            scale=self.model.scale(layer),
        )
        return self._agree(trace, layer, head)

    def _agree(self, trace: object, layer: int, head: int) -> object:
        """The trace, if its weights agree with the NumPy forward's to AGREEMENT; else raise."""
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

        Args:
            threshold: the least average weight (0 to 1) that makes a head a token's sink.
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


def top_tokens(tokenizer: object, logits: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The k likeliest tokens of one row of logits (vocab,) and their softmax probabilities."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected a whole number >= 1, found {k!r}")
    shifted = np.exp(logits - logits.max())
    probs = shifted / shifted.sum()  # (vocab,)
    best = np.argsort(-probs, kind="stable")[:k]
    return [(token_name(tokenizer, int(i)), float(probs[i])) for i in best]


def token_name(tokenizer: object, i: int) -> str:
    """Token i as text; a special token by its name ('<|im_end|>'), which decode drops.

    Args:
        tokenizer: a tokenizers.Tokenizer (a Model's `.tokenizer`).
        i: the token's id.

    Returns:
        The token's text, or "" for an id with none.
    """
    return tokenizer.decode([i], skip_special_tokens=False) or tokenizer.id_to_token(i) or ""

"""A special token among the likeliest next tokens shows its name ('<|im_end|>'), in the
terminal's list and on the window's bars, never an empty label; other tokens decode as text."""

from __future__ import annotations

import numpy as np
import pytest

from scratch.models.run import top_tokens

tokenizers = pytest.importorskip("tokenizers")


def _tokenizer():
    """A word-level tokenizer with two special tokens, as SmolLM2's '<|im_end|>' (id 2)."""
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2, "Paris": 3, "is": 4, ".": 5}
    t = tokenizers.Tokenizer(WordLevel(words, unk_token="[UNK]"))
    t.pre_tokenizer = Whitespace()
    specials = ("<|im_start|>", "<|im_end|>")
    t.add_special_tokens([tokenizers.AddedToken(w, special=True) for w in specials])
    return t, words


@pytest.mark.parametrize("seed", range(4))
def test_the_likeliest_tokens_are_named_and_their_probabilities_are_softmax(seed):
    tok, words = _tokenizer()
    logits = np.random.default_rng(seed).normal(size=len(words))
    top = top_tokens(tok, logits, len(words))
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    order = np.argsort(-probs, kind="stable")
    names = {i: w for w, i in words.items()}
    assert [t for t, _ in top] == [names[int(i)] for i in order]  # '<|im_end|>', not ''
    np.testing.assert_allclose([p for _, p in top], probs[order], rtol=1e-12)


def test_the_bars_label_a_special_token_by_its_name(qtbot):
    pytest.importorskip("PyQt6")
    from gui.widgets.next_token_bars import NextTokenBars

    tok, words = _tokenizer()
    logits = np.zeros(len(words))
    logits[words["<|im_end|>"]] = 3.0
    bars = NextTokenBars()
    qtbot.addWidget(bars)
    top = top_tokens(tok, logits, 3)
    bars.set_tokens(top, "after 'Paris .'")
    ticks = bars.getPlotItem().getAxis("left")._tickLevels[0]
    assert [label for _, label in ticks] == ["<|im_end|>", "[UNK]", "<|im_start|>"]

"""What the tiny transformer learns: four tasks, each a batch maker and a probe.

A batch is next-token prediction: `inputs` (B, T) and `targets` (B, T) = the sequence shifted by
one, and `scored` (T,) marks the positions whose target can be predicted from what came before
(the loss on them is the curve that shows the phase change).

- induction: random tokens, then the same tokens again. The second half is predictable only by
  finding where the current token was before and copying what followed it: a previous-token head
  in layer 1 composed with an induction head in layer 2 (Elhage et al. 2021, Olsson et al. 2022).
- copying: random tokens, a separator, the same tokens. Predictable by position alone (look
  n + 1 places back): one layer with learned positions learns it, no composition needed; the
  contrast with induction shows what a content-based head adds.
- sorting: distinct random tokens, a separator, the same tokens sorted. Predictable by content
  (find the smallest token larger than the current one): attention that reads values, not
  positions.
- text: windows of a user's own text file, character level; every position scored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from scratch.ops.validate import check_choice

TASKS = ("induction", "copying", "sorting", "text")
MAX_TEXT_BYTES = 50_000_000  # a text file larger than this is refused (it is read whole)


@dataclass(frozen=True)
class Batch:
    """inputs (B, T) int, targets (B, T) int, scored (T,) bool."""

    inputs: np.ndarray
    targets: np.ndarray
    scored: np.ndarray


@dataclass(frozen=True)
class Task:
    """A task: its name, vocabulary size, sequence length and how its batches are drawn."""

    name: str
    vocab: int
    length: int  # T, the inputs' length
    half: int  # n: the random part's length (the period of a repeat)
    text: np.ndarray | None = None  # the text task's characters as token ids
    alphabet: str = ""  # the text task's characters, id order

    def batch(self, rng: np.random.Generator, size: int) -> Batch:
        """`size` sequences of this task drawn from rng."""
        if self.name == "text":
            starts = rng.integers(0, len(self.text) - self.length, size=size)  # (B,)
            seq = self.text[starts[:, None] + np.arange(self.length + 1)]  # (B, T + 1)
            return Batch(seq[:, :-1], seq[:, 1:], np.ones(self.length, dtype=bool))
        n, sep = self.half, self.vocab - 1
        if self.name == "induction":
            part = rng.integers(0, self.vocab, size=(size, n))  # (B, n)
            seq = np.concatenate([part, part], axis=1)  # (B, 2n)
            first_scored = n  # target at input index t is seq[t + 1]: from t = n it repeats
        elif self.name == "copying":
            part = rng.integers(0, sep, size=(size, n))  # tokens below the separator
            seq = np.concatenate([part, np.full((size, 1), sep), part], axis=1)  # (B, 2n + 1)
            first_scored = n  # the token after the separator is the first copied one
        else:  # sorting: n distinct tokens, then sorted
            part = np.argsort(rng.random((size, sep)), axis=1)[:, :n]  # (B, n) distinct
            seq = np.concatenate([part, np.full((size, 1), sep), np.sort(part, axis=1)], axis=1)
            first_scored = n
        inputs, targets = seq[:, :-1], seq[:, 1:]
        scored = np.arange(inputs.shape[1]) >= first_scored
        return Batch(np.ascontiguousarray(inputs), np.ascontiguousarray(targets), scored)

    def probe(self, seed: int = 1234) -> Batch:
        """One fixed sequence of this task, the same at every step (the heads are drawn on it)."""
        return self.batch(np.random.default_rng(seed), 1)

    @property
    def period(self) -> int | None:
        """How far back a token's earlier copy sits (None when the task does not repeat)."""
        return {"induction": self.half, "copying": self.half + 1}.get(self.name)

    def label(self, token: int) -> str:
        """A token's name on screen: its character (text), 'sep', or its number."""
        if self.name == "text":
            ch = self.alphabet[token]
            return {"\n": "\\n", " ": "␣", "\t": "\\t"}.get(ch, ch)
        if self.name != "induction" and token == self.vocab - 1:
            return "sep"
        return str(token)


def make_task(name: str, *, vocab: int = 32, half: int = 24, text_path: str | None = None,
              context: int = 48) -> Task:  # fmt: skip
    """The task `name`: induction / copying / sorting with `half` random tokens, or text from
    `text_path` in windows of `context` characters."""
    check_choice(name, "task", TASKS)
    if name == "text":
        return _text_task(text_path, context)
    if text_path is not None:
        raise ValueError(f"text_path: only the text task reads a file, found task {name!r}")
    if not isinstance(half, int) or half < 2:
        raise ValueError(f"half: expected an int >= 2 (random tokens per sequence), found {half!r}")
    if name == "sorting" and vocab - 1 < half:
        raise ValueError(
            f"vocab: sorting needs at least half + 1 = {half + 1} tokens (distinct tokens and a "
            f"separator), found {vocab}"
        )
    if vocab < 3:
        raise ValueError(f"vocab: expected at least 3 tokens, found {vocab}")
    length = 2 * half - 1 if name == "induction" else 2 * half
    return Task(name, vocab, length, half)


def _text_task(path: str | None, context: int) -> Task:
    """Character-level windows of a text file (refused with a message when unreadable)."""
    if path is None:
        raise ValueError("text_path: the text task needs a text file (text_path=...)")
    try:
        size = os.path.getsize(path)
        if size > MAX_TEXT_BYTES:
            raise ValueError(f"text_path: {path} has {size} bytes, more than {MAX_TEXT_BYTES}")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"text_path: {path} is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ValueError(f"text_path: cannot read {path} ({exc.strerror})") from None
    if len(text) < context + 2:
        raise ValueError(
            f"text_path: {path} has {len(text)} characters; a window needs {context + 2}"
        )
    alphabet = "".join(sorted(set(text)))
    ids = {ch: i for i, ch in enumerate(alphabet)}
    tokens = np.fromiter((ids[ch] for ch in text), dtype=np.int64, count=len(text))
    return Task("text", len(alphabet), context, context, tokens, alphabet)


__all__ = ["Batch", "TASKS", "Task", "make_task"]

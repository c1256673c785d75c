"""The row a sentence is about (gui.present.sentences), and the numbers the sentence then states,
read back against the matrix: the row chosen is the rule's row by its definition (ties, -inf and
nan included), its best and worst keys and their values are the row's, and the mask count is the
count of -inf cells."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from gui.present import sentences
from gui.present.sentences import NOTABLE


def matrix(seed: int) -> np.ndarray:
    """A (L, S) matrix with ties, -inf cells, a fully masked row now and then, a nan cell."""
    rng = np.random.default_rng(seed)
    L, S = rng.integers(2, 9), rng.integers(2, 9)
    m = np.round(rng.uniform(-2, 2, (L, S)) * 2) / 2  # (L, S): halves, so ties are common
    m[rng.random((L, S)) < 0.25] = -np.inf
    if seed % 3 == 0:
        m[rng.integers(L)] = -np.inf
    if seed % 4 == 1:
        m[rng.integers(L), rng.integers(S)] = np.nan
    return m


def weights_like(seed: int) -> np.ndarray:
    """Rows of softmax weights (some rows one-hot, some below NOTABLE but one)."""
    rng = np.random.default_rng(seed)
    m = matrix(seed) * rng.choice([1.0, 8.0])
    with np.errstate(invalid="ignore"):
        m = np.nan_to_num(m, nan=-np.inf)
        top = np.max(m, axis=1, keepdims=True, initial=-np.inf)
        e = np.exp(np.where(np.isfinite(top), m - top, -np.inf))
        return np.nan_to_num(e / e.sum(axis=1, keepdims=True))


def most_decided(m: np.ndarray, rows: list[int]) -> int:
    """By the definition: among `rows`, the first whose largest finite entry is highest."""
    best, top = None, -math.inf
    for i in rows:
        finite = [float(v) for v in m[i] if math.isfinite(v)]
        if finite and max(finite) > top:
            best, top = i, max(finite)
    return rows[0] if best is None else best


@pytest.mark.parametrize("seed", range(24))
def test_the_sentences_row_is_the_rules_row_by_its_definition(seed):
    m = matrix(seed)
    assert sentences.sharpest_row(m) == most_decided(m, list(range(len(m))))
    w = weights_like(seed)
    mixed = [i for i in range(len(w)) if sum(1 for v in w[i] if v >= NOTABLE) >= 2]
    want = most_decided(w, mixed) if mixed else most_decided(w, list(range(len(w))))
    assert sentences.teaching_row(w) == want, (w, mixed)


@pytest.mark.parametrize("seed", range(24))
def test_the_match_sentence_states_the_rows_best_and_least_keys(seed):
    m = matrix(seed)
    L, S = m.shape
    rows, cols = [f"q{i}" for i in range(L)], [f"k{j}" for j in range(S)]
    i = sentences.sharpest_row(m)
    text = sentences.describe("match", [m[i].tolist()], [rows[i]], cols, 0)
    finite = np.isfinite(m[i])
    if not finite.any():
        assert text == ""  # nothing to say about a fully masked row
        return
    value = r"\(([^,)]+)(?:, tied with (\d+) other keys?)?\)"
    said = re.fullmatch(rf"'(q\d+)' matches '(k\d+)' best {value} and '(k\d+)' least {value}\.",
                        text)  # fmt: skip
    assert said, text
    who, best, best_v, best_ties, least, least_v, least_ties = said.groups()
    assert who == rows[i]
    row = np.where(finite, m[i], np.nan)
    b, le = int(best[1:]), int(least[1:])
    assert m[i, b] == np.nanmax(row) and m[i, le] == np.nanmin(row), (text, m[i])
    assert float(best_v) == pytest.approx(np.nanmax(row), abs=0.005)
    assert float(least_v) == pytest.approx(np.nanmin(row), abs=0.005)
    # a key named alone is alone with its value; else the count of the others is said
    assert int(best_ties or 0) == np.count_nonzero(row == np.nanmax(row)) - 1, (text, m[i])
    assert int(least_ties or 0) == np.count_nonzero(row == np.nanmin(row)) - 1, (text, m[i])


@pytest.mark.parametrize("seed", range(12))
def test_the_mask_sentence_counts_the_minus_inf_cells(seed):
    m = matrix(seed)
    text = sentences.mask_sentence(int(np.count_nonzero(np.isneginf(m))), m.size)
    hidden = int(np.isneginf(m).sum())
    if hidden == 0:
        assert text.startswith("Nothing is masked")
    else:
        n, total = map(int, re.match(r"(\d+) of (\d+) positions are masked", text).groups())
        assert (n, total) == (hidden, m.size)

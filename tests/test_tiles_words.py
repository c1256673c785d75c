"""The tiles page's sentence: which tile of how many, its keys, and its distance to the exact
output, each read back and compared with the walk's own tiles and an independent softmax."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gui.views.tiles_view import tile_words
from scratch.learn.online_softmax import online_softmax


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("seed", range(5))
def test_the_tile_sentence_counts_the_tiles_and_names_their_keys(seed):
    rng = np.random.default_rng(seed)
    L, S, d = int(rng.integers(2, 6)), int(rng.integers(3, 12)), 3
    q, k, v = (rng.normal(size=shape) for shape in ((L, d), (S, d), (S, d)))
    block = int(rng.integers(1, S))
    walk = online_softmax(
        q.tolist(), k.tolist(), v.tolist(), scale=0.5, allowed=None, block=block, dtype="float64"
    )
    scores = 0.5 * q @ k.T
    exact = _softmax(scores) @ v
    count = -(-S // block)  # tiles of `block` keys cover S keys
    for t in range(count):
        said = tile_words(walk, t)
        found = re.fullmatch(
            r"tile (\d+) of (\d+) \(numbered 0\.\.(\d+)\): keys? (\d+)(?:\.\.(\d+))?; "
            r"max \|partial - exact\| (\S+)",
            said,
        )
        assert found, said
        index, of, last, start, stop, diff = found.groups()
        assert (int(index), int(of), int(last)) == (t, count, count - 1), said
        end = min(S, (t + 1) * block)
        assert (int(start), int(stop or start)) == (t * block, end - 1), said
        partial = _softmax(scores[:, :end]) @ v[:end]  # the keys walked so far
        want = np.max(np.abs(partial - exact))
        assert float(diff) == pytest.approx(want, rel=1e-3, abs=1e-12), said

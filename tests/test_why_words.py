"""The Why pages' words (gui.views.why_view on scratch.learn.why's numbers) read back against the
row they
describe, computed here with NumPy: variances, entropies, largest weights, the max, the shift,
the overflow limits, the three sums; and each claim holds on that row or is not made."""

from __future__ import annotations

import html
import math
import random
import re

import numpy as np
import pytest

pytest.importorskip("PyQt6")

from gui.present import learn_model  # noqa: E402
from gui.present.learn_model import head_inputs  # noqa: E402
from gui.views.why_view import mask_text, max_text, scale_text  # noqa: E402
from scratch import trace_attention  # noqa: E402

NUM = r"(-?inf|nan|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)"


def close(written: str, true: float) -> bool:
    """`written` is `true` in 4 significant digits (gui.present.learn_model.number)."""
    x = float(written)
    if not math.isfinite(true):
        return x == true or (math.isnan(x) and math.isnan(true))
    return abs(x - true) <= 5e-4 * abs(true) + 1e-300


def plain(text: str) -> str:
    """The page's rich text as words: tags out, table cells separated by '|'."""
    text = re.sub(r"</t[dh]>", "|", text)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def cells(text: str, first: str) -> list[str]:
    """The cells of the table row that starts with `first`."""
    row = re.search(r"<tr>(?:<t[dh][^>]*>)" + re.escape(first) + r"</t[dh]>(.*?)</tr>", text)
    return [plain(c).strip(" |") for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))]


def entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def softmax(row: np.ndarray) -> np.ndarray:
    e = np.exp(row - row[np.isfinite(row)].max())
    return e / e.sum()


def example(seed: int):
    """(HeadInputs, q, k, the mask or None) of a random example; d_k = 1 now and then."""
    rng = random.Random(seed)
    L, d_k = rng.randint(2, 6), rng.choice([1, 2, 4])
    x = [[rng.gauss(0, 1.5) for _ in range(d_k)] for _ in range(L)]
    causal = seed % 2 == 1
    trace = trace_attention(x, is_causal=causal)
    allowed = np.tril(np.ones((L, L), bool)) if causal else None
    return head_inputs(trace), np.array(x), allowed


@pytest.mark.parametrize("seed", range(8))
def test_the_scale_page_states_the_rows_numbers(seed):
    x, q, allowed = example(seed)
    L, d_k = q.shape
    scores = q @ q.T  # (L, d_k) @ (d_k, L) -> (L, L)
    seen = np.ones((L, L), bool) if allowed is None else allowed
    for row in range(L):
        w, _, _ = learn_model.why(
            x.scores.tolist(), x.scaled.tolist(), x.masked.tolist(), d_k, row, x.allowed_lists()
        )
        text = scale_text(w, x)
        words = plain(text)
        unscaled, scaled = re.search(
            rf"the variance is {NUM} without the scale and {NUM} with", words
        ).groups()
        assert close(unscaled, float(np.var(scores[seen]))), (words, np.var(scores[seen]))
        assert close(scaled, float(np.var(scores[seen] / math.sqrt(d_k)))), words
        plain_row = np.where(seen[row], scores[row], -np.inf)
        p0, p1 = softmax(plain_row), softmax(plain_row / math.sqrt(d_k))
        e0, e1 = cells(text, "entropy (nats; uniform = ln S = " + f"{math.log(L):.4g})")
        assert close(e0, entropy(p0)) and close(e1, entropy(p1)), (e0, e1)
        l0, l1 = cells(text, "largest weight")
        assert close(l0, p0.max()) and close(l1, p1.max()), (l0, l1)
        assert cells(text, "on key") == [x.key_tokens[int(np.argmax(p0))]] * 2
        # the claim: scaled, the row keeps more keys in play; only where it does
        spread = entropy(p1) > entropy(p0) + 1e-12
        assert ("scaled, the row keeps more keys in play" in words) == spread, words
        if not spread:  # and it says why not: a scale of 1, or one score on every visible key
            visible = scores[row][seen[row]]
            assert d_k == 1 or np.ptp(visible) == 0, (d_k, visible)
            assert "changes nothing" in words or "changes no weight" in words, words


@pytest.mark.parametrize("seed", range(8))
def test_the_softmax_page_states_the_rows_max_and_overflow(seed):
    x, q, allowed = example(seed)
    L, d_k = q.shape
    masked = q @ q.T / math.sqrt(d_k)
    if allowed is not None:
        masked = np.where(allowed, masked, -np.inf)
    row = seed % L
    _, w, _ = learn_model.why(
        x.scores.tolist(), x.scaled.tolist(), x.masked.tolist(), d_k, row, x.allowed_lists()
    )
    words = plain(max_text(w, x))
    top = masked[row][np.isfinite(masked[row])].max()
    assert close(re.search(rf"Row {row}, max {NUM}", words).group(1), top), words
    shift = re.search(rf"The same row plus {NUM} \(max 100;", words).group(1)
    assert close(shift, 100 - top), words
    limits = re.search(rf"overflows past {NUM} in float32 and past {NUM} in float16", words)
    for written, dtype in zip(limits.groups(), (np.float32, np.float16)):
        assert close(written, math.log(float(np.finfo(dtype).max))), words
    for key in range(L):  # each key's weight as the first table writes it
        row_cells = cells(max_text(w, x), x.key_tokens[key])
        assert close(row_cells[3], softmax(masked[row])[key]), (key, row_cells)


@pytest.mark.parametrize("seed", range(8))
def test_the_mask_page_states_the_three_sums_and_its_claim_holds(seed):
    x, q, allowed = example(seed)
    L, d_k = q.shape
    scaled = q @ q.T / math.sqrt(d_k)
    keep = np.tril(np.ones((L, L), bool)) if allowed is None else allowed  # the causal one shown
    for row in range(L):
        _, _, w = learn_model.why(
            x.scores.tolist(), x.scaled.tolist(), x.masked.tolist(), d_k, row, x.allowed_lists()
        )
        text = mask_text(w, x)
        before = softmax(np.where(keep[row], scaled[row], -np.inf))
        after = np.where(keep[row], softmax(scaled[row]), 0.0)
        zero = softmax(np.where(keep[row], scaled[row], 0.0))
        sums = cells(text, "<b>sum</b>")[1:]
        for written, true in zip(sums, (before.sum(), after.sum(), zero.sum())):
            assert close(written, float(true)), (sums, row)
        words = plain(text)
        claim = "Zeroing weights after softmax leaves a row that sums to less than 1"
        hides = not keep[row].all()
        assert (claim in words) == hides, (row, words)
        if not hides:  # every key seen: the page says the three agree, and they do
            assert f"Row {row} sees every key" in words, words
            assert np.allclose(before, after) and np.allclose(before, zero)
        else:
            assert float(after.sum()) < 1 - 1e-12  # the claim, on this row's numbers

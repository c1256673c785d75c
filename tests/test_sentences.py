"""The sentence under a step: where a query attends, what it matches, what the mask hides, what an
output mixes, how several heads combine."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

import scratch
from gui.present import sentences


def test_sentence_names_the_two_largest_weights():
    row = [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]  # seed 003, row 'journey'
    keys = ["Your", "journey", "starts", "with", "one", "step"]
    text = sentences.attention_sentence(row, "journey", keys)
    assert text == "'journey' attends most to 'journey' (0.24) and 'starts' (0.23)"


def test_a_runner_up_of_about_zero_is_left_out_and_weights_read_alike():
    text = sentences.attention_sentence([1.93e-22, 1.0], "q", ["k0", "k1"])
    assert text == "'q' attends almost only to 'k1' (1.00); every other key gets under 0.01"
    journey = sentences.attention_sentence(
        [0.1385, 0.2379, 0.2333, 0.1240], "journey", list("abcd")
    )
    assert journey == "'journey' attends most to 'b' (0.24) and 'c' (0.23)"


@pytest.mark.parametrize("seed", range(30))
def test_every_number_in_a_weights_sentence_has_two_decimals(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    raw = [rng.random() ** rng.choice([1, 8, 40]) for _ in range(n)]
    row = [v / sum(raw) for v in raw]
    text = sentences.attention_sentence(row, "q", [f"k{j}" for j in range(n)])
    shown = re.findall(r"\((\d[^) ]*)", text)
    assert shown and all(re.fullmatch(r"\d\.\d\d", v) for v in shown), text
    assert "e-" not in text


def test_sentences_for_masked_rows_and_uniform_rows():
    assert "nothing" in sentences.attention_sentence([0.0, 0.0], "a", ["x", "y"])
    assert "NaN" in sentences.attention_sentence([math.nan, math.nan], "a", ["x", "y"])
    assert "equally" in sentences.attention_sentence([0.25] * 4, "a", list("wxyz"))
    masked = [[0.0, -math.inf], [1.0, 2.0]]
    assert sentences.describe("mask", masked, ["a", "b"], ["x", "y"]).startswith("1 of 4")
    for row in ([0.0, 0.0], [math.nan, math.nan], [0.5, 0.5]):  # one full stop, not two
        text = sentences.describe("attention", [row], ["a"], ["x", "y"])
        assert text.endswith(".") and not text.endswith(".."), text
        text = sentences.describe("mix", [[1.0]], ["a"], ["x", "y"], weights=[row])
        assert text.endswith(".") and not text.endswith(".."), text


def test_under_a_causal_mask_the_sentence_picks_a_row_that_teaches():
    weights = [[1.0, 0.0, 0.0], [0.3, 0.7, 0.0], [0.2, 0.3, 0.5]]
    hidden = [[False, True, True], [False, False, True], [False, False, False]]
    tokens = ["Your", "journey", "starts"]
    text = sentences.describe("attention", weights, tokens, tokens, hidden=hidden)
    assert text == "'journey' attends most to 'journey' (0.70) and 'Your' (0.30)."
    first = sentences.describe("attention", weights, tokens, tokens, row=0, hidden=hidden)
    assert first.startswith("'Your' may see only 'Your' (the mask hides the other keys)")
    assert sentences.teaching_row([[1.0, 0.0], [1.0, 0.0]]) == 0  # nothing better: sharpest


def test_output_sentence_with_several_heads_says_how_they_combine():
    out = [[0.1, 0.2, 0.3, 0.4]]
    text = sentences.describe("heads", out, ["a"], list("wxyz"), heads=2, w_o=True)
    assert (
        text == "Each query's output row is the 2 heads' outputs side by side "
        "(step head_outputs), then @ W_o."
    )
    assert sentences.describe("heads", out, ["a"], list("wxyz"), heads=2).endswith("outputs).")
    one_head = sentences.describe("mix", out, ["a"], list("xy"), weights=[[0.8, 0.2]])
    assert "takes its output mostly from" in one_head


def test_the_registry_s_sentence_kinds_are_exactly_those_describe_knows():
    """Every kind a registry entry names has its own sentence; no other kind has one."""
    from scratch.trace.steps import STEPS

    assert {spec.sentence for spec in STEPS} - {""} == set(sentences.KINDS)
    m, rows, cols = [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], ["a", "b"], ["x", "y", "z"]
    said = {
        kind: sentences.describe(kind, m, rows, cols, weights=m, heads=2 if kind == "heads" else 1)
        for kind in sentences.KINDS
    }
    assert said == {
        "attention": "'a' attends most to 'x' (0.70) and 'y' (0.20).",
        "match": "'a' matches 'x' best (0.70) and 'z' least (0.10).",
        "mask": "Nothing is masked: every query may attend every key.",
        "mix": "'a' takes its output mostly from the values of 'x' (0.70) and 'y' (0.20).",
        "heads": "Each query's output row is the 2 heads' outputs side by side "
        "(step head_outputs).",
    }
    for other in ("", "weights", "scores", "output"):  # a step's name is not a kind
        assert sentences.describe(other, m, rows, cols, weights=m) == "", other


def test_each_step_gets_the_sentence_of_its_kind():
    """The kinds the registry gives the forward steps: weights say where a query attends,
    scores and scaled its best and worst match, masked how much is hidden, an output what it
    mixes, several heads how they combine; nothing else gets a sentence."""
    from scratch.trace.steps import call_of, steps_of

    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(3, 4)).round(3).tolist(), {}
    for n in ("w_q", "w_k", "w_v", "w_o"):
        w[n] = rng.normal(size=(4, 4)).round(3).tolist()
    calls = [
        scratch.trace_attention(x, is_causal=True),
        scratch.trace_attention(x, w_q=w["w_q"], w_k=w["w_k"], w_v=w["w_v"], num_heads=2),
        scratch.trace_attention(x, **w, num_heads=2),
    ]
    kinds = [[(s.name, s.number, s.sentence) for s in steps_of(call_of(t)) if s.sentence]
             for t in calls]  # fmt: skip
    forward = [("scores", 2, "match"), ("scaled", 3, "match"), ("masked", 4, "mask"),
               ("weights", 5, "attention")]  # fmt: skip
    assert kinds == [
        forward + [("output", 6, "mix")],
        forward + [("head_outputs", 6, "mix"), ("output", 7, "heads")],
        forward + [("head_outputs", 6, "mix"), ("output", 8, "heads")],
    ]


def test_a_long_row_with_a_small_top_weight_is_not_called_almost_only():
    """512 keys: 0.012 on one, about 0.002 on the rest: "most", not "almost only"."""
    row = [0.012] + [0.988 / 511] * 511
    keys = [f"t{j}" for j in range(512)]
    said = sentences.attention_sentence(row, "t418", keys)
    assert said == "'t418' attends most to 't0' (0.01); no other key gets 0.01 or more"
    majority = sentences.attention_sentence([0.995, 0.004, 0.001], "a", ["a", "b", "c"])
    assert "almost only to 'a' (0.99)" in majority  # (0.995 rounds to even: 0.99)


def test_equal_small_weights_keep_their_digits_and_nan_rows_say_why():
    row = [1 / 4096] * 4096
    said = sentences.attention_sentence(row, "t0", [f"t{j}" for j in range(4096)])
    assert said == "'t0' attends to all 4096 keys about equally (0.00024 each)"
    nan, say = float("nan"), sentences.attention_sentence
    assert "every key is masked" in say([nan] * 3, "a", "abc", hidden=[True] * 3)
    assert "not all finite" in say([nan] * 3, "a", "abc", hidden=[False] * 3)


def _long_row(rng: np.random.Generator, n: int) -> np.ndarray:
    """A softmax row over n keys: most scores 0 (like journey padded with zeros), a few not."""
    scores = np.zeros(n)
    few = rng.choice(n, size=int(rng.integers(1, 8)), replace=False)
    scores[few] = rng.uniform(-1.0, 1.0, size=few.size) * rng.choice([0.04, 1.6])  # 0.04: equal
    weights = np.exp(scores - scores.max())
    return weights / weights.sum()


@pytest.mark.parametrize("seed", range(12))
def test_about_equally_is_said_only_when_the_weights_are_within_the_stated_ratio(seed):
    """'about equally' iff max <= EQUAL_RATIO * min; else a long row of small weights states the
    real spread: its largest and smallest weight and how many keys lie near each, read back from
    the sentence and compared with the row itself."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([300, 1024, 4096]))
    row = _long_row(rng, n)
    keys = [f"t{j}" for j in range(n)]
    text = sentences.attention_sentence(row.tolist(), "journey", keys)
    hi, lo = row.max(), row.min()
    equal = hi <= sentences.EQUAL_RATIO * lo
    assert ("about equally" in text) == equal, text
    if equal:
        ends = re.fullmatch(r".*\(([\d.e-]+)(?: to ([\d.e-]+))? each\)", text).groups()
        said = [float(v) for v in ends if v is not None]  # lo and hi, or one number for both
        assert abs(said[0] - lo) <= 0.05 * lo and abs(said[-1] - hi) <= 0.05 * hi, text
        return
    found = re.fullmatch(
        r"'journey' spreads its weight over (\d+) keys unequally: largest ([\d.e-]+) "
        r"\((?:'t(\d+)'|(\d+) keys within 10% of it)\), smallest ([\d.e-]+) "
        r"\((\d+) keys? within 10% of it\)",
        text,
    )
    assert found, text
    count, big, top_key, near_hi, small, near_lo = found.groups()
    assert int(count) == n
    assert abs(float(big) - hi) <= 0.05 * hi and abs(float(small) - lo) <= 0.05 * lo, text
    assert int(near_lo) == int(np.sum(row <= lo * 1.1)), text
    if top_key is not None:
        assert int(top_key) == int(np.argmax(row)) and np.sum(row * 1.1 >= hi) == 1
    else:
        assert int(near_hi) == int(np.sum(row * 1.1 >= hi)), text


def test_the_4096_token_journey_row_is_not_called_equal():
    """The issue's row: 4090 weights of 0.000243 and a largest of 0.001085 (4.5 times as much)."""
    row = np.full(4096, 1.0)
    row[:6] = [2.0, 4.46, 1.5, 1.2, 1.3, 3.0]
    row /= row.sum()
    text = sentences.attention_sentence(row.tolist(), "journey", [f"t{j}" for j in range(4096)])
    assert "about equally" not in text and "0.0011 each" not in text
    assert f"largest {row.max():.2g} ('t1')" in text
    assert f"smallest {row.min():.2g} ({np.sum(row <= row.min() * 1.1)} keys" in text
    mix = sentences.describe("mix", [[0.0]], ["journey"], [f"t{j}" for j in range(4096)],
                             weights=[row.tolist()])  # fmt: skip
    assert mix.startswith("'journey' mixes the values of 4096 keys unequally"), mix

"""The checker's one diagnosis engine (scratch/checker/mistake.py) and the one planted backward.

The engine: each Mistake record is planted once per case, a record the case cannot show is left
out, a name is given only when the matches say one thing. The planted backward
(backward_reference.textbook with a mistake key) is the correct backward when nothing is
planted, and every planted mistake it makes is told apart from the truth."""

import numpy as np
import pytest

from scratch import scaled_dot_product_attention_backward
from scratch.checker import ignored
from scratch.checker.backward_diagnosis import FA2, MISTAKES
from scratch.checker.backward_reference import BLOCKS, textbook
from scratch.checker.mistake import Mistake, matches, named, one, outputs
from scratch.checker.reference import Problem, causal


def test_outputs_plants_each_record_once_and_leaves_out_what_cannot_show():
    calls = []

    def run(plant):
        calls.append(plant)
        if plant == "raises":
            raise ValueError("this case cannot show it")
        return None if plant == "none" else np.full(2, plant)

    catalogue = [Mistake("a", 1.0), Mistake("b", "raises"), Mistake("c", "none"), Mistake("d", 3.0)]
    memo: dict = {}
    made = outputs(memo, "key", lambda: catalogue, run)
    assert [name for name, _ in made] == ["a", "d"]
    assert outputs(memo, "key", lambda: catalogue, run) is made  # made once per case
    assert calls == [1.0, "raises", "none", 3.0]


def test_named_gives_a_name_only_when_the_matches_say_one_thing():
    truth, bound = np.zeros(3), np.full(3, 1e-6)
    wrong, other = np.array([1.0, 0.0, 0.0]), np.array([0.0, 2.0, 0.0])
    made = [("wrong", wrong), ("other", other), ("same", wrong.copy())]
    assert matches(wrong, made, truth, bound) == {"wrong", "same"}
    assert named(other, made, truth, bound, pick=one) == "other"
    assert named(wrong, made, truth, bound, pick=one) is None  # two names alike: none
    assert named(truth + 0.5, made, truth, bound) is None  # lands on none
    keyword = [("wrong", wrong), (ignored.SCALE, wrong.copy())]  # ignored.pick prefers it
    assert named(wrong, keyword, truth, bound) == ignored.SCALE


def problem(seed: int, mask: bool) -> tuple[Problem, np.ndarray, list]:
    """A causal (or unmasked) float64 problem of 2 heads, L = S = 40, and its dO."""
    rng = np.random.default_rng(seed)
    q, k, v, dO = (rng.normal(size=(2, 40, 8)) for _ in range(4))
    allowed = causal(40, 40, 0) if mask else None
    truth = scaled_dot_product_attention_backward(
        q.tolist(), k.tolist(), v.tolist(), dO.tolist(), is_causal=mask
    )
    return Problem(q, k, v, 8**-0.5, allowed, None, False), dO, truth


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mask", [False, True])
def test_planted_backward_is_the_truth_unplanted_and_each_mistake_is_told_apart(seed, mask):
    p, dO, truth = problem(seed, mask)
    right = textbook(p, dO, None, "float64")
    for got, want, name in zip(right, truth, ("dq", "dk", "dv")):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-11, atol=1e-12, err_msg=name)
    same, shown = set(), 0
    for key in (MISTAKES | FA2).keys() - {"nan_rows"}:
        for block in BLOCKS:
            grads = textbook(p, dO, None, "float64", mistake=key, block=block)
            if grads is None:
                continue  # this case cannot show it (dropout, GQA, shapes)
            shown += 1
            if max(float(np.max(np.abs(g - r))) for g, r in zip(grads, right)) <= 1e-9:
                same.add(key)
    # without GQA heads or dropout those mistakes change nothing; without a mask, dropping it
    gqa_or_dropout = {"gqa_first_head", "gqa_mean", "gqa_interleaved", "dropout_dp",
                      "dropout_none", "dropout_unscaled"}  # fmt: skip
    assert same == gqa_or_dropout | (set() if mask else {"mask_dropped"})
    assert shown >= 40

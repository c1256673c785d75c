"""The bench's rows for issue 24 items 3 and 4, run at tiny sizes (no timing is judged here)."""

from __future__ import annotations

import random

import pytest

from scratch.backward.sdpa import backward_head
from scratch.bench.pure_backward import backward_contenders, python_backward_limit
from scratch.core.attention import Head


def _lists(seed: int, L: int, S: int, E: int, Ev: int) -> tuple[list, ...]:
    rng = random.Random(seed)
    shapes = ((L, E), (S, E), (S, Ev), (L, Ev))
    return tuple([[rng.gauss(0.0, 1.0) for _ in range(c)] for _ in range(r)] for r, c in shapes)


@pytest.mark.parametrize("seed", range(4))
def test_the_backward_limit_takes_exactly_the_ground_truths_sums(seed):
    """Each of the limit's products is, bit for bit, the sum the ground truth takes (before the
    scale it multiplies dQ and dK by): the limit times no more and no other work."""
    q, k, v, dO = _lists(seed, 5, 7, 4, 3)
    scale = 0.5
    head = backward_head(Head((), (), q, k, v, None), dO, scale)
    scores, output, row_dot, dP, dQ, dK, dV = python_backward_limit(
        q, k, v, dO, head.weights, head.grad_scores
    )
    truth = scratch_scores(q, k)
    assert scores == truth and output == head.output and row_dot == head.row_dot
    assert dP == head.grad_dropped and dV == head.grad_value
    assert [[scale * x for x in row] for row in dQ] == head.grad_query
    assert [[scale * x for x in row] for row in dK] == head.grad_key


def scratch_scores(q, k):
    """The forward's scores q @ k^T, from the ground truth's own steps."""
    from scratch.core.attention import attend

    return attend(q, k, [[0.0]] * len(k), 1.0).scores


def test_backward_rows_run_the_public_backward_and_the_limit():
    q, k, v, dO = _lists(9, 4, 4, 3, 2)
    rows = dict((name, fn) for name, fn, _ in backward_contenders(q, k, v, dO))
    import scratch

    assert rows["ground truth backward (scratch)"]() == (
        scratch.scaled_dot_product_attention_backward(q, k, v, dO)
    )
    assert len(rows["pure-Python backward kernel limit"]()) == 7


def test_checker_speed_lines_run_on_the_standard_cases():
    """checker_timing's machinery on the quick case set: info lines (the goal needs 'large')."""
    pytest.importorskip("numpy")
    from scratch.bench.checker_goal import checker_timing

    lines = checker_timing(1, cases="standard")
    assert [status for _, status, _ in lines] == ["info", "info"]
    assert "cases='standard'" in lines[0][0] and "check_backward" in lines[1][0]
    assert all("s wall" in text and "s CPU" in text and "PASS" in text for _, _, text in lines)

"""make_grad_output: the dO choices of the traced backward (ones, seeded random, a target)."""

import pytest

from scratch.backward.grad_output import make_grad_output, one_hot


def test_ones_is_the_gradient_of_the_sum():
    assert make_grad_output("ones", 2, 3) == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize("seed", range(20))
def test_random_is_seeded_and_bounded(seed):
    a = make_grad_output("random", 3, 4, seed=seed)
    assert a == make_grad_output("random", 3, 4, seed=seed)
    assert a != make_grad_output("random", 3, 4, seed=seed + 1)
    assert all(-1.0 <= x <= 1.0 and round(x, 2) == x for row in a for x in row)


def test_target_is_the_gradient_of_sum_output_times_target():
    target = one_hot(2, 3, 1, 2)
    assert target == [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    assert make_grad_output("target", 2, 3, target=target) == target


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: make_grad_output("zeros", 2, 2), ValueError, "kind: expected one of"),
        (lambda: make_grad_output("ones", 0, 2), ValueError, "rows: expected a positive integer"),
        (lambda: make_grad_output("random", 2, 2, seed=1.5), TypeError, "seed: expected an int"),
        (lambda: make_grad_output("target", 2, 2), ValueError, "target: expected a matrix"),
        (
            lambda: make_grad_output("target", 2, 2, target=[[1.0, 2.0]]),
            ValueError,
            r"target: expected the output's shape \(2, 2\)",
        ),
        (lambda: one_hot(2, 2, 2, 0), ValueError, r"i, c: expected a cell inside \(2, 2\)"),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()

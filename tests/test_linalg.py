"""matmul / dot / transpose: exactly rounded sums and IEEE special values."""

import math
import random
from fractions import Fraction

import pytest

import scratch
from scratch.ops.linalg import dot


def exact_round(a, b):
    """The correctly rounded sum of the (rounded) products a_l * b_l, with exact rationals."""
    return float(sum(Fraction(x * y) for x, y in zip(a, b)))


def test_matmul_is_correctly_rounded():
    rng = random.Random(7)
    # wide exponent range and cancellation: naive left-to-right summation gets these wrong
    a = [
        [rng.choice([1e16, -1e16, 1.0, 3.3e-5]) * rng.random() for _ in range(9)] for _ in range(5)
    ]
    b = [[rng.choice([1e16, -1e16, 1.0, 7e-3]) * rng.random() for _ in range(4)] for _ in range(9)]
    out = scratch.matmul(a, b)
    cols = scratch.transpose(b)
    naive_wrong = 0
    for i, row in enumerate(a):
        for j, col in enumerate(cols):
            assert out[i][j] == exact_round(row, col)
            naive = 0.0
            for x, y in zip(row, col):
                naive += x * y
            naive_wrong += naive != exact_round(row, col)
    assert naive_wrong > 0  # the inputs really are hard: plain summation differs somewhere


def test_matmul_shape_and_hand_value():
    assert scratch.matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19.0, 22.0], [43.0, 50.0]]
    with pytest.raises(ValueError, match="b: expected 2 rows"):
        scratch.matmul([[1, 2]], [[1, 2, 3]])


def test_transpose():
    assert scratch.transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1e308, 1e308], [1.0, 1.0], math.inf),  # true sum overflows: +inf, as IEEE
        ([-1e308, -1e308], [1.0, 1.0], -math.inf),
        ([1e308, 1e308, -1e308], [1.0, 1.0, 1.0], 1e308),  # partials overflow, sum does not
        ([math.inf, 1.0], [1.0, 1.0], math.inf),
        ([math.inf, math.inf], [1.0, -1.0], math.nan),  # inf - inf
        ([math.nan, 1.0], [1.0, 1.0], math.nan),
    ],
)
def test_dot_special_values(a, b, expected):
    got = dot(a, b)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


def test_shape_of():
    assert scratch.shape_of([[[1, 2, 3]], [[4, 5, 6]]]) == (2, 1, 3)

"""softmax: one row at a time, the row max subtracted, fully masked rows by policy."""

import math

import pytest

import scratch
from scratch.ops.softmax import softmax_row


def test_softmax_large_logits_do_not_overflow():
    w = softmax_row([1e4, 1e4 - 1.0, -1e4])
    e = math.exp(-1.0)
    assert w[0] == pytest.approx(1 / (1 + e), rel=4e-16)
    assert w[1] == pytest.approx(e / (1 + e), rel=4e-16)
    assert w[2] == 0.0


def test_softmax_public_rows_and_policies():
    inf = math.inf
    out = scratch.softmax([[0.0, 0.0], [-inf, -inf]])
    assert out == [[0.5, 0.5], [0.0, 0.0]]
    assert scratch.softmax([[-inf, -inf]], masked_rows="uniform") == [[0.5, 0.5]]
    assert all(math.isnan(x) for x in scratch.softmax([-inf, -inf], masked_rows="nan"))
    with pytest.raises(ValueError, match="masked_rows"):
        scratch.softmax([1.0], masked_rows="ignore")

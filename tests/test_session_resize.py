"""Resizing a session: the values that fit are kept, a random example is drawn again at the new
sizes, widths over the limit are named."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gui.state import session as sm
from gui.state import session_file
from tests.journey_sessions import with_mask


def test_resize_keeps_the_values_that_fit():
    s = sm.random_session(3, 4, 4, 2, 2, 1)
    bigger = sm.resized(s, num_tokens=6, d_model=5)
    assert all(bigger.query[i][:4] == s.query[i] for i in range(4))
    assert all(v == 0.0 for v in bigger.query[5]) and bigger.tokens[:4] == s.tokens
    assert len(bigger.w_q) == 5 and bigger.w_q[:4] == tuple(r for r in s.w_q)
    smaller = sm.resized(bigger, num_tokens=2)
    assert smaller.query == tuple(r for r in bigger.query[:2]) and smaller.tokens == s.tokens[:2]
    session_file.validate(smaller.to_dict())  # still a consistent session


def test_heads_and_kv_heads_resize_the_projection_widths():
    s = sm.resized(sm.random_session(1, 3, 4, 2, 2, 1), num_heads=4, num_kv_heads=2)
    assert (len(s.w_q[0]), len(s.w_k[0]), len(s.w_v[0])) == (8, 4, 4)
    assert (s.d_k, s.d_v) == (2, 2)
    session_file.validate(s.to_dict())


def test_a_random_example_resized_is_drawn_again_not_zero_padded():
    s = sm.random_session(7, 6, 8, 4, 4, 1)
    s = dataclasses.replace(with_mask(s, "causal-top-left"), backend="numpy", dtype="float32")
    bigger = sm.regenerated(s, num_tokens=64)
    assert bigger.preset == "random" and bigger.num_tokens == 64
    zero_rows = [i for i, row in enumerate(bigger.query) if not any(row)]
    assert zero_rows == []  # rows 6-63 drawn, not zero-padded
    assert (bigger.backend, bigger.dtype, bigger.variant) == (
        "numpy",
        "float32",
        with_mask(s, "causal-top-left").variant,
    )
    wider = sm.regenerated(bigger, num_heads=2)
    assert wider.preset == "random" and wider.num_heads == 2
    assert len(wider.w_q[0]) == 8 and all(any(col) for col in zip(*wider.w_q))


def test_a_custom_example_resized_keeps_its_values():
    s = sm.random_session(1, 4, 4, 2, 2, 1)
    custom = sm.with_cell(s, "query", 0, 0, 5.0)
    bigger = sm.regenerated(custom, num_tokens=6)
    assert bigger.preset == "custom" and bigger.query[0][0] == 5.0 and bigger.query[5] == (0.0,) * 4


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (dict(num_heads=16, d_k=sm.MAX_DIM // 8), f"heads x d_k = {2 * sm.MAX_DIM} exceeds"),
        (dict(d_k=sm.MAX_DIM + 1), f"heads x d_k = {sm.MAX_DIM + 1} exceeds {sm.MAX_DIM}"),
        (dict(d_v=sm.MAX_DIM + 5), f"kv heads x d_v = {sm.MAX_DIM + 5} exceeds {sm.MAX_DIM}"),
    ],
)
def test_widths_over_the_limit_are_named_not_dumped(sizes, message):
    s = sm.random_session(0, 4, 4, 2, 2, 1)
    with pytest.raises(sm.SessionError, match=re.escape(message)):
        sm.regenerated(s, **sizes)
    sm.regenerated(s, num_heads=16, d_k=sm.MAX_DIM // 16)  # MAX_DIM exactly is allowed

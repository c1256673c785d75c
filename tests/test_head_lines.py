"""The head view's state without Qt: heads on and off, the token in focus, the lines' order."""

import numpy as np
import pytest

from gui.present import head_lines
from gui.present.head_lines import HeadLines


def softmax_rows(seed: int, heads: int, tokens: int) -> np.ndarray:
    """(heads, T, T) seeded weights whose rows sum to 1."""
    scores = np.random.default_rng(seed).normal(size=(heads, tokens, tokens)) * 2
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def state(seed=0, heads=3, tokens=6, on=(0, 1, 2)) -> HeadLines:
    s = HeadLines()
    s.set_layer([f"t{i}" for i in range(tokens)], softmax_rows(seed, heads, tokens), list(on))
    return s


def expected(s: HeadLines, keep) -> set:
    """(head, i, j) of every weight >= SHOWN among the heads on that keep(i, j) accepts."""
    return {
        (h, i, j)
        for h in s.on
        for i in range(len(s.tokens))
        for j in range(len(s.tokens))
        if s.weights[h, i, j] >= head_lines.SHOWN and keep(i, j)
    }


def drawn(s: HeadLines) -> set:
    lines = s.lines()
    return set(zip(lines.head.tolist(), lines.query.tolist(), lines.key.tolist(), strict=True))


@pytest.mark.parametrize("seed", range(5))
def test_every_line_of_the_heads_on_and_no_other(seed):
    s = state(seed)
    assert drawn(s) == expected(s, lambda i, j: True)
    s.toggle(1)  # the legend's click: head 1 off
    assert s.on == [0, 2]
    assert drawn(s) == expected(s, lambda i, j: True)
    assert 1 not in s.lines().head
    s.toggle(1)  # and on again
    assert s.on == [0, 1, 2] and drawn(s) == expected(s, lambda i, j: True)


def test_solo_all_and_the_one_chosen_head():
    s = state()
    assert s.chosen() is None
    s.solo(2)
    assert s.on == [2] and s.chosen() == 2 and set(s.lines().head.tolist()) == {2}
    s.toggle(2)
    assert s.on == [] and len(s.lines().weight) == 0 and s.chosen() is None
    s.all_on()
    assert s.on == [0, 1, 2]
    s.toggle(7)  # no such head: nothing changes
    assert s.on == [0, 1, 2]


@pytest.mark.parametrize("seed", range(5))
def test_hovering_a_query_or_a_key_keeps_that_tokens_lines(seed):
    s = state(seed)
    assert s.set_hover("query", 3)
    assert drawn(s) == expected(s, lambda i, j: i == 3)
    assert s.set_hover("key", 4)  # the right column: who attends to token 4
    assert drawn(s) == expected(s, lambda i, j: j == 4)
    assert np.all(s.lines().key == 4) and len(s.lines().key) > 0
    assert not s.set_hover("key", 4)  # no change, no repaint
    s.set_hover("query", None)
    assert drawn(s) == expected(s, lambda i, j: True)


def test_a_pinned_query_token_is_the_focus_while_nothing_is_hovered():
    s = HeadLines()
    s.set_layer(["a", "b", "c"], softmax_rows(1, 2, 3), [0, 1], pinned=2)
    assert s.focus() == ("query", 2) and set(s.lines().query.tolist()) == {2}
    s.set_hover("key", 0)
    assert s.focus() == ("key", 0)
    s.set_hover("key", None)
    assert s.focus() == ("query", 2)


@pytest.mark.parametrize("seed", range(5))
def test_lines_are_drawn_weakest_first_so_the_strongest_end_on_top(seed):
    s = state(seed, heads=4, tokens=9, on=range(4))
    w = s.lines().weight
    assert len(w) > 10 and np.all(np.diff(w) >= 0)
    lines = s.lines()
    assert np.array_equal(lines.weight, s.weights[lines.head, lines.query, lines.key])


def test_two_heads_lines_between_the_same_tokens_are_offset():
    s = state(heads=3, on=(0, 1, 2))
    step = head_lines.ROW_MIN
    shifts = [s.offset(h, step) for h in s.on]
    assert len(set(shifts)) == 3 and shifts == sorted(shifts)
    assert max(abs(d) for d in shifts) < step / 2  # each end stays within its token's row
    s.solo(1)
    assert s.offset(1, step) == 0.0


def test_rows_give_every_token_its_own_row_at_any_length():
    for tokens in (6, 13, 64, 126, 512, 4096):
        step = head_lines.row_step(tokens, 350)
        assert head_lines.ROW_MIN <= step <= head_lines.ROW_MAX
        assert head_lines.height(tokens, step) >= tokens * head_lines.ROW_MIN
        centres = [head_lines.row_y(i, step) for i in range(tokens)]
        assert all(head_lines.token_at(y, tokens, step) == i for i, y in enumerate(centres))
    assert head_lines.token_at(-1.0, 6, 20.0) is None
    assert head_lines.token_at(head_lines.height(6, 20.0), 6, 20.0) is None


def test_bad_input_names_the_argument():
    s = HeadLines()
    with pytest.raises(ValueError, match=r"weights: expected \(heads, 3, 3\)"):
        s.set_layer(["a", "b", "c"], np.zeros((2, 3, 4)), [0])
    with pytest.raises(ValueError, match="heads: expected 0 to 1"):
        s.set_layer(["a", "b", "c"], np.zeros((2, 3, 3)), [0, 2])
    with pytest.raises(ValueError, match="side: expected one of"):
        s.set_hover("value", 0)

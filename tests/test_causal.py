"""scratch.causal: the causal rule's one home gives the ground truth's causal_mask, any part of
it, and the same grid as a NumPy array."""

import random

import pytest

import scratch
from scratch.causal import causal_array, causal_cells, causal_shift

SIZES = [(L, S) for L in range(1, 7) for S in range(1, 7)]


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_every_cell_is_the_ground_truths(align):
    for L, S in SIZES:
        assert causal_cells(L, S, align) == scratch.causal_mask(L, S, align), (L, S)


def test_the_rule_with_numbers():
    assert causal_cells(2, 4) == [[True, False, False, False], [True, True, False, False]]
    assert causal_cells(2, 4, "bottom-right") == [[True] * 3 + [False], [True] * 4]
    assert (causal_shift(3, 5), causal_shift(3, 5, "bottom-right")) == (0, 2)


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_picked_rows_and_columns_are_those_cells_of_the_whole_grid(align):
    rng = random.Random(0)
    for L, S in [(7, 7), (5, 9), (9, 4), (64, 80)]:
        whole = scratch.causal_mask(L, S, align)
        rows = sorted(rng.sample(range(L), min(L, 3)))
        cols = sorted(rng.sample(range(S), min(S, 4)))
        assert causal_cells(L, S, align, rows) == [whole[i] for i in rows]
        assert causal_cells(L, S, align, rows, cols) == [[whole[i][j] for j in cols] for i in rows]


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_the_array_is_the_same_grid(align):
    pytest.importorskip("numpy")
    for L, S in SIZES + [(40, 33)]:
        grid = causal_array(L, S, align)
        assert grid.dtype == bool and grid.tolist() == causal_cells(L, S, align), (L, S)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="align: expected 'top-left' or 'bottom-right'"):
        causal_cells(2, 2, "top")
    with pytest.raises(ValueError, match="L: expected a positive integer, found int 0"):
        causal_shift(0, 2)
    with pytest.raises(ValueError, match="S: expected a positive integer, found str '2'"):
        causal_cells(2, "2")

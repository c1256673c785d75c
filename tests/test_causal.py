"""scratch.causal: the causal rule's one home gives the ground truth's causal_mask, any part of
it, the same grid as a NumPy array or one tile of it; no other scratch module writes the rule."""

import random
from pathlib import Path

import pytest

import scratch
from scratch.causal import causal_array, causal_cells, causal_shift, causal_tile
from tests.test_window_rules import causal_rules

SIZES = [(L, S) for L in range(1, 7) for S in range(1, 7)]
SCRATCH = Path(__file__).resolve().parents[1] / "scratch"


def _by_counting(L: int, S: int, align: str) -> list[list[bool]]:
    """The grid as PyTorch describes it: row i of tril(ones(L, S), diagonal) starts with
    i + 1 + diagonal Trues (diagonal 0 top-left, S - L bottom-right), clamped to 0..S."""
    diagonal = 0 if align == "top-left" else S - L
    lead = [min(S, max(0, i + 1 + diagonal)) for i in range(L)]
    return [[True] * n + [False] * (S - n) for n in lead]


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_every_cell_is_the_ground_truths(align):
    for L, S in SIZES:
        expected = _by_counting(L, S, align)
        assert causal_cells(L, S, align) == expected, (L, S)
        assert scratch.causal_mask(L, S, align) == expected, (L, S)


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


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_a_tile_is_that_part_of_the_whole_array(align):
    """Every contiguous tile, diagonal crossed or not, as a tiled kernel asks for it."""
    pytest.importorskip("numpy")
    for L, S in [(1, 1), (5, 9), (9, 4), (13, 13)]:
        whole, shift = causal_array(L, S, align), causal_shift(L, S, align)
        for r0 in range(L):
            for r1 in range(r0, L + 1, 3):
                for c0 in range(0, S, 2):
                    tile = causal_tile(shift, range(r0, r1), range(c0, S))
                    assert tile.dtype == bool and tile.shape == (r1 - r0, S - c0)
                    assert (tile == whole[r0:r1, c0:]).all(), (L, S, r0, r1, c0)


def test_a_tile_needs_contiguous_ranges():
    with pytest.raises(ValueError, match="rows, cols: expected contiguous ranges"):
        causal_tile(0, range(0, 8, 2), range(8))


# the rule's home, and torch's grid built on the device (tril, its diagonal from causal_shift);
# scratch/checker writes correct and planted-wrong kernels of its own on purpose
RULE_HOMES = {"causal.py": 2, "backends/torch_math.py": 1}
NOT_SCANNED = {"checker"}


def test_no_other_scratch_module_writes_the_causal_rule():
    found = {}
    for path in sorted(SCRATCH.rglob("*.py")):
        name = path.relative_to(SCRATCH).as_posix()
        if name.split("/")[0] in NOT_SCANNED:
            continue
        lines = causal_rules(path.read_text(encoding="utf-8"))
        if len(lines) > RULE_HOMES.get(name, 0):
            found[name] = lines
    assert found == {}, f"the causal rule written outside scratch/causal.py (file: lines): {found}"
    assert "tril(causal_shift(" in (SCRATCH / "backends" / "torch_math.py").read_text()


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="align: expected 'top-left' or 'bottom-right'"):
        causal_cells(2, 2, "top")
    with pytest.raises(ValueError, match="L: expected a positive integer, found int 0"):
        causal_shift(0, 2)
    with pytest.raises(ValueError, match="S: expected a positive integer, found str '2'"):
        causal_cells(2, "2")

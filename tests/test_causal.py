"""scratch.variants.causal: the causal rule's one home gives the ground truth's causal_mask, any
part of it, the same grid as a NumPy array, one tile of it or a torch tensor, and what tiled
kernels ask (keys a block sees, whole tiles, the first query of a key); no other module in
scratch/ or gui/ writes the rule."""

import random
from pathlib import Path

import pytest

import scratch
from scratch.variants.causal import (
    Causal,
    at_or_before,
    causal_array,
    causal_cells,
    causal_shift,
    causal_tensor,
    causal_tile,
)
from tests.test_window_rules import causal_rules

SIZES = [(L, S) for L in range(1, 7) for S in range(1, 7)]
ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.parametrize("shift", [-3, -1, 0, 2])
def test_what_tiled_kernels_ask_agrees_with_the_cells(shift):
    """keys_seen, sees_whole_tile, first_query and the tile, each against mask_mod cell by cell."""
    pytest.importorskip("numpy")
    causal, L, S = Causal(shift), 9, 11
    seen = [[causal.mask_mod(0, 0, i, j) for j in range(S)] for i in range(L)]
    assert causal.cells(range(L), range(S)) == seen
    for i0 in range(L):
        for i1 in range(i0 + 1, L + 1):
            some = [j for j in range(S) if any(seen[i][j] for i in range(i0, i1))]
            assert causal.keys_seen(i0, i1, S) == (some[-1] + 1 if some else 0), (i0, i1)
            assert some == list(range(len(some)))  # a prefix: skipping the rest is exact
            for j0 in range(S):
                for j1 in range(j0 + 1, S + 1):
                    whole = all(seen[i][j] for i in range(i0, i1) for j in range(j0, j1))
                    assert causal.sees_whole_tile(range(i0, i1), range(j0, j1)) == whole
                    tile = causal.tile(range(i0, i1), range(j0, j1))
                    assert tile.tolist() == [row[j0:j1] for row in seen[i0:i1]]
    for j in range(S):
        queries = [i for i in range(L) if seen[i][j]]
        if queries:  # every query from the first one on sees key j
            assert queries == list(range(causal.first_query(j), L)), j


def test_the_rule_on_index_arrays_and_as_a_torch_tensor():
    np = pytest.importorskip("numpy")
    q_idx, kv_idx = np.arange(5)[:, None], np.arange(7)[None, :]
    assert (at_or_before(kv_idx, q_idx + 2) == causal_tile(2, range(5), range(7))).all()
    torch = pytest.importorskip("torch")
    for shift in (-2, 0, 3):
        grid = causal_tensor(shift, 5, 7)
        assert grid.dtype == torch.bool and grid.tolist() == Causal(shift).cells(range(5), range(7))


# The rule's one home: its plain form (at_or_before), the comprehension of cells, np.tri and
# torch's tril. Elsewhere in scratch/ and gui/ no comparison of a query index with a key
# index, no triangle grid, no index plus a causal shift (the other variants in
# scratch/variants/ do their own diagonal arithmetic, so there only comparisons are looked for).
HOME = "scratch/variants/causal.py"
NOT_A_MASK = {"scratch/bench/timing.py"}  # (row + shift) % n rotates the order rows are timed in


def rule_copies(root: Path) -> dict[str, list[int]]:
    """{file: lines} of the causal rule written outside its home, in root's scratch/ and gui/."""
    found = {}
    for path in sorted([*(root / "scratch").rglob("*.py"), *(root / "gui").rglob("*.py")]):
        name = path.relative_to(root).as_posix()
        if name in (HOME, *NOT_A_MASK):
            continue
        arithmetic = not name.startswith("scratch/variants/")
        lines = causal_rules(path.read_text(encoding="utf-8"), shift_arithmetic=arithmetic)
        if lines:
            found[name] = lines
    return found


def test_the_causal_rule_is_written_in_one_place():
    assert rule_copies(ROOT) == {}, f"the causal rule written outside {HOME} (file: lines)"
    home = (ROOT / HOME).read_text(encoding="utf-8")
    assert len(causal_rules(home, shift_arithmetic=False)) == 4  # the scan sees each form there


def test_the_scan_finds_a_copy_planted_in_scratch_or_gui(tmp_path):
    for name in ("scratch/core/rows.py", "scratch/variants/prefix.py", "gui/state/session.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / name).read_text(encoding="utf-8")
        (tmp_path / name).write_text(text + "\nseen = [[j <= i for j in cols] for i in rows]\n")
    planted = text.count("\n") + 2
    (tmp_path / "scratch/backends").mkdir()
    (tmp_path / "scratch/backends/k.py").write_text("stop = min(S, i1 + self.shift)\n")
    found = rule_copies(tmp_path)
    assert found == {
        "gui/state/session.py": [planted],
        "scratch/backends/k.py": [1],
        "scratch/core/rows.py": [found["scratch/core/rows.py"][0]],
        "scratch/variants/prefix.py": [found["scratch/variants/prefix.py"][0]],
    }


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="align: expected 'top-left' or 'bottom-right'"):
        causal_cells(2, 2, "top")
    with pytest.raises(ValueError, match="L: expected a positive integer, found int 0"):
        causal_shift(0, 2)
    with pytest.raises(ValueError, match="S: expected a positive integer, found str '2'"):
        causal_cells(2, "2")

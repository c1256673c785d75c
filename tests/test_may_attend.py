"""MayAttend: a backend's may-attend grid kept as its bool array, read as nested tuples."""

from __future__ import annotations

import numpy as np
import pytest

import scratch
from scratch.backends import numpy_backend as nb
from scratch.trace.forward import MayAttend


def _grid(seed: int, shape=(5, 7)) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) > 0.4


@pytest.mark.parametrize("seed", range(4))
def test_it_reads_and_compares_like_the_nested_tuples(seed):
    grid = _grid(seed)
    tuples = tuple(tuple(row) for row in grid.tolist())
    found = MayAttend(grid)
    assert found == tuples and tuples == found  # both directions
    assert len(found) == 5 and found[1] == tuples[1] and found[-1] == tuples[-1]
    assert found[1:3] == tuples[1:3] and list(found) == list(tuples)
    assert all(type(cell) is bool for row in found for cell in row)
    assert found == MayAttend(grid.copy())
    assert repr(found) == "MayAttend(5 x 7 bools)"


@pytest.mark.parametrize("seed", range(4))
def test_one_cell_or_the_shape_different_is_not_equal(seed):
    grid = _grid(seed)
    other = grid.copy()
    other[seed % 5, seed % 7] = not other[seed % 5, seed % 7]
    tuples = tuple(tuple(row) for row in other.tolist())
    assert MayAttend(grid) != tuples and tuples != MayAttend(grid)
    assert MayAttend(grid) != MayAttend(other)
    assert MayAttend(grid) != MayAttend(grid[:4]) and MayAttend(grid) != tuple(map(tuple, grid[:4]))
    assert MayAttend(grid) != grid.tolist()  # a list of lists is not a grid of tuples
    with pytest.raises(TypeError):
        hash(MayAttend(grid))


def test_a_torch_grid_reads_the_same():
    torch = pytest.importorskip("torch")
    grid = _grid(9)
    assert MayAttend(torch.from_numpy(grid)) == MayAttend(grid)
    assert MayAttend(torch.from_numpy(grid)) == tuple(map(tuple, grid.tolist()))


@pytest.mark.parametrize("seed", range(3))
def test_a_masked_numpy_trace_keeps_its_grid_as_an_array(seed):
    """No L x S Python bools are made; the grid equals the ground truth's tuples."""
    x = np.random.default_rng(seed).standard_normal((6, 4))
    mask = _grid(seed, (6, 6))
    found = nb.trace_attention(x, num_heads=2, attn_mask=mask)
    truth = scratch.trace_attention(x.tolist(), num_heads=2, attn_mask=mask.tolist())
    assert isinstance(found.allowed, MayAttend)
    assert found.allowed == truth.allowed
    assert found.allowed._array.base is None  # its own copy, not a view keeping (H, L, S) alive

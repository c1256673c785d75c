"""The query row a sentence is about, chosen with NumPy over whole matrices.

gui.sentences picks its row in plain Python (`sharpest_row`, `teaching_row`), which at 4096
tokens reads 16.7 M floats as Python objects. These are the same rules on arrays: the same row,
ties to the first, so the window's sentence does not depend on the matrix's size.
"""

from __future__ import annotations

import numpy as np

from gui.sentences import NOTABLE


def sharpest_row(matrix: np.ndarray) -> int:
    """The row whose largest finite entry is highest (the first such; 0 when none is finite)."""
    m = np.asarray(matrix)
    tops = np.max(m, axis=1, where=np.isfinite(m), initial=-np.inf)  # (rows,)
    return int(np.argmax(tops)) if np.isfinite(tops).any() else 0


def teaching_row(matrix: np.ndarray) -> int:
    """The most decided row among those with at least two entries >= NOTABLE; else the most
    decided of all (gui.sentences.teaching_row's rule)."""
    m = np.asarray(matrix)
    mixed = np.flatnonzero(
        np.count_nonzero(m >= np.float64(NOTABLE), axis=1) >= 2
    )  # (rows kept,); in float64, as Python compares
    if mixed.size == 0:
        return sharpest_row(m)
    return int(mixed[sharpest_row(m[mixed])])

"""Matrix products on nested lists, every sum correctly rounded with `math.fsum`."""

from __future__ import annotations

from math import fsum, inf, isnan
from operator import mul

from scratch.ops.validate import as_matrix

_TINY = 2.0**-64  # scaling by a power of two is exact; it keeps fsum's partials finite


def dot(a: list[float], b: list[float]) -> float:
    """Correctly rounded sum of a_l * b_l, with IEEE results for inf and NaN."""
    try:
        return fsum(map(mul, a, b))
    except (ValueError, OverflowError):
        return _dot_special(list(map(mul, a, b)))


def _dot_special(products: list[float]) -> float:
    """The sum when fsum refuses it: inf - inf is NaN, and overflow rounds to +-inf."""
    if any(isnan(p) for p in products):
        return float("nan")
    has_pos, has_neg = inf in products, -inf in products
    if has_pos and has_neg:
        return float("nan")
    if has_pos or has_neg:
        return inf if has_pos else -inf
    # finite products whose partial sums overflow: sum them scaled down, then scale back up
    total = fsum(p * _TINY for p in products)
    return total / _TINY  # overflows to +-inf exactly when the true sum does


def matmul_nt(a: list[list[float]], bt: list[list[float]]) -> list[list[float]]:
    """a @ bt^T for validated matrices: (n, m) @ (p, m)^T -> (n, p). Rows of bt are columns."""
    try:  # fast path: exactly the pure-Python kernel limit, one fsum per dot product
        return [[fsum(map(mul, row, col)) for col in bt] for row in a]
    except (ValueError, OverflowError):  # inf - inf or overflow somewhere: IEEE results
        return [[dot(row, col) for col in bt] for row in a]


def transpose_rows(a: list[list[float]]) -> list[list[float]]:
    """Swap rows and columns of an already validated matrix: (n, m) -> (m, n)."""
    return [list(col) for col in zip(*a)]


def transpose(a: object) -> list[list[float]]:
    """Swap rows and columns: (n, m) -> (m, n); a is validated like every public input.

    Args:
        a: a matrix (n, m): nested lists or an array.

    Returns:
        The (m, n) matrix as nested lists of floats.

    Examples:
        >>> from scratch import transpose
        >>> transpose([[1, 2, 3], [4, 5, 6]])
        [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    """
    return transpose_rows(as_matrix(a, "a")[0])


def matmul(a: object, b: object) -> list[list[float]]:
    """a @ b for matrices (n, m) @ (m, p) -> (n, p), each entry an fsum of products.

    Args:
        a: the left matrix (n, m).
        b: the right matrix (m, p).

    Returns:
        The (n, p) product as nested lists of floats, each entry correctly rounded.

    Examples:
        >>> from scratch import matmul
        >>> matmul([[1, 2]], [[3], [4]])
        [[11.0]]
    """
    a, (n, m) = as_matrix(a, "a")
    b, (mb, p) = as_matrix(b, "b")
    if mb != m:
        raise ValueError(f"b: expected {m} rows to match a's {m} columns, found shape ({mb}, {p})")
    return matmul_nt(a, transpose(b))  # (n, m) @ (m, p) -> (n, p)

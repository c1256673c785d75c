"""The gradient fed into the backward pass of a worked example: dO, shaped like the output.

Three choices, each the gradient of a simple loss with respect to `output`:
- "ones": loss = sum(output), so every entry of dO is 1;
- "random": a seeded random dO (entries in [-1, 1], two decimals, easy to read);
- "target": loss = sum(output * target), so dO = target (a one-hot target asks how a single
  output entry depends on every input).
"""

from __future__ import annotations

import random

from scratch.ops.validate import _describe, as_matrix, check_positive_int

GRAD_OUTPUT_KINDS = ("ones", "random", "target")


def make_grad_output(
    kind: str, rows: int, cols: int, *, seed: int = 0, target: object = None
) -> list[list[float]]:
    """dO of shape (rows, cols) for `kind` ('ones', 'random' with `seed`, 'target').

    Args:
        kind: "ones" (every entry 1), "random" (uniform in [-1, 1], two decimals) or
            "target" (the given matrix).
        rows: L, the output's rows.
        cols: Ev, the output's columns.
        seed: the "random" draw's seed.
        target: with "target": the (rows, cols) matrix itself (one_hot makes one).

    Returns:
        dO (rows, cols) as nested lists.

    Examples:
        >>> from scratch import make_grad_output
        >>> make_grad_output("ones", 2, 3)
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    rows, cols = check_positive_int(rows, "rows"), check_positive_int(cols, "cols")
    if kind == "ones":
        return [[1.0] * cols for _ in range(rows)]
    if kind == "random":
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed: expected an int, found {_describe(seed)}")
        rng = random.Random(seed)
        return [[round(rng.uniform(-1.0, 1.0), 2) for _ in range(cols)] for _ in range(rows)]
    if kind == "target":
        if target is None:
            raise ValueError("target: expected a matrix shaped like the output, found None")
        data, shape = as_matrix(target, "target")
        if shape != (rows, cols):
            raise ValueError(f"target: expected the output's shape {(rows, cols)}, found {shape}")
        return data
    raise ValueError(
        f"kind: expected one of {', '.join(map(repr, GRAD_OUTPUT_KINDS))}, found {_describe(kind)}"
    )


def one_hot(rows: int, cols: int, i: int, c: int) -> list[list[float]]:
    """A target with a single 1 at (i, c): dO asks how `output[i][c]` depends on everything.

    Args:
        rows: L, the output's rows.
        cols: Ev, the output's columns.
        i: the query row of the 1.
        c: the feature of the 1.

    Returns:
        The (rows, cols) matrix, 1.0 at (i, c) and 0.0 elsewhere.

    Examples:
        >>> from scratch import one_hot
        >>> one_hot(2, 2, 1, 0)
        [[0.0, 0.0], [1.0, 0.0]]
    """
    if not (0 <= i < rows and 0 <= c < cols):
        raise ValueError(f"i, c: expected a cell inside ({rows}, {cols}), found ({i}, {c})")
    return [[float(r == i and k == c) for k in range(cols)] for r in range(rows)]


__all__ = ["GRAD_OUTPUT_KINDS", "make_grad_output", "one_hot"]

"""Rotary position embedding (RoPE) in plain Python, and its backward (the rotation's transpose).

Each pair of features (a, b) of a row at position p turns by the angle p * theta_k, with
theta_k = base ** (-2k / rotary_dim) for pair k = 0 .. rotary_dim/2 - 1:
    a' = a cos - b sin,   b' = b cos + a sin
Pairing (which features form pair k):
  - "half" (Llama, GPT-NeoX, transformers' rotate_half): features k and k + rotary_dim/2
  - "interleaved" (the RoFormer paper, GPT-J): features 2k and 2k + 1
Only the first `rotary_dim` features turn (partial rotary, as GPT-NeoX's rotary_pct); the rest
pass through. Positions are given explicitly, one per row, so a decode step turns by its true
position. The backward turns the gradient by -angle (a rotation's inverse is its transpose).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from scratch.ops.validate import as_tensor

PAIRINGS = ("half", "interleaved")


def _pairs(pairing: str, rotary_dim: int) -> list[tuple[int, int]]:
    """The feature indices (a, b) of pair k, k = 0 .. rotary_dim/2 - 1."""
    half = rotary_dim // 2
    if pairing == "half":
        return [(k, k + half) for k in range(half)]
    if pairing == "interleaved":
        return [(2 * k, 2 * k + 1) for k in range(half)]
    raise ValueError(f"pairing: expected 'half' or 'interleaved', found {pairing!r}")


def angles(position: float, rotary_dim: int, base: float = 10000.0) -> list[float]:
    """position * theta_k for each pair k (theta_k = base ** (-2k / rotary_dim))."""
    return [position * base ** (-2.0 * k / rotary_dim) for k in range(rotary_dim // 2)]


def _positions(positions: object, L: int) -> list[float]:
    """One finite real number per row, from any sequence (a list, an array, a tensor)."""
    if hasattr(positions, "tolist"):  # a NumPy array or a torch tensor, without importing them
        positions = positions.tolist()
    if isinstance(positions, (str, bytes)) or not isinstance(positions, (Sequence, range)):
        raise ValueError(f"positions: expected a sequence of {L} numbers, found {positions!r}")
    if len(positions) != L:
        raise ValueError(f"positions: expected one position per row ({L}), found {len(positions)}")
    for p in positions:
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p):
            raise ValueError(f"positions: expected finite numbers, found {p!r}")
    return [float(p) for p in positions]


def _turn(x, positions, base, pairing, rotary_dim, sign: float) -> list:
    data, shape = as_tensor(x, "x", min_dims=2)
    L, D = shape[-2:]
    positions = _positions(positions, L)
    if rotary_dim is None and D % 2:
        raise ValueError(
            f"x: the last dimension ({D}) is odd; rotary turns pairs of features "
            f"(give an even rotary_dim < {D} to turn only the first ones)"
        )
    rd = D if rotary_dim is None else rotary_dim
    if isinstance(rd, bool) or not isinstance(rd, int) or rd < 2 or rd % 2 or rd > D:
        raise ValueError(f"rotary_dim: expected an even integer in 2..{D}, found {rotary_dim!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        raise ValueError(f"base: expected a number > 0, found {base!r}")
    pairs = _pairs(pairing, rd)
    trig = [
        [(math.cos(t), sign * math.sin(t)) for t in angles(p, rd, base)] for p in positions
    ]  # (L, rotary_dim/2) of (cos, sin)

    def turn_matrix(rows: list) -> list:  # (L, D) -> (L, D)
        out = []
        for row, cs in zip(rows, trig):
            new = list(row)
            for (a, b), (c, s) in zip(pairs, cs):
                new[a] = math.fsum((row[a] * c, -row[b] * s))
                new[b] = math.fsum((row[b] * c, row[a] * s))
            out.append(new)
        return out

    level = [data]
    for _ in shape[:-2]:
        level = [m for block in level for m in block]
    for matrix in level:  # every (L, D) matrix, rewritten in place
        matrix[:] = turn_matrix(matrix)
    return data


def rotary(
    x: object,
    positions: Sequence[float],
    *,
    base: float = 10000.0,
    pairing: str = "half",
    rotary_dim: int | None = None,
) -> list:
    """x (..., L, D) with each row's first rotary_dim features turned by its position's angles.

    Args:
        x: q or k (..., L, D).
        positions: L positions, one per row (a decode step's are its true positions).
        base: theta_k = base ** (-2k / rotary_dim) for pair k.
        pairing: "half" (Llama, GPT-NeoX: features k and k + rotary_dim/2) or "interleaved"
            (RoFormer, GPT-J: features 2k and 2k + 1).
        rotary_dim: the features that turn (even, at most D); None: all D.

    Returns:
        The turned x (..., L, D) as nested lists.

    Examples:
        >>> from scratch import rotary
        >>> rotary([[1.0, 0.0]], [0.0])  # position 0 turns by 0
        [[1.0, 0.0]]
    """
    return _turn(x, positions, base, pairing, rotary_dim, 1.0)


def rotary_backward(
    grad_output: object,
    positions: Sequence[float],
    *,
    base: float = 10000.0,
    pairing: str = "half",
    rotary_dim: int | None = None,
) -> list:
    """The gradient of rotary's input: grad_output turned back (the rotation's transpose).

    Args:
        grad_output: the gradient by rotary's output (..., L, D).
        positions: the L positions rotary turned by.
        base: rotary's base.
        pairing: rotary's pairing, "half" or "interleaved".
        rotary_dim: rotary's rotary_dim; None: all D.

    Returns:
        The gradient by rotary's input x (..., L, D).
    """
    return _turn(grad_output, positions, base, pairing, rotary_dim, -1.0)


def rotary_words(
    row: Sequence[float],
    position: float,
    feature: int,
    *,
    name: str = "q",
    base: float = 10000.0,
    pairing: str = "half",
    rotary_dim: int | None = None,
) -> str:
    """Hover text for one rotated feature: its pair, the angle, cos, sin and the arithmetic."""
    rd = len(row) if rotary_dim is None else rotary_dim
    if feature >= rd:
        return f"{name}_rot[{feature}] = {name}[{feature}] = {row[feature]:.4g} (not rotated)"
    k, (a, b) = next((k, p) for k, p in enumerate(_pairs(pairing, rd)) if feature in p)
    theta = angles(position, rd, base)[k]
    c, s = math.cos(theta), math.sin(theta)
    value = rotary([list(row)], [position], base=base, pairing=pairing, rotary_dim=rd)[0][feature]
    angle = f"angle {position:g} * {base:g}^(-{2 * k}/{rd}) = {theta:.4g}, cos {c:.4g}, sin {s:.4g}"
    if feature == a:
        arith = f"{row[a]:.4g} * {c:.4g} - {row[b]:.4g} * {s:.4g}"
        formula = f"{name}[{a}] cos - {name}[{b}] sin"
    else:
        arith = f"{row[b]:.4g} * {c:.4g} + {row[a]:.4g} * {s:.4g}"
        formula = f"{name}[{b}] cos + {name}[{a}] sin"
    return f"{name}_rot[{feature}] = {formula} = {arith} = {value:.4g} (pair {k}: {angle})"


__all__ = ["PAIRINGS", "angles", "rotary", "rotary_backward", "rotary_words"]

"""FlashAttention's online softmax, one key tile at a time, every running value kept (pure Python).

A one-pass kernel never holds a whole row of scores: it walks the keys in tiles of `block`, and
per query row keeps a running max m, a running denominator l and an accumulator acc:

    m_new = max(m, max_j s_j)            the tile may raise the row's max
    alpha = exp(m - m_new)               so what was summed against the old max is rescaled
    p_j   = exp(s_j - m_new)             the tile's unnormalised weights
    l     = l * alpha + sum_j p_j
    acc   = acc * alpha + sum_j p_j v_j
    partial output = acc / l,  log-sum-exp = m + log(l)

After the last tile acc / l is softmax(s) @ v exactly (up to rounding). `online_softmax` records
each tile's values so a learner can watch the partial output converge. With dtype float16 or
bfloat16 it emulates a 16-bit kernel (FlashAttention's policy): q, k, v and the weights p that
multiply v are stored in the 16-bit dtype, scores, m, l and acc are kept in float32, and the
output is stored in 16 bits; `rounding` then shows how far each step is from the same step in
float64, i.e. where error enters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from math import fsum, inf

from scratch.bounds.tolerance import ACCUMULATE, UNIT_ROUNDOFF, gamma
from scratch.ops.rounding import DTYPES, exp_in, round_to
from scratch.ops.validate import check_choice


@dataclass(frozen=True)
class TileStep:
    """The running values after one key tile (keys start..stop-1), one entry per query row."""

    start: int
    stop: int
    scores: list  # (L, stop - start) the tile's scaled, masked scores
    tile_max: list  # (L,) max of the tile's scores (-inf where the tile is all masked)
    running_max: list  # (L,) m after the tile
    rescale: list  # (L,) alpha = exp(m_old - m_new) applied to l and acc (0 on a row's first tile)
    denominator: list  # (L,) l after the tile
    accumulator: list  # (L, Ev) acc after the tile
    lse: list  # (L,) m + log(l): -inf while a row has seen no visible key
    partial: list  # (L, Ev) acc / l (0 where l == 0)
    difference: float  # max |partial - exact output| over the rows and features
    rounding: float  # max |partial - the same partial in float64|: 0.0 in float64


@dataclass(frozen=True)
class OnlineSoftmax:
    """The whole walk: the tiles in order, the exact output, and the float64 bound."""

    block: int
    dtype: str
    steps: tuple[TileStep, ...]
    exact: list  # (L, Ev) scratch.scaled_dot_product_attention's output
    bound: float  # the float64 walk's last partial is within this of `exact` (see float64_bound)


def float64_bound(max_score: float, E: int, S: int, tiles: int, max_v: float) -> float:
    """A bound on |last partial - exact| for the float64 walk (both sides rounding).

    As in scratch.tolerance: a score is within g(E+4) |s|max of its exact value, max
    subtraction included (delta); the weights then move by at most expm1(2 delta) relative.
    The walk adds, per key, one exp and its share of S - 1 additions in l and in acc, and per
    tile, per row, one exp for alpha and two products (l * alpha, acc * alpha): relative
    g(S + 4 * tiles + 8) with the final division. An output element is a weighted mean of v, so
    relative weight errors R give at most R max|v|. The exact side (fsum) is within the same
    bound; the sum is doubled."""
    u = UNIT_ROUNDOFF["float64"]
    delta = gamma(E + 4, u) * max_score
    relative = math.expm1(2.0 * delta) + gamma(S + 4 * tiles + 8, u)
    return 2.0 * relative * max_v


def _check(q: list, k: list, v: list, allowed: object, block: int, dtype: str) -> None:
    """ValueError naming the argument that does not fit."""
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise ValueError(f"block: expected a positive int, found {block!r}")
    check_choice(dtype, "dtype", DTYPES)
    if not q or not k or len(k) != len(v):
        raise ValueError(
            f"key, value: expected the same number of rows (>= 1), found {len(k)}, {len(v)}"
        )
    if any(len(row) != len(q[0]) for row in (*q, *k)):
        raise ValueError("query, key: expected rows of one length E")
    if allowed is not None and (len(allowed) != len(q) or any(len(r) != len(k) for r in allowed)):
        raise ValueError(f"allowed: expected an ({len(q)}, {len(k)}) grid of bools")


def online_softmax(
    q: list,
    k: list,
    v: list,
    *,
    scale: float | None = None,
    allowed: object = None,
    block: int = 2,
    dtype: str = "float64",
) -> OnlineSoftmax:
    """Walk the keys of q (L, E), k (S, E), v (S, Ev) in tiles of `block`; see the module doc.

    allowed: (L, S) bools, True where query i may see key j (None: every key). A row whose keys
    are all masked keeps l = 0 and gives 0 (masked_rows='zero')."""
    from scratch.core.attention import scaled_dot_product_attention

    _check(q, k, v, allowed, block, dtype)
    S, E = len(k), len(q[0])
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    grid = None if allowed is None else [[bool(c) for c in row] for row in allowed]
    exact = scaled_dot_product_attention(q, k, v, attn_mask=grid, scale=scale)[0]  # (L, Ev)
    walk = _walk(q, k, v, scale, grid, block, "float64")
    rounded = walk if dtype == "float64" else _walk(q, k, v, scale, grid, block, dtype)
    steps = []
    for ref, got in zip(walk, rounded, strict=True):
        difference = _max_difference(got["partial"], exact)
        rounding = _max_difference(got["partial"], ref["partial"])
        steps.append(TileStep(**got, difference=difference, rounding=rounding))
    max_score = max(
        (abs(s) for st in walk for row in st["scores"] for s in row if s > -inf), default=0.0
    )
    max_v = max((abs(x) for row in v for x in row), default=0.0)
    bound = float64_bound(max_score, E, S, len(steps), max_v)
    return OnlineSoftmax(block, dtype, tuple(steps), exact, bound)


def _max_difference(a: list, b: list) -> float:
    """max |a - b| over two (L, Ev) lists."""
    return max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)


def _walk(q, k, v, scale: float, allowed, block: int, dtype: str) -> list[dict]:
    """The tiles' running values in `dtype` (float64: no rounding), as TileStep keywords."""
    acc_dtype = "float64" if dtype == "float64" else ACCUMULATE[dtype]
    keep = lambda x: round_to(x, acc_dtype)  # noqa: E731 - scores, m, l, acc: the accumulate dtype
    store = lambda x: round_to(x, dtype)  # noqa: E731 - q, k, v, p and the output: stored dtype
    q = [[store(x) for x in row] for row in q]
    k = [[store(x) for x in row] for row in k]
    v = [[store(x) for x in row] for row in v]
    L, S, Ev = len(q), len(k), len(v[0])
    m = [-inf] * L
    l = [0.0] * L  # noqa: E741 - FlashAttention's name for the running denominator
    acc = [[0.0] * Ev for _ in range(L)]
    steps = []
    for start in range(0, S, block):
        stop = min(start + block, S)
        tile = {"start": start, "stop": stop, "scores": [], "tile_max": [], "running_max": []}
        tile.update(rescale=[], denominator=[], accumulator=[], lse=[], partial=[])
        for i in range(L):
            # step 1: the tile's scores (L, E) @ (E, B) -> (L, B), scaled, masked to -inf
            s = []
            for j in range(start, stop):
                if allowed is not None and not allowed[i][j]:
                    s.append(-inf)
                    continue
                dot = _dot(q[i], k[j], acc_dtype)
                s.append(keep(dot * scale))
            top = max(s)
            new = max(m[i], top)
            # step 2: rescale what was summed against the old max (exp(-inf) = 0 on row start)
            alpha = 1.0 if new == -inf else exp_in(m[i] - new, acc_dtype)
            p = [0.0 if x == -inf else exp_in(keep(x - new), acc_dtype) for x in s]
            # step 3: running denominator and accumulator; p is stored in 16 bits before p @ v
            l[i] = keep(keep(l[i] * alpha) + keep(fsum(p)))
            p_stored = [store(x) for x in p]
            for c in range(Ev):
                add = fsum(pj * v[start + n][c] for n, pj in enumerate(p_stored))
                acc[i][c] = keep(keep(acc[i][c] * alpha) + keep(add))
            m[i] = new
            tile["scores"].append(s)
            tile["tile_max"].append(top)
            tile["running_max"].append(new)
            tile["rescale"].append(alpha)
            tile["denominator"].append(l[i])
            tile["accumulator"].append(list(acc[i]))
            tile["lse"].append(new + math.log(l[i]) if l[i] > 0 else -inf)
            tile["partial"].append([store(a / l[i]) if l[i] > 0 else 0.0 for a in acc[i]])
        steps.append(tile)
    return steps


def _dot(a: list, b: list, dtype: str) -> float:
    """sum_c a_c b_c: exact then rounded in float64, a running float32 sum otherwise."""
    if dtype == "float64":
        return fsum(x * y for x, y in zip(a, b))
    total = 0.0
    for x, y in zip(a, b):
        total = round_to(total + round_to(x * y, dtype), dtype)
    return total


__all__ = ["OnlineSoftmax", "TileStep", "float64_bound", "online_softmax"]

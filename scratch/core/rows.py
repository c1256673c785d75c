"""The ground truth for a sample of query rows: exact attention at sizes the full one cannot reach.

Query rows are independent: row i of the output reads q[i], every key and value, and row i of
the mask, nothing else. So the exact answer for a few rows costs (rows x S x E) work instead of
(L x S x E), and a 4096-token kernel can be checked against the ground truth on, say, 32 rows.
Dropout is not offered: its mask is drawn in row-major order over the whole matrix, so a row's
dropout depends on the rows before it.
"""

from __future__ import annotations

import random
from dataclasses import replace

from scratch.core.attention import attend, prepare
from scratch.core.options import Options
from scratch.core.variant_support import sdpa_variant
from scratch.ops.nested import stack
from scratch.ops.validate import check_positive_int
from scratch.variants import Causal


def sample_rows(L: int, count: int, seed: int = 0) -> list[int]:
    """`count` distinct query rows of 0..L-1, sorted; the first and last rows are always in.

    Args:
        L: the query length.
        count: how many rows (all L when count >= L; count 1: the last row).
        seed: the draw's seed for the rows between the first and the last.

    Returns:
        The rows, sorted.

    Examples:
        >>> from scratch import sample_rows
        >>> sample_rows(4, 10)
        [0, 1, 2, 3]
    """
    L, count = check_positive_int(L, "L"), check_positive_int(count, "count")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, found {type(seed).__name__} {seed!r}")
    if count >= L:
        return list(range(L))
    if count == 1:
        return [L - 1]  # the last row sees the most keys (and every key block) under a causal mask
    middle = random.Random(seed).sample(range(1, L - 1), count - 2)
    return sorted([0, L - 1, *middle])


def _check_rows(rows: object, L: int) -> list[int]:
    """`rows` is a non-empty sequence of ints in 0..L-1 (repeats and any order allowed)."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise TypeError(f"rows: expected a list of row indices, found {type(rows).__name__}")
    found = list(rows)
    if not found:
        raise ValueError("rows: expected at least one row index, found an empty list")
    for n, i in enumerate(found):
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"rows[{n}]: expected an int row index, found {type(i).__name__} {i!r}")
        if not 0 <= i < L:
            raise ValueError(f"rows[{n}]: expected a query row in 0..{L - 1}, found {i}")
    return found


def attention_rows(
    query: object,
    key: object,
    value: object,
    rows: object,
    attn_mask: object = None,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    enable_gqa: bool = False,
    masked_rows: str = "zero",
) -> tuple[list, list]:
    """Rows `rows` of scaled_dot_product_attention's (output, weights), computed alone.

    Args:
        query: q (..., L, E).
        key: k (..., S, E).
        value: v (..., S, Ev).
        rows: R distinct query rows, each in 0..L-1 (sample_rows picks some).
        attn_mask: None, or (..., L, S): bool (True = may attend) or float (added).
        is_causal: key j visible to query i iff j <= i (top-left).
        scale: the scores' factor; None: 1 / sqrt(E).
        enable_gqa: grouped-query attention (key/value with fewer heads).
        masked_rows: a row with no visible key: "zero", "nan" or "uniform".

    Returns:
        (output (..., R, Ev), weights (..., R, S)): entry n is exactly row rows[n] of the full
        ground truth, bit for bit, for the same arguments.
    """
    options = Options(
        attn_mask, is_causal, scale=scale, enable_gqa=enable_gqa, masked_rows=masked_rows
    )
    variant = sdpa_variant(options, "scratch.attention_rows")
    causal = variant if isinstance(variant, Causal) else None
    # the causal mask is built below for the sampled rows only, never as a whole (L, S) grid
    p = prepare(query, key, value, replace(options, is_causal=False))
    picked = _check_rows(rows, p.plan.L)
    seen = None if causal is None else causal.cells(picked, range(p.plan.S))  # (R, S)
    added = p.mask is not None and not p.mask.is_bool  # a float mask is added at step 4
    outputs, weights = [], []
    for head in p.heads():  # each head's (L, S) mask rows are views of the broadcast mask
        mask_rows = seen  # (R, S): the causal grid's sampled rows, or the given mask's
        if head.mask_rows is not None:
            mask_rows = [head.mask_rows[i] for i in picked]
        q_rows = [head.q[i] for i in picked]  # (R, E): only the sampled query rows
        steps = attend(q_rows, head.k, head.v, p.scale, mask_rows, p.masked_rows, added=added)
        outputs.append(steps.output)  # (R, Ev)
        weights.append(steps.weights)  # (R, S)
    return stack(outputs, p.plan.lead), stack(weights, p.plan.lead)

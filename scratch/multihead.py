"""Multi-head, grouped-query and cross-attention with projection weights, in plain Python.

The seed notebooks' convention: weights multiply on the right, `q = x @ w_q (+ b_q)`, with
`w_q` shaped (d_model, num_heads * d_head); head h takes columns h*d_head:(h+1)*d_head. Heads are
concatenated and multiplied by `w_o` (plus `b_o`) when given. With `num_kv_heads` smaller than
`num_heads`, query head h reads key/value head h // (num_heads // num_kv_heads) (GQA; MQA when 1).
`attn_mask` broadcasts to the per-head scores (..., num_heads, L, S): pass (L, S) for one mask
for everything, or (B, 1, L, S) for one mask per batch entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from .attention import Steps, attend_all, build_mask
from .linalg import matmul_nt, transpose_rows
from .nested import at, stack
from .validate import (
    as_matrix,
    as_tensor,
    as_vector,
    check_flag,
    check_head_counts,
    check_masked_rows,
    check_projections,
    check_scale,
    check_value_has_key,
)


def project(x: list, lead: tuple[int, ...], w: list | None, b: list | None) -> list:
    """x @ w + b over every leading index: (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)."""
    if w is None:
        return x
    wt = transpose_rows(w)  # (d_out, d_in): its rows are w's columns
    blocks = []
    for index in product(*map(range, lead)):
        out = matmul_nt(at(x, index), wt)  # (n, d_in) @ (d_in, d_out) -> (n, d_out)
        if b is not None:
            out = [[o + c for o, c in zip(row, b)] for row in out]
        blocks.append(out)
    return stack(blocks, lead)


def _width(m: list, lead: tuple[int, ...]) -> int:
    """Size of the last axis of a (..., n, width) nested list."""
    return len(at(m, (0,) * len(lead))[0])


def split_heads(m: list, lead: tuple[int, ...], heads: int) -> list:
    """(..., n, heads * d) -> (..., heads, n, d): head h is the column block h*d:(h+1)*d."""
    blocks = []
    for index in product(*map(range, lead)):
        rows = at(m, index)  # (n, heads * d)
        d = len(rows[0]) // heads
        blocks.append([[row[h * d : (h + 1) * d] for row in rows] for h in range(heads)])
    return stack(blocks, lead)


def concat_heads(heads_out: list, lead: tuple[int, ...]) -> list:
    """(..., heads, L, d) -> (..., L, heads * d), heads side by side."""
    blocks = []
    for index in product(*map(range, lead)):
        per_head = at(heads_out, index)  # (heads, L, d)
        blocks.append([[c for h in per_head for c in h[i]] for i in range(len(per_head[0]))])
    return stack(blocks, lead)


@dataclass
class Projected:
    """Validated multi-head inputs and every intermediate of the computation."""

    lead: tuple[int, ...]
    q: list  # (..., L, num_heads * d_head)
    k: list  # (..., S, num_kv_heads * d_head)
    v: list  # (..., S, num_kv_heads * d_v)
    heads: list[Steps]  # one per (..., head), row-major
    concat: list  # (..., L, num_heads * d_v)
    output: list  # (..., L, d_out)
    scale: float


def _weight(w: object, name: str, rows: int, heads: int, width_name: str):
    """Validate a projection (rows, heads * d); return (matrix, d)."""
    if w is None:
        return None, None
    m, (r, c) = as_matrix(w, name)
    if r != rows:
        raise ValueError(
            f"{name}: expected {rows} rows to match the input width, found shape {(r, c)}"
        )
    if c % heads:
        raise ValueError(
            f"{name}: {c} columns do not split into {heads} heads of equal width ({width_name})"
        )
    return m, c // heads


def run_multi_head(
    query,
    key,
    value,
    w_q,
    w_k,
    w_v,
    w_o,
    *,
    num_heads,
    num_kv_heads,
    b_q,
    b_k,
    b_v,
    b_o,
    attn_mask,
    is_causal,
    scale,
    masked_rows,
) -> Projected:
    """Validate everything, project, split heads, attend, concatenate, project out."""
    check_value_has_key(key, value)
    H, Hkv = check_head_counts(num_heads, num_kv_heads)
    masked_rows = check_masked_rows(masked_rows)
    check_flag(is_causal, "is_causal")
    x, x_shape = as_tensor(query, "query", min_dims=2)
    xk, k_shape = (x, x_shape) if key is None else as_tensor(key, "key", min_dims=2)
    xv, v_shape = (xk, k_shape) if value is None else as_tensor(value, "value", min_dims=2)
    lead = x_shape[:-2]
    for name, shape in (("key", k_shape), ("value", v_shape)):
        if shape[:-2] != lead:
            raise ValueError(f"{name}: leading dims must match query's {lead}, found shape {shape}")
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(
            f"value: length must match key's (S = {k_shape[-2]}), found shape {v_shape}"
        )
    L, S = x_shape[-2], k_shape[-2]
    wq, dq = _weight(w_q, "w_q", x_shape[-1], H, "num_heads")
    wk, dk = _weight(w_k, "w_k", k_shape[-1], Hkv, "num_kv_heads")
    wv, _ = _weight(w_v, "w_v", v_shape[-1], Hkv, "num_kv_heads")
    bq = None if b_q is None else as_vector(b_q, "b_q", len(wq[0]) if wq else x_shape[-1])
    bk = None if b_k is None else as_vector(b_k, "b_k", len(wk[0]) if wk else k_shape[-1])
    bv = None if b_v is None else as_vector(b_v, "b_v", len(wv[0]) if wv else v_shape[-1])
    # step 1: projections, weights on the right as in the seed notebooks
    q = project(x, lead, wq, bq)  # (..., L, d_model) @ (d_model, H*d_head) -> (..., L, H*d_head)
    k = project(xk, lead, wk, bk)  # (..., S, d_kv) @ (d_kv, Hkv*d_head) -> (..., S, Hkv*d_head)
    v = project(xv, lead, wv, bv)  # (..., S, d_kv) @ (d_kv, Hkv*d_v) -> (..., S, Hkv*d_v)
    q_width, k_width, v_width = (_width(m, lead) for m in (q, k, v))
    for name, width, heads in (
        ("query", q_width, H),
        ("key", k_width, Hkv),
        ("value", v_width, Hkv),
    ):
        if width % heads:
            raise ValueError(f"{name}: width {width} does not split into {heads} heads")
    d_head = q_width // H
    if k_width // Hkv != d_head:
        raise ValueError(
            f"w_k: key heads are {k_width // Hkv} wide but query heads are {d_head} wide "
            f"(w_q gives {dq}, w_k gives {dk})"
        )
    scale = check_scale(scale, d_head)
    head_lead = lead + (H,)
    mask = build_mask(attn_mask, is_causal, head_lead + (L, S))
    # step 2: split the heads and attend; query head h reads kv head h // (H // Hkv)
    q_heads = split_heads(q, lead, H)  # (..., H, L, d_head)
    k_heads = split_heads(k, lead, Hkv)  # (..., Hkv, S, d_head)
    v_heads = split_heads(v, lead, Hkv)  # (..., Hkv, S, d_v)
    heads = attend_all(
        q_heads, k_heads, v_heads, head_lead, scale, mask, masked_rows, group=H // Hkv
    )
    # step 3: heads side by side, then the output projection
    concat = concat_heads(stack([s.output for s in heads], head_lead), lead)  # (..., L, H * d_v)
    output = concat
    if w_o is not None:
        wo, (r, c) = as_matrix(w_o, "w_o")
        if r != _width(concat, lead):
            raise ValueError(
                f"w_o: expected {_width(concat, lead)} rows (num_heads * d_v), found shape {(r, c)}"
            )
        bo = None if b_o is None else as_vector(b_o, "b_o", c)
        output = project(concat, lead, wo, bo)  # (..., L, H * d_v) @ (H * d_v, d_out)
    elif b_o is not None:
        raise ValueError("b_o: given without w_o; expected w_o as well")
    return Projected(lead, q, k, v, heads, concat, output, scale)


def multi_head_attention(
    query: object,
    key: object,
    value: object,
    w_q: object,
    w_k: object,
    w_v: object,
    w_o: object = None,
    *,
    num_heads: int = 1,
    num_kv_heads: int | None = None,
    b_q: object = None,
    b_k: object = None,
    b_v: object = None,
    b_o: object = None,
    attn_mask: object = None,
    is_causal: bool = False,
    scale: float | None = None,
    masked_rows: str = "zero",
) -> tuple[list, list]:
    """Project, attend per head, concatenate, project out -> (output, weights (..., H, L, S))."""
    check_projections(w_q, w_k, w_v)
    run = run_multi_head(
        query,
        key,
        value,
        w_q,
        w_k,
        w_v,
        w_o,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        b_q=b_q,
        b_k=b_k,
        b_v=b_v,
        b_o=b_o,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        masked_rows=masked_rows,
    )
    weights = stack([s.weights for s in run.heads], run.lead + (num_heads,))  # (..., H, L, S)
    return run.output, weights

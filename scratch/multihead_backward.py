"""The backward pass of multi-head attention with projections, in plain Python.

Forward (multihead.py): q = x @ w_q + b_q, k = xk @ w_k + b_k, v = xv @ w_v + b_v, heads split
by columns, each head attends, heads concatenated, output = concat @ w_o + b_o. Backward, given
dO = d loss / d output:

    d_concat = dO @ w_o^T            d_w_o = concat^T @ dO      d_b_o = column sums of dO
    each head: (dq_h, dk_h, dv_h) from backward.backward_head (GQA: kv heads sum their group)
    d_w_q = x^T @ dq                 d_b_q = column sums of dq  (likewise for k and v)
    d_x = dq @ w_q^T (+ dk @ w_k^T + dv @ w_v^T where x also made the keys and values)

Every entry is one fsum over all of its terms (over every leading index and row for the weight
gradients, over every path for an input that feeds several projections).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import fsum

from .attention import build_mask
from .backward import backward_head, key_value_grads
from .linalg import matmul_nt, transpose_rows
from .multihead import run_multi_head, split_heads
from .nested import at, rows, unrows
from .options import Options
from .validate import as_tensor, check_projections


@dataclass(frozen=True)
class MultiHeadGradients:
    """Gradients of every input, weight and bias of multi_head_attention (None: not given)."""

    grad_query: list  # (..., L, d_model)
    grad_key: list | None  # (..., S, d_kv_in), when key was given
    grad_value: list | None  # (..., S, d_kv_in), when value was given
    grad_w_q: list  # (d_model, H * d_head)
    grad_w_k: list
    grad_w_v: list
    grad_w_o: list | None
    grad_b_q: list | None
    grad_b_k: list | None
    grad_b_v: list | None
    grad_b_o: list | None


def _weight_grads(inputs: list, grads: list) -> tuple[list, list]:
    """(inputs^T @ grads, column sums of grads) over all rows: (d_in, d_out), (d_out,)."""
    grad_w = matmul_nt(transpose_rows(inputs), transpose_rows(grads))  # (d_in, N) @ (N, d_out)
    return grad_w, [fsum(col) for col in zip(*grads)]


def multi_head_attention_backward(
    query: object,
    key: object,
    value: object,
    w_q: object,
    w_k: object,
    w_v: object,
    w_o: object = None,
    *,
    grad_output: object,
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
) -> MultiHeadGradients:
    """Gradients of multi_head_attention's output (same arguments) for `grad_output`."""
    check_projections(w_q, w_k, w_v)
    run = run_multi_head(
        query, key, value, w_q, w_k, w_v, w_o, num_heads=num_heads, num_kv_heads=num_kv_heads,
        b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o, attn_mask=attn_mask, is_causal=is_causal,
        scale=scale, masked_rows=masked_rows,
    )  # fmt: skip
    plan, inputs, params = run.plan, run.inputs, run.params
    lead, H, Hkv, L, S = plan.lead, plan.num_heads, plan.num_kv_heads, plan.L, plan.S
    x, xk, xv = inputs["x"], inputs["key_input"], inputs["value_input"]
    wq, wk, wv = params["w_q"], params["w_k"], params["w_v"]
    dO, dO_shape = as_tensor(grad_output, "grad_output", min_dims=2)
    expected = lead + (L, plan.d_out)  # (..., L, d_out)
    if dO_shape != expected:
        raise ValueError(f"grad_output: expected the output's shape {expected}, found {dO_shape}")
    # step 1: through the output projection     d_concat = dO @ w_o^T   (..., L, H * d_v)
    dO_rows, concat_rows = rows(dO, lead), rows(run.concat, lead)
    grad_w_o = grad_b_o = None
    if w_o is not None:
        wo = params["w_o"]
        grad_w_o, grad_b_o = _weight_grads(concat_rows, dO_rows)
        grad_b_o = grad_b_o if b_o is not None else None
        d_concat = matmul_nt(dO_rows, wo)  # (N, d_out) @ (d_out, H*d_v): rows of w_o are w_o^T's
    else:
        d_concat = dO_rows
    d_concat = unrows(d_concat, lead, L)
    # step 2: every head's backward; kv heads of a group summed in one fsum
    mask = build_mask(Options(attn_mask, is_causal), plan.scores_shape)
    q_heads = split_heads(run.q, lead, H)  # (..., H, L, d_head)
    k_heads, v_heads = split_heads(run.k, lead, Hkv), split_heads(run.v, lead, Hkv)
    dO_heads = split_heads(d_concat, lead, H)  # (..., H, L, d_v)
    dq_blocks, dk_blocks, dv_blocks = [], [], []
    for index in product(*map(range, lead)):
        per_head, groups = [], {}
        for h in range(H):
            head_index = index + (h,)
            g = h // plan.group
            head = backward_head(
                at(q_heads, head_index),
                at(k_heads, index + (g,)),
                at(v_heads, index + (g,)),
                at(dO_heads, head_index),
                run.scale,
                mask,
                mask.slice(head_index) if mask is not None else None,
                masked_rows,
            )
            per_head.append(head.grad_query)
            groups.setdefault(g, []).append(head)
        dq_blocks.append([[c for h in per_head for c in h[i]] for i in range(L)])  # (L, H*d_head)
        kv = [key_value_grads([h.rows() for h in groups[g]], run.scale) for g in range(Hkv)]
        dk_blocks.append([[c for dK, _ in kv for c in dK[j]] for j in range(S)])  # (S, Hkv*d_head)
        dv_blocks.append([[c for _, dV in kv for c in dV[j]] for j in range(S)])  # (S, Hkv*d_v)
    dq, dk, dv = (sum(blocks, []) for blocks in (dq_blocks, dk_blocks, dv_blocks))  # all rows
    # step 3: through the input projections     d_w = x^T @ d, d_b = column sums of d
    x_rows, xk_rows, xv_rows = rows(x, lead), rows(xk, lead), rows(xv, lead)
    grad_w_q, grad_b_q = _weight_grads(x_rows, dq)
    grad_w_k, grad_b_k = _weight_grads(xk_rows, dk)
    grad_w_v, grad_b_v = _weight_grads(xv_rows, dv)
    # step 4: the inputs: one fsum over every projection an input feeds
    #   d_x = [dq | dk | dv] @ [w_q | w_k | w_v]^T when x made queries, keys and values
    paths = {"query": [(dq, wq)], "key": [], "value": []}
    paths["query" if key is None else "key"].append((dk, wk))
    source_v = "query" if key is None else ("key" if value is None else "value")
    paths[source_v].append((dv, wv))
    grads = {}
    for name, pairs in paths.items():
        if not pairs:
            grads[name] = None
            continue
        d = [sum((g[i] for g, _ in pairs), []) for i in range(len(pairs[0][0]))]  # (N, sum m)
        w = [sum((wm[c] for _, wm in pairs), []) for c in range(len(pairs[0][1]))]  # (d_in, sum m)
        grads[name] = unrows(matmul_nt(d, w), lead, L if name == "query" else S)
    return MultiHeadGradients(
        grads["query"],
        grads["key"],
        grads["value"],
        grad_w_q,
        grad_w_k,
        grad_w_v,
        grad_w_o,
        grad_b_q if b_q is not None else None,
        grad_b_k if b_k is not None else None,
        grad_b_v if b_v is not None else None,
        grad_b_o,
    )

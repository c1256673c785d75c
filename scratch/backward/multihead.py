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

from dataclasses import dataclass, replace
from itertools import product
from math import fsum

from scratch.backward.sdpa import backward_heads
from scratch.core.attention import Gradients, heads_of
from scratch.core.front_doors import multi_head_door
from scratch.core.multihead import Projected, concat_heads, run_multi_head, split_heads
from scratch.core.options import Options
from scratch.ops.linalg import matmul_nt, transpose_rows
from scratch.ops.nested import at, rows, stack, unrows
from scratch.ops.plan import PARAMS
from scratch.ops.validate import as_tensor, check_grad_output


@dataclass(frozen=True)
class MultiHeadGradients:
    """Gradients of every input, weight and bias of multi_head_attention (None: not given).

    Attributes:
        grad_query: (..., L, d_model).
        grad_key: (..., S, d_kv_in), when key was given.
        grad_value: (..., S, d_kv_in), when value was given.
        grad_w_q: (d_model, H * E).
        grad_w_k: (d_kv_in, Hkv * E).
        grad_w_v: (d_kv_in, Hkv * Ev).
        grad_w_o: (H * Ev, d_out), when w_o was given.
        grad_b_q: (H * E,), when b_q was given.
        grad_b_k: (Hkv * E,), when b_k was given.
        grad_b_v: (Hkv * Ev,), when b_v was given.
        grad_b_o: (d_out,), when b_o was given.
    """

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


@dataclass(frozen=True)
class BackwardRun:
    """Every intermediate of the multi-head backward, each in its forward step's layout."""

    forward: Projected
    grad_output: list  # dO (..., L, d_out)
    grad_concat: list  # (..., L, H * d_v): dO @ w_o^T, or dO itself without w_o
    heads: list[Gradients]  # one per (..., head), row-major: dP, D, dS, dQ of each head
    grad_q: list  # (..., L, H * d_head)
    grad_k: list  # (..., S, Hkv * d_head), each kv head summed over its group
    grad_v: list  # (..., S, Hkv * d_v)
    grad_params: dict[str, list]  # grad_w_q, ..., grad_b_o for the weights and biases given
    grad_inputs: dict[str, list | None]  # grad of query, key and value inputs (None: not given)


def _weight_grads(inputs: list, grads: list) -> tuple[list, list]:
    """(inputs^T @ grads, column sums of grads) over all rows: (d_in, d_out), (d_out,)."""
    grad_w = matmul_nt(transpose_rows(inputs), transpose_rows(grads))  # (d_in, N) @ (N, d_out)
    return grad_w, [fsum(col) for col in zip(*grads)]


def run_backward(run: Projected, grad_output: object, rng: object = None) -> BackwardRun:
    """The backward of one validated forward run for dO = `grad_output` (..., L, d_out).

    With dropout, `rng` must be in the state the forward's rng was in before the forward."""
    plan, params, options = run.plan, run.params, run.options
    lead, H, Hkv, L, S = plan.lead, plan.num_heads, plan.num_kv_heads, plan.L, plan.S
    dO, dO_shape = as_tensor(grad_output, "grad_output", min_dims=2)
    check_grad_output(dO_shape, lead + (L, plan.d_out))  # (..., L, d_out)
    grads = {}
    # step 1: through the output projection     d_concat = dO @ w_o^T   (..., L, H * d_v)
    dO_rows = rows(dO, lead)
    d_concat = dO_rows
    if "w_o" in params:
        grads["grad_w_o"], grad_b_o = _weight_grads(rows(run.concat, lead), dO_rows)
        if "b_o" in params:
            grads["grad_b_o"] = grad_b_o
        d_concat = matmul_nt(dO_rows, params["w_o"])  # (N, d_out) @ (d_out, H*d_v)
    d_concat = unrows(d_concat, lead, L)
    # step 2: every head's backward; kv heads of a group summed in one fsum
    q_heads = split_heads(run.q, lead, H)  # (..., H, L, d_head)
    k_heads, v_heads = split_heads(run.k, lead, Hkv), split_heads(run.v, lead, Hkv)
    dO_heads = split_heads(d_concat, lead, H)  # (..., H, L, d_v)
    inputs = [  # (Head, dO (L, d_v)) of every (..., head), row-major
        (head, at(dO_heads, head.index))
        for head in heads_of(q_heads, k_heads, v_heads, plan.head_lead, plan.group, run.mask)
    ]
    head_options = replace(options, rng=rng)  # the forward's dropout, drawn again from rng
    heads, kv = backward_heads(inputs, run.scale, run.mask, head_options)
    kv_lead = lead + (Hkv,)
    kv_heads = [kv[index] for index in product(*map(range, kv_lead))]  # row-major
    grad_q = concat_heads(stack([g.grad_query for g in heads], plan.head_lead), lead)
    grad_k = concat_heads(stack([dK for dK, _ in kv_heads], kv_lead), lead)  # (..., S, Hkv*d)
    grad_v = concat_heads(stack([dV for _, dV in kv_heads], kv_lead), lead)  # (..., S, Hkv*d_v)
    dq, dk, dv = (rows(m, lead) for m in (grad_q, grad_k, grad_v))  # every row, all leads
    # step 3: through the input projections     d_w = x^T @ d, d_b = column sums of d
    x_rows = {name: rows(data, lead) for name, data in run.inputs.items()}
    sources = {"q": "x", "k": "key_input", "v": "value_input"}
    for name, d in (("q", dq), ("k", dk), ("v", dv)):
        if f"w_{name}" in params:
            grads[f"grad_w_{name}"], grad_b = _weight_grads(x_rows[sources[name]], d)
        else:
            grad_b = [fsum(col) for col in zip(*d)]
        if f"b_{name}" in params:
            grads[f"grad_b_{name}"] = grad_b
    # step 4: the inputs: one fsum over every projection an input feeds
    #   d_x = [dq | dk | dv] @ [w_q | w_k | w_v]^T when x made queries, keys and values
    cross = run.inputs["key_input"] is not run.inputs["x"]  # key given: its own gradient
    separate_value = run.inputs["value_input"] is not run.inputs["key_input"]
    paths = {"query": [(dq, "w_q")], "key": [], "value": []}
    paths["key" if cross else "query"].append((dk, "w_k"))
    paths["value" if separate_value else ("key" if cross else "query")].append((dv, "w_v"))
    grad_inputs = {}
    for name, pairs in paths.items():
        if not pairs:
            grad_inputs[name] = None
            continue
        # d @ w^T per path, all paths in one fsum: [d1 | d2] @ [w1 | w2]^T; no w: the identity
        d = [sum((g[i] for g, _ in pairs), []) for i in range(len(pairs[0][0]))]  # (N, sum m)
        ws = [params.get(w) or _identity(len(g[0])) for g, w in pairs]
        w = [sum((wm[c] for wm in ws), []) for c in range(len(ws[0]))]  # (d_in, sum m)
        grad_inputs[name] = unrows(matmul_nt(d, w), lead, L if name == "query" else S)
    return BackwardRun(run, dO, d_concat, heads, grad_q, grad_k, grad_v, grads, grad_inputs)


def _identity(n: int) -> list[list[float]]:
    """The (n, n) identity: the 'projection' of an input used as it is."""
    return [[float(i == j) for j in range(n)] for i in range(n)]


def gradients_with_heads(
    query: object,
    key: object,
    value: object,
    params: dict,
    heads: tuple,
    options: Options,
    *,
    grad_output: object,
) -> MultiHeadGradients:
    """Gradients of multi_head_attention's output (same arguments) for `grad_output`.

    `grad_output` (keyword, required: it travels in **more) is dO (..., L, d_out).

    Returns:
        A MultiHeadGradients: every input's, weight's and bias's gradient.
    """
    run = run_multi_head(query, key, value, params, heads, options)
    back = run_backward(run, grad_output)
    return MultiHeadGradients(
        back.grad_inputs["query"],
        back.grad_inputs["key"] if key is not None else None,
        back.grad_inputs["value"] if value is not None else None,
        **{f"grad_{name}": back.grad_params.get(f"grad_{name}") for name in PARAMS},
    )


multi_head_attention_backward = multi_head_door(gradients_with_heads)

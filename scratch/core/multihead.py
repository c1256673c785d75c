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

from scratch.core.attention import Steps, attend_all, build_mask
from scratch.core.front_doors import multi_head_door
from scratch.core.masks import Mask
from scratch.core.options import Options
from scratch.core.variant_steps import attend_variant_all
from scratch.ops.linalg import matmul_nt, transpose_rows
from scratch.ops.nested import at, stack
from scratch.ops.plan import HeadPlan, plan_multi_head
from scratch.ops.validate import as_tensor, check_value_has_key


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


@dataclass(frozen=True)
class Projected:
    """Validated multi-head inputs and every intermediate of the computation."""

    plan: HeadPlan
    inputs: dict[str, list]  # x (..., L, d_model), key_input and value_input (..., S, d)
    params: dict[str, list]  # the projections and biases given: w_q, ..., b_o
    options: Options
    mask: Mask | None  # broadcast to the per-head scores (..., H, L, S)
    q: list  # (..., L, num_heads * d_head)
    k: list  # (..., S, num_kv_heads * d_head)
    v: list  # (..., S, num_kv_heads * d_v)
    heads: list[Steps]  # one per (..., head), row-major
    concat: list  # (..., L, num_heads * d_v)
    output: list  # (..., L, d_out)
    scale: float

    @property
    def lead(self) -> tuple[int, ...]:
        """The batch dims shared by every input."""
        return self.plan.lead


def _read(obj: object, name: str, min_dims: int) -> tuple[list | None, tuple[int, ...] | None]:
    """An optional numeric input as nested lists with its shape; (None, None) when not given."""
    return (None, None) if obj is None else as_tensor(obj, name, min_dims=min_dims)


def run_multi_head(
    query: object,
    key: object,
    value: object,
    params: dict[str, object],
    heads: tuple[object, object],
    options: Options,
    on_projected: object = None,
) -> Projected:
    """Validate everything, project, split heads, attend, concatenate, project out;
    `on_projected` (None or a function) is called with (q, k, v, scale) before attention."""
    check_value_has_key(key, value)
    x, x_shape = as_tensor(query, "query", min_dims=2)
    xk, k_shape = (x, x_shape) if key is None else as_tensor(key, "key", min_dims=2)
    xv, v_shape = (xk, k_shape) if value is None else as_tensor(value, "value", min_dims=2)
    read = {
        name: as_tensor(obj, name, min_dims=1 if name[0] == "b" else 2)
        for name, obj in params.items()
        if obj is not None
    }
    shapes = {name: shape for name, (_, shape) in read.items()}
    H, Hkv = heads
    plan = plan_multi_head(x_shape, k_shape, v_shape, num_heads=H, num_kv_heads=Hkv, **shapes)
    params = {name: data for name, (data, _) in read.items()}
    wq, wk, wv, wo = (params.get(name) for name in ("w_q", "w_k", "w_v", "w_o"))
    bq, bk, bv, bo = (params.get(name) for name in ("b_q", "b_k", "b_v", "b_o"))
    lead, H, Hkv = plan.lead, plan.num_heads, plan.num_kv_heads
    # step 1: projections, weights on the right as in the seed notebooks
    q = project(x, lead, wq, bq)  # (..., L, d_model) @ (d_model, H*d_head) -> (..., L, H*d_head)
    k = project(xk, lead, wk, bk)  # (..., S, d_kv) @ (d_kv, Hkv*d_head) -> (..., S, Hkv*d_head)
    v = project(xv, lead, wv, bv)  # (..., S, d_kv) @ (d_kv, Hkv*d_v) -> (..., S, Hkv*d_v)
    scale = options.scale_for(plan.d_head)
    if on_projected is not None:  # before attention: a caller can start work on them
        on_projected(q, k, v, scale)
    # a variant's mask is its rule, read cell by cell (scratch.core.variant_steps): no Mask here
    mask = None if options.variant is not None else build_mask(options, plan.scores_shape)
    # steps 2-6: split the heads and attend; query head h reads kv head h // (H // Hkv)
    q_heads = split_heads(q, lead, H)  # (..., H, L, d_head)
    k_heads = split_heads(k, lead, Hkv)  # (..., Hkv, S, d_head)
    v_heads = split_heads(v, lead, Hkv)  # (..., Hkv, S, d_v)
    if options.variant is not None:  # RoPE, score change, mask, sinks: scratch.core.variant_steps
        heads = attend_variant_all(q_heads, k_heads, v_heads, plan.head_lead, scale, options,
                                   plan.group)  # fmt: skip
    else:
        heads = attend_all(
            q_heads,
            k_heads,
            v_heads,
            plan.head_lead,
            scale,
            mask,
            options.masked_rows,
            options.dropout_p,  # 0 from multi_head_attention; trace_attention may ask for it
            options.rng,
            group=plan.group,
        )
    # steps 7-8: heads side by side, then the output projection
    concat = concat_heads(stack([s.output for s in heads], plan.head_lead), lead)  # (..., L, H*d_v)
    output = concat if wo is None else project(concat, lead, wo, bo)  # (..., L, d_out)
    inputs = {"x": x, "key_input": xk, "value_input": xv}
    return Projected(plan, inputs, params, options, mask, q, k, v, heads, concat, output, scale)


def attention_with_heads(
    query: object, key: object, value: object, params: dict, heads: tuple, options: Options
) -> tuple[list, list]:
    """Project, attend per head, concatenate, project out, in plain Python.

    Returns:
        (output (..., L, d_out), weights (..., H, L, S)); d_out is H * Ev without w_o.
    """
    run = run_multi_head(query, key, value, params, heads, options)
    weights = stack([s.weights for s in run.heads], run.plan.head_lead)  # (..., H, L, S)
    return run.output, weights


multi_head_attention = multi_head_door(attention_with_heads)

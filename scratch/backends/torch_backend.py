"""PyTorch backend: the public functions, on CPU or CUDA (the math is in torch_math/torch_compat).

Two kernels, chosen once per call and recorded in `Result.kernel`, never swapped silently:

- "explicit" (need_weights=True, and every trace): scores = q @ k^T, scale, mask, softmax with the
  row max subtracted, the masked_rows policy, dropout, then weights @ v (torch_math.attend; float32
  math for float16/bfloat16, as fused GPU kernels do).
- "torch-sdpa" (need_weights=False): `torch.nn.functional.scaled_dot_product_attention`, then the
  masked_rows policy applied to rows whose keys are all masked (torch_compat.fused).

`return_lse=True` (scaled_dot_product_attention) returns `(output, lse)` as an LseResult: lse
(..., L) is each row's natural-log log-sum-exp of the masked scores in the math dtype (float32
for 16-bit storage, as torch's flash kernels keep it), -inf on rows with every key masked; from
the explicit kernel's row max and sum, or beside the fused output (torch_compat.fused_with_lse).

Each public function keeps PyTorch's keyword arguments and turns them into one `Options` (mask,
scale, masked_rows, dropout), one `Placement` (device, storage dtype) and, for multi-head, one
`HeadPlan` from `plan_multi_head`; only those travel inward. Inputs may be nested lists, NumPy
arrays or tensors (torch_inputs); results are tensors on the backend's device in the common
floating dtype of the data inputs (nested lists count as float64) or in `dtype=`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import torch

from scratch.backends.array_common import (
    attend_variant,
    multi_head_inputs,
)
from scratch.backends.torch_compat import fused, fused_with_lse
from scratch.backends.torch_flex_explicit import variant_steps
from scratch.backends.torch_inputs import DTYPES, Placement, as_device, generator, placement
from scratch.backends.torch_math import (
    Attended,
    Heads,
    attend,
    build_mask,
    concat_heads,
    project,
    split_heads,
)
from scratch.core.example import Example, check_trace_call
from scratch.core.front_doors import forward_door, multi_head_door, trace_door
from scratch.core.options import Options
from scratch.core.result import LseResult, Result
from scratch.ops import validate
from scratch.ops.plan import HeadPlan, plan_attention
from scratch.trace.forward import Trace, check_one_example, trace_of
from scratch.variants import GivenMask

NAME = "torch"
KERNELS = ("explicit", "torch-sdpa")
NOTES = (
    "explicit: q @ k^T, softmax and weights @ v written out in torch (float32 math for "
    "float16/bfloat16); torch-sdpa: torch.nn.functional.scaled_dot_product_attention "
    "(need_weights=False) with the masked_rows policy applied afterwards"
)
_QKV = ("query", "key", "value")


# ---------------------------------------------------------------- one head (or a stack of them)


def attention_result(
    query, key, value, options: Options, *, rng=None, need_weights=True, dtype=None,
    device="cpu",
) -> Result | LseResult:  # fmt: skip
    """Attention in torch: explicit with weights, torch's fused SDPA without (see module doc).

    rng stays out of Options: here it is an int seed or a torch.Generator, not a random.Random."""
    place = placement((query, key, value), dtype, device)
    q, k, v = (place.tensor(obj, name) for obj, name in zip((query, key, value), _QKV))
    plan = plan_attention(tuple(q.shape), tuple(k.shape), tuple(v.shape), options.enable_gqa)
    scale = options.scale_for(plan.E)
    fast = not validate.check_flag(need_weights, "need_weights")
    mask = build_mask(options, plan.scores_shape, place.device, fused=fast)
    heads = Heads(q, k, v, mask, scale, options, plan.group, generator(rng, place.device))
    if fast and options.return_lse:
        output, lse, how = fused_with_lse(heads)
        return LseResult(output, lse, None, "torch-sdpa", how)
    if fast:
        return Result(fused(heads), None, "torch-sdpa")
    steps = attend(heads, place)
    if options.return_lse:
        return LseResult(steps.output, steps.lse, steps.weights, "explicit")
    return Result(steps.output, steps.weights, "explicit")


scaled_dot_product_attention = forward_door(attention_result, own_rng=True)


# ---------------------------------------------------------------- multi-head


@dataclass(frozen=True)
class MultiHead:
    """One multi-head call as tensors: its plan, options, inputs and projections."""

    plan: HeadPlan
    options: Options
    place: Placement
    inputs: dict[str, torch.Tensor]  # x (..., L, d_model), key_input and value_input (..., S, d)
    params: dict[str, torch.Tensor | None]  # w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o
    q: torch.Tensor  # (..., L, H * d_head)
    k: torch.Tensor  # (..., S, Hkv * d_head)
    v: torch.Tensor  # (..., S, Hkv * d_v)
    mask: torch.Tensor | None  # broadcast to the per-head scores (..., H, L, S)
    scale: float


def _run_multi_head(
    query, key, value, params: dict, heads: tuple, options: Options, dtype, device, fast: bool
) -> MultiHead:
    """Convert the inputs, plan the heads once from their shapes, project (`fast`: for SDPA)."""
    place = placement((query, key, value, *params.values()), dtype, device)
    x, kx, vx, tensors, plan = multi_head_inputs(query, key, value, params, heads, place.tensor)
    # step 1: projections (an input without one is used as it is, as in a trace)
    q, k, v = (
        t if tensors[f"w_{n}"] is None else project(t, tensors[f"w_{n}"], tensors[f"b_{n}"], place)
        for n, t in zip("qkv", (x, kx, vx))
    )  # (..., n, d_in) @ (d_in, heads * d) -> (..., n, heads * d)
    scale = options.scale_for(plan.d_head)
    mask = build_mask(options, plan.scores_shape, place.device, fast)  # (..., H, L, S) or less
    inputs = {"x": x, "key_input": kx, "value_input": vx}
    return MultiHead(plan, options, place, inputs, tensors, q, k, v, mask, scale)


def _attend_heads(run: MultiHead, need_weights: bool) -> tuple[torch.Tensor, Attended | None]:
    """Split the heads and attend: explicit with every step kept, or fused without weights."""
    H, Hkv = run.plan.num_heads, run.plan.num_kv_heads
    # split the projected q, k, v into heads
    q = split_heads(run.q, H)  # (..., L, H*d) -> (..., H, L, d)
    k = split_heads(run.k, Hkv)  # (..., S, Hkv*d) -> (..., Hkv, S, d)
    v = split_heads(run.v, Hkv)  # (..., S, Hkv*dv) -> (..., Hkv, S, dv)
    # steps 2-6: attention per head
    heads = Heads(q, k, v, run.mask, run.scale, run.options, run.plan.group)
    if need_weights:
        steps = attend(heads, run.place)
        return steps.output, steps  # (..., H, L, dv)
    return fused(heads), None


def _project_out(run: MultiHead, concat: torch.Tensor) -> torch.Tensor:
    """Step 4: the output projection (..., L, H*dv) @ (H*dv, d_out), when there is one."""
    w_o, b_o = run.params["w_o"], run.params["b_o"]
    return concat if w_o is None else project(concat, w_o, b_o, run.place)


def heads_result(
    query, key, value, params: dict, heads: tuple, options: Options, *, need_weights=True,
    dtype=None, device="cpu",
) -> Result:  # fmt: skip
    """Project, split heads, attend (explicit or fused), concatenate, project out -- in torch."""
    need_weights = validate.check_flag(need_weights, "need_weights")
    run = _run_multi_head(
        query, key, value, params, heads, options, dtype, device, not need_weights
    )
    heads_out, steps = _attend_heads(run, need_weights)
    output = _project_out(run, concat_heads(heads_out))  # (..., L, H*dv) -> (..., L, d_out)
    if steps is None:
        return Result(output, None, "torch-sdpa")
    return Result(output, steps.weights, "explicit")


multi_head_attention = multi_head_door(heads_result)


def trace_example(
    example: Example,
    options: Options,
    *,
    dtype=None,
    on_projected=None,
    device="cpu",
    backend_name: str = "torch-cpu",
) -> Trace:
    """Every intermediate of one worked example as tensors: the truth's steps, names and axes
    (no dropout). `on_projected`: as the NumPy backend's, with the tensors the trace will hold."""
    check_trace_call(example, options, on_projected, no_dropout="the torch trace")
    key, value = example.key, example.value
    heads = (example.num_heads, example.num_kv_heads)
    variant = options.variant is not None  # then torch_variant_trace attends, below
    projecting = (
        replace(options, attn_mask=None, is_causal=False, variant=None) if variant else options
    )
    run = _run_multi_head(
        example.x, key, value, example.projections(), heads, projecting, dtype, device, fast=False
    )
    check_one_example(run.inputs["x"].ndim)
    if on_projected is not None:  # before attention: a caller can start work on them
        on_projected(run.q, run.k, run.v, run.scale)
    extras = {}
    if variant:  # torch_flex's explicit path, every step kept, in the wide dtype
        H, Hkv, wide = run.plan.num_heads, run.plan.num_kv_heads, run.place.wide
        q, k, v = (split_heads(t, n).to(wide) for t, n in ((run.q, H), (run.k, Hkv), (run.v, Hkv)))
        found, extras = attend_variant(
            q, k, v, run.scale, options, torch, partial(variant_steps, wide=wide),
            stored=lambda t: t.to(run.place.storage),
        )  # fmt: skip
        heads_out, s = found["output"], Attended(**found)
    else:
        heads_out, s = _attend_heads(run, need_weights=True)  # (H, L, dv), every step kept
    concat = concat_heads(heads_out)  # (H, L, dv) -> (L, H*dv)
    H, storage = run.plan.num_heads, run.place.storage
    w_o = run.params["w_o"]
    output = heads_out[0] if H == 1 and w_o is None else _project_out(run, concat)
    values = {**run.inputs, "q": run.q, "k": run.k, "v": run.v, "weights": s.weights}
    values.update(head_outputs=heads_out, concat=concat, output=output)
    values.update(scores=s.scores.to(storage), scaled=s.scaled.to(storage))
    values.update(masked=s.masked.to(storage))
    # a given attn_mask's kind; None when a variant attended (a drawn mask as the variant
    # GivenMask, with no SDPA mask built: run.mask is None)
    given = isinstance(options.attention_variant, GivenMask) and run.mask is not None
    is_bool = run.mask.dtype == torch.bool if given else None
    source = (backend_name, str(storage).removeprefix("torch."))
    return trace_of(
        example, options, run.plan, run.scale, values, params=run.params, extras=extras,
        join_heads=concat_heads, is_bool=is_bool, source=source,
    )  # fmt: skip


trace_attention = trace_door(trace_example)


def functions(device: str = "cpu") -> dict[str, Callable]:
    """The public functions bound to one device ("cpu" or "cuda")."""
    name = f"torch-{torch.device(device).type}"
    device = as_device(device)
    return {
        "scaled_dot_product_attention": partial(scaled_dot_product_attention, device=device),
        "multi_head_attention": partial(multi_head_attention, device=device),
        "trace_attention": partial(trace_attention, device=device, backend_name=name),
        "trace_example": partial(trace_example, device=device, backend_name=name),
    }


__all__ = [
    "DTYPES",
    "KERNELS",
    "NAME",
    "NOTES",
    "functions",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "trace_attention",
    "trace_example",
]

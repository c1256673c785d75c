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
from functools import partial

import torch

from scratch.backends.array_common import HeadOps, attend_variant, concat_heads, run_heads
from scratch.backends.torch_compat import fused, fused_with_lse
from scratch.backends.torch_flex_explicit import variant_steps
from scratch.backends.torch_inputs import DTYPES, Placement, as_device, generator, placement
from scratch.backends.torch_math import Heads, attend, build_mask, project
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


def _head_ops(place: Placement, options: Options, need_weights: bool = True) -> HeadOps:
    """This backend's pieces of the one multi-head flow (array_common.run_heads): explicit with
    every step kept, or torch's fused SDPA without weights."""

    def attend_heads(q, k, v, scale: float, plan: HeadPlan) -> tuple:
        mask = build_mask(options, plan.scores_shape, place.device, not need_weights)
        heads = Heads(q, k, v, mask, scale, options, plan.group)  # mask (..., H, L, S) or less
        if not need_weights:
            return None, fused(heads), mask, "torch-sdpa", ""
        steps = attend(heads, place)
        return steps, steps.output, mask, "explicit", ""

    def variant(q, k, v, scale: float) -> tuple[dict, dict]:  # torch_flex's explicit path
        wide = place.wide  # every step in the wide dtype, the results stored
        q, k, v = (t.to(wide) for t in (q, k, v))
        return attend_variant(
            q, k, v, scale, options, torch, partial(variant_steps, wide=wide),
            stored=lambda t: t.to(place.storage),
        )  # fmt: skip

    # projections accumulated wide and rounded to storage once
    return HeadOps(place.tensor, partial(project, place=place), attend_heads, variant)


def heads_result(
    query, key, value, params: dict, heads: tuple, options: Options, *, need_weights=True,
    dtype=None, device="cpu",
) -> Result:  # fmt: skip
    """Project, split heads, attend (explicit or fused), concatenate, project out -- in torch."""
    need_weights = validate.check_flag(need_weights, "need_weights")
    place = placement((query, key, value, *params.values()), dtype, device)
    ops = _head_ops(place, options, need_weights)
    run = run_heads(query, key, value, params, heads, options, ops)
    weights = None if run.steps is None else run.steps.weights
    return Result(run.output, weights, run.kernel)


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
    key, value, params = example.key, example.value, example.projections()
    heads = (example.num_heads, example.num_kv_heads)
    place = placement((example.x, key, value, *params.values()), dtype, device)
    run = run_heads(
        example.x, key, value, params, heads, options, _head_ops(place, options),
        on_projected=on_projected, variant=options.variant is not None,
    )  # fmt: skip
    check_one_example(run.inputs["x"].ndim)
    s, storage = run.steps, place.storage
    values = {**run.inputs, "q": run.q, "k": run.k, "v": run.v, "weights": s.weights}
    values.update(head_outputs=run.head_outputs, concat=run.concat, output=run.output)
    values.update(scores=s.scores.to(storage), scaled=s.scaled.to(storage))
    values.update(masked=s.masked.to(storage))
    # a given attn_mask's kind; None when a variant attended (a drawn mask as the variant
    # GivenMask, with no SDPA mask built: run.mask is None)
    given = isinstance(options.attention_variant, GivenMask) and run.mask is not None
    is_bool = run.mask.dtype == torch.bool if given else None
    source = (backend_name, str(storage).removeprefix("torch."))
    return trace_of(
        example, options, run.plan, run.scale, values, params=run.params, extras=run.extras,
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

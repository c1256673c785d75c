"""NumPy backend: the attention pipeline written out in NumPy, explicit and chunked.

Two kernels:

- "explicit" (need_weights=True): scores, scaled, masked, weights and output as whole arrays,
  the same steps as the ground truth.
- "chunked-online-softmax" (need_weights=False): loops over query chunks and streams over key
  blocks with a running max, running denominator and running output, so the extra memory is
  O(chunk * block) and the (L, S) score matrix is never built. A first pass skips the max
  (exp of the raw scores, then checks nothing overflowed and every denominator is >= 1);
  rows that fail it are redone by the online-softmax pass. Large problems spread query
  chunks over worker threads, one per core, with OpenBLAS held to one thread meanwhile.

`return_lse=True` (scaled_dot_product_attention) returns `(output, lse)` as an LseResult: lse
(..., L) is each row's natural-log log-sum-exp of the masked scores, from the explicit kernel's
row max and sum or the chunked kernel's running ones, -inf on rows with every key masked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratch.backends import numpy_chunked
from scratch.backends.array_common import (
    HeadOps,
    Steps,
    attend_variant,
    concat_heads,
    run_heads,
)
from scratch.backends.numpy_flex import softmax_lse, variant_steps
from scratch.backends.numpy_inputs import DTYPES as DTYPES  # the registry reads it here
from scratch.backends.numpy_inputs import Draws, as_mask, as_numbers, block_sizes, result_dtype
from scratch.core.example import Example, check_trace_call
from scratch.core.front_doors import forward_door, multi_head_door, trace_door
from scratch.core.options import Options
from scratch.core.result import LseResult, Result
from scratch.core.variant_support import sdpa_variant
from scratch.ops.plan import HeadPlan, plan_attention
from scratch.ops.validate import check_flag, check_mask_shape
from scratch.trace.forward import Trace, check_one_example, trace_of
from scratch.variants import Causal

NAME = "numpy"
KERNELS = ("explicit", "chunked-online-softmax")
NOTES = "NumPy: explicit with weights; chunked online softmax (O(chunk * block) memory) without"


@dataclass(frozen=True)
class Settings:
    """What only this backend has: result dtype, kernel choice, block sizes, dropout draws."""

    dtype: np.dtype
    need_weights: bool = True
    block_size: object = None  # None, an int (both) or (query chunk, key block)
    draws: Draws | None = None  # uniform draws for dropout; None without dropout


# ---------------------------------------------------------------- mask


def build_mask(
    options: Options, dtype: np.dtype, target: tuple[int, ...], explicit: bool
) -> np.ndarray | None:
    """The mask for scores of shape `target` from the options' variant.

    Bool (True = may attend) or float (added to the scaled scores); None when nothing is
    masked, and for a causal variant on the chunked kernel, which skips the masked blocks itself.
    """
    variant = sdpa_variant(options, "the numpy backend's scaled_dot_product_attention")
    if isinstance(variant, Causal):
        L, S = target[-2:]
        return variant.tile(range(L), range(S)) if explicit else None  # (L, S)
    if variant is not None:  # a given attn_mask, as the user's array
        mask = as_mask(variant.attn_mask, dtype)
        check_mask_shape(mask.shape, target)
        return mask
    return None


# ---------------------------------------------------------------- kernels


def add_mask(scaled: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """scaled + mask in scaled's dtype: -inf added where a bool mask is False, a float mask
    added; scaled itself without a mask."""
    if mask is None:
        return scaled
    if mask.dtype != np.bool_:
        return (scaled + mask).astype(scaled.dtype, copy=False)
    # one pass: + -0.0 where seen (x + -0.0 is x, -0.0 and NaN included), + -inf where not (a
    # NaN or +inf score there stays NaN); the additive mask is made at the mask's own shape
    one = scaled.dtype.type
    return np.add(scaled, np.where(mask, one(-0.0), one(-np.inf)), dtype=scaled.dtype)


def _explicit_steps(q, k, v, scale: float, mask, options: Options, draws) -> Steps:
    """Every intermediate of attention as whole arrays; q (..., L, E), k/v (..., S, E/Ev)."""
    S = k.shape[-2]
    # step 2: scores = q @ k^T                      # (..., L, E) @ (..., E, S) -> (..., L, S)
    scores = q @ np.swapaxes(k, -1, -2)
    # step 3: scaled = scores * scale
    scaled = scores * scores.dtype.type(scale)
    # step 4: masked = scaled + mask: -inf added where a key may not be seen (as in torch's
    # reference, so a NaN or +inf score there still makes the row NaN); float masks are added
    masked = scaled.copy() if mask is None else add_mask(scaled, mask)
    # step 5: weights = softmax of each row (the row max subtracted so exp never overflows) and
    # lse, the log of each row's denominator (-inf on a row where every key is masked)
    weights, lse = softmax_lse(masked)
    full = np.isneginf(lse)[..., None]  # (..., L, 1): rows where every key is masked
    if options.masked_rows == "nan":
        weights = np.where(full, np.nan, weights)
    elif options.masked_rows == "uniform":
        weights = np.where(full, 1.0 / S, weights)
    weights = weights.astype(scaled.dtype, copy=False)
    lse = lse if options.return_lse else None
    # step 5, then: dropout on the weights (kept entries scaled by 1 / (1 - p), dropped ones
    # times 0: 0, but a NaN weight stays NaN, as in torch's dropout)
    p = options.dropout_p
    if p > 0.0:
        keep = draws(weights.shape) >= p
        weights = np.where(keep, weights * weights.dtype.type(1.0 / (1.0 - p)), weights * 0)
        weights = weights.astype(scaled.dtype, copy=False)
    # step 6: output = weights @ v                  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    output = weights @ v
    return Steps(scores, scaled, masked, weights, output, lse)


def _attend(q, k, v, scale, mask, options: Options, settings: Settings, group: int):
    """(Steps or None, output, lse or None, kernel, detail): explicit when weights are wanted,
    else chunked; lse only with options.return_lse."""
    if not settings.need_weights:  # the chunked kernel (numpy_chunked.py)
        chunk, block = block_sizes(settings.block_size)
        output, lse, detail = numpy_chunked.chunked_output(
            q, k, v, scale, mask, options, settings.draws, group, chunk, block
        )
        return None, output, lse, "chunked-online-softmax", detail
    if group > 1:  # query head h uses key/value head h // group
        k = np.repeat(k, group, axis=-3)  # (..., Hkv, S, E) -> (..., Hq, S, E)
        v = np.repeat(v, group, axis=-3)  # (..., Hkv, S, Ev) -> (..., Hq, S, Ev)
    steps = _explicit_steps(q, k, v, scale, mask, options, settings.draws)
    return steps, steps.output, steps.lse, "explicit", ""


# ---------------------------------------------------------------- public functions


def attention_result(
    query, key, value, options: Options, *, rng=None, need_weights=True, dtype=None,
    block_size=None,
) -> Result | LseResult:  # fmt: skip
    """softmax(q @ k^T * scale + mask) @ v in NumPy; weights only when need_weights."""
    check_flag(need_weights, "need_weights")
    dtype = result_dtype(dtype, query, key, value)
    q = as_numbers(query, "query", dtype)
    k = as_numbers(key, "key", dtype)
    v = as_numbers(value, "value", dtype)
    plan = plan_attention(q.shape, k.shape, v.shape, options.enable_gqa)
    draws = Draws(rng) if options.dropout_p > 0.0 else None
    settings = Settings(dtype, need_weights, block_size, draws)
    mask = build_mask(options, dtype, plan.scores_shape, need_weights)
    steps, output, lse, kernel, detail = _attend(
        q, k, v, options.scale_for(plan.E), mask, options, settings, plan.group
    )
    weights = None if steps is None else steps.weights
    if options.return_lse:
        return LseResult(output, lse, weights, kernel, detail)
    return Result(output, weights, kernel, detail)


scaled_dot_product_attention = forward_door(attention_result, own_rng=True)


# ---------------------------------------------------------------- multi-head


def _head_ops(settings: Settings, options: Options) -> HeadOps:
    """This backend's pieces of the one multi-head flow (array_common.run_heads)."""
    dtype = settings.dtype

    def project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        out = x @ w  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
        return out if b is None else out + b

    def attend(q, k, v, scale: float, plan: HeadPlan) -> tuple:
        mask = build_mask(options, dtype, plan.scores_shape, settings.need_weights)
        if not settings.need_weights:
            q = np.ascontiguousarray(q)
        steps, output, _, kernel, detail = _attend(
            q, k, v, scale, mask, options, settings, plan.group
        )
        return steps, output, mask, kernel, detail

    def variant(q, k, v, scale: float) -> tuple[dict, dict]:  # numpy_flex's explicit kernel
        return attend_variant(q, k, v, scale, options, np, variant_steps)

    return HeadOps(lambda obj, name, _: as_numbers(obj, name, dtype), project, attend, variant)


def heads_result(
    query, key, value, params: dict, heads: tuple, options: Options, *, need_weights=True,
    dtype=None, block_size=None,
) -> Result:  # fmt: skip
    """Multi-head (and grouped-query) attention in NumPy; weights (..., H, L, S) when wanted."""
    check_flag(need_weights, "need_weights")
    dtype = result_dtype(dtype, query, key, value, *params.values())
    ops = _head_ops(Settings(dtype, need_weights, block_size), options)
    run = run_heads(query, key, value, params, heads, options, ops)
    weights = None if run.steps is None else run.steps.weights
    return Result(run.output, weights, run.kernel, run.detail)


multi_head_attention = multi_head_door(heads_result)


# ---------------------------------------------------------------- trace


def trace_example(example: Example, options: Options, *, dtype=None, on_projected=None) -> Trace:
    """The ground truth's worked example, every step a NumPy array computed here (no dropout).

    on_projected: None, or a function called with (q, k, v, scale) once the projections exist
    and before attention (the arrays the trace will hold; the window starts its check there)."""
    check_trace_call(example, options, on_projected, no_dropout="the NumPy trace")
    params = example.projections()
    key, value = example.key, example.value
    dtype = result_dtype(dtype, example.x, key, value, *params.values())
    heads = (example.num_heads, example.num_kv_heads)
    run = run_heads(
        example.x, key, value, params, heads, options, _head_ops(Settings(dtype), options),
        on_projected=on_projected, variant=options.variant is not None,
    )  # fmt: skip
    check_one_example(run.inputs["x"].ndim)
    steps = run.steps
    values = {**run.inputs, "q": run.q, "k": run.k, "v": run.v, "scores": steps.scores}
    values.update({"scaled": steps.scaled, "masked": steps.masked, "weights": steps.weights})
    values.update({"head_outputs": run.head_outputs, "concat": run.concat, "output": run.output})
    is_bool = None if run.mask is None else bool(run.mask.dtype == np.bool_)
    return trace_of(
        example, options, run.plan, run.scale, values, params=run.params, extras=run.extras,
        join_heads=concat_heads, is_bool=is_bool, source=(NAME, dtype.name),
    )  # fmt: skip


trace_attention = trace_door(trace_example)

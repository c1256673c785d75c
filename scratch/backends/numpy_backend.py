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
    Steps,
    attend_variant,
    multi_head_inputs,
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
    on_projected: object = None  # trace_attention's hook: called with (q, k, v, scale)
    variant_trace: bool = False  # a trace of a variant: numpy_variant_trace attends


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


@dataclass(frozen=True)
class MultiHeadRun:
    """The converted inputs and every intermediate of one multi-head call."""

    plan: HeadPlan
    options: Options
    params: dict[str, np.ndarray]  # the projections and biases given: w_q, ..., b_o
    x: np.ndarray  # (..., L, d_model)
    key_input: np.ndarray  # (..., S, d_key)
    value_input: np.ndarray  # (..., S, d_value)
    q: np.ndarray  # (..., L, H * d_head)
    k: np.ndarray  # (..., S, Hkv * d_head)
    v: np.ndarray  # (..., S, Hkv * d_v)
    steps: Steps | None  # per-head explicit steps (..., H, L, S); None from the chunked kernel
    head_outputs: np.ndarray  # (..., H, L, d_v)
    concat: np.ndarray  # (..., L, H * d_v)
    output: np.ndarray  # (..., L, d_out)
    scale: float
    mask: np.ndarray | None
    kernel: str
    detail: str
    extras: dict = None  # a variant's q_rotated, k_rotated, sink_weights, per head


def _project(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    """x @ w (+ b): (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out); x itself when no w (the
    plan refuses a bias without its weight)."""
    if w is None:
        return x
    out = x @ w  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    return out if b is None else out + b


def _split_heads(m: np.ndarray, heads: int) -> np.ndarray:
    """(..., n, heads * d) -> (..., heads, n, d): head h is the column block h*d:(h+1)*d."""
    *lead, n, width = m.shape
    return np.swapaxes(m.reshape(*lead, n, heads, width // heads), -2, -3)


def _concat_heads(m: np.ndarray) -> np.ndarray:
    """(heads, n, d) -> (n, heads * d): _split_heads undone."""
    return np.swapaxes(m, 0, 1).reshape(m.shape[1], -1)


def _run_multi_head(
    query, key, value, params: dict, heads: tuple, options: Options, settings: Settings
) -> MultiHeadRun:
    """Convert, plan once, project, split heads, attend, concatenate, project out."""
    dtype = settings.dtype
    x, xk, xv, arrays, plan = multi_head_inputs(
        query, key, value, params, heads, lambda obj, name, _: as_numbers(obj, name, dtype)
    )
    wq, wk, wv, wo = (arrays.get(name) for name in ("w_q", "w_k", "w_v", "w_o"))
    bq, bk, bv, bo = (arrays.get(name) for name in ("b_q", "b_k", "b_v", "b_o"))
    H, Hkv = plan.num_heads, plan.num_kv_heads
    # step 1: projections
    q = _project(x, wq, bq)  # (..., L, d_model) @ (d_model, H * d_head) -> (..., L, H * d_head)
    k = _project(xk, wk, bk)  # (..., S, d_kv) @ (d_kv, Hkv * d_head) -> (..., S, Hkv * d_head)
    v = _project(xv, wv, bv)  # (..., S, d_kv) @ (d_kv, Hkv * d_v) -> (..., S, Hkv * d_v)
    scale = options.scale_for(plan.d_head)
    if settings.on_projected is not None:  # before attention: a caller can start work on them
        settings.on_projected(q, k, v, scale)
    # steps 2-6: split heads and attend          # (..., H, L, d_head), (..., Hkv, S, d_head)
    q_h, k_h, v_h = _split_heads(q, H), _split_heads(k, Hkv), _split_heads(v, Hkv)
    extras = None
    if settings.variant_trace:  # a variant: numpy_flex's explicit kernel, every step kept
        mask, kernel, detail = None, "explicit", ""
        found, extras = attend_variant(q_h, k_h, v_h, scale, options, np, variant_steps)
        steps, head_outputs = Steps(**found), found["output"]
    else:
        mask = build_mask(options, dtype, plan.scores_shape, settings.need_weights)
        if not settings.need_weights:
            q_h = np.ascontiguousarray(q_h)
        steps, head_outputs, _, kernel, detail = _attend(
            q_h, k_h, v_h, scale, mask, options, settings, plan.group
        )
    # step 7: concatenate heads                  # (..., H, L, d_v) -> (..., L, H * d_v)
    concat = np.swapaxes(head_outputs, -2, -3).reshape(*plan.lead, plan.L, -1)
    # step 8: output projection                  # (..., L, H * d_v) @ (H * d_v, d_out)
    output = concat if wo is None else _project(concat, wo, bo)
    return MultiHeadRun(
        plan,
        options,
        arrays,
        x,
        xk,
        xv,
        q,
        k,
        v,
        steps,
        head_outputs,
        concat,
        output,
        scale,
        mask,
        kernel,
        detail,
        extras,
    )


def heads_result(
    query, key, value, params: dict, heads: tuple, options: Options, *, need_weights=True,
    dtype=None, block_size=None,
) -> Result:  # fmt: skip
    """Multi-head (and grouped-query) attention in NumPy; weights (..., H, L, S) when wanted."""
    check_flag(need_weights, "need_weights")
    dtype = result_dtype(dtype, query, key, value, *params.values())
    settings = Settings(dtype, need_weights, block_size)
    run = _run_multi_head(query, key, value, params, heads, options, settings)
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
    settings = Settings(
        result_dtype(dtype, example.x, key, value, *params.values()),
        on_projected=on_projected,
        variant_trace=options.variant is not None,
    )
    heads = (example.num_heads, example.num_kv_heads)
    run = _run_multi_head(example.x, key, value, params, heads, options, settings)
    check_one_example(run.x.ndim)
    steps = run.steps
    values = {"x": run.x, "key_input": run.key_input, "value_input": run.value_input}
    values.update({"q": run.q, "k": run.k, "v": run.v, "scores": steps.scores})
    values.update({"scaled": steps.scaled, "masked": steps.masked, "weights": steps.weights})
    values.update({"head_outputs": run.head_outputs, "concat": run.concat, "output": run.output})
    is_bool = None if run.mask is None else bool(run.mask.dtype == np.bool_)
    return trace_of(
        example, options, run.plan, run.scale, values, params=run.params, extras=run.extras or {},
        join_heads=_concat_heads, is_bool=is_bool, source=(NAME, run.x.dtype.name),
    )  # fmt: skip


trace_attention = trace_door(trace_example)

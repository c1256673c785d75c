"""The ground truth as a backend: nested lists in, nested lists out, float64 only."""

from __future__ import annotations

from scratch.core import attention, multihead
from scratch.core.front_doors import forward_door, multi_head_door
from scratch.core.options import Options
from scratch.core.result import LseResult, Result
from scratch.ops.validate import check_flag
from scratch.trace import forward as trace

NAME = "scratch"
DTYPES = ("float64",)
KERNELS = ("explicit",)
NOTES = "pure Python, every dot product and softmax sum an fsum (correctly rounded)"


def _check_dtype(dtype: object) -> None:
    """Only float64 (Python floats) exists here."""
    if dtype not in (None, "float64"):
        raise ValueError(
            f"dtype: expected None or 'float64' (the scratch backend), found {dtype!r}"
        )


def attention_result(
    query, key, value, options: Options, *, need_weights=True, dtype=None
) -> Result | LseResult:
    """scratch.scaled_dot_product_attention as a Result (LseResult with return_lse=True)."""
    _check_dtype(dtype)
    check_flag(need_weights, "need_weights")
    output, weights, lse = attention.forward(query, key, value, options)
    weights = weights if need_weights else None
    if options.return_lse:
        return LseResult(output, lse, weights, "explicit")
    return Result(output, weights, "explicit")


def heads_result(
    query, key, value, params: dict, heads: tuple, options: Options, *, need_weights=True,
    dtype=None,
) -> Result:  # fmt: skip
    """scratch.multi_head_attention as a Result; weights None when not asked for."""
    _check_dtype(dtype)
    check_flag(need_weights, "need_weights")
    output, weights = multihead.attention_with_heads(query, key, value, params, heads, options)
    return Result(output, weights if need_weights else None, "explicit")


scaled_dot_product_attention = forward_door(attention_result)
multi_head_attention = multi_head_door(heads_result)
trace_example = trace.trace_example  # the ground truth's own (dtype None or "float64")
trace_attention = trace.trace_attention

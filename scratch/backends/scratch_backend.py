"""The ground truth as a backend: nested lists in, nested lists out, float64 only."""

from __future__ import annotations

from scratch import attention, multihead, trace
from scratch.options import Options
from scratch.result import LseResult, Result
from scratch.validate import check_flag

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


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    *,
    enable_gqa=False,
    masked_rows="zero",
    rng=None,
    need_weights=True,
    dtype=None,
    return_lse=False,
) -> Result | LseResult:
    """scratch.scaled_dot_product_attention as a Result (LseResult with return_lse=True)."""
    _check_dtype(dtype)
    check_flag(need_weights, "need_weights")
    if check_flag(return_lse, "return_lse"):
        options = Options(
            attn_mask, is_causal, scale, dropout_p, enable_gqa, masked_rows, rng, return_lse
        )
        output, weights, lse = attention.forward(query, key, value, options)
        return LseResult(output, lse, weights if need_weights else None, "explicit")
    output, weights = attention.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa=enable_gqa,
        masked_rows=masked_rows,
        rng=rng,
    )
    return Result(output, weights if need_weights else None, "explicit")


def multi_head_attention(
    query,
    key,
    value,
    w_q,
    w_k,
    w_v,
    w_o=None,
    *,
    need_weights=True,
    dtype=None,
    **options,
) -> Result:
    """scratch.multi_head_attention as a Result; weights None when not asked for."""
    _check_dtype(dtype)
    check_flag(need_weights, "need_weights")
    output, weights = multihead.multi_head_attention(
        query, key, value, w_q, w_k, w_v, w_o, **options
    )
    return Result(output, weights if need_weights else None, "explicit")


trace_example = trace.trace_example  # the ground truth's own (dtype None or "float64")


def trace_attention(
    x, key=None, value=None, w_q=None, w_k=None, w_v=None, w_o=None, *, dtype=None, **options
) -> trace.Trace:
    """scratch.trace_attention (its options already say backend "scratch", dtype "float64")."""
    _check_dtype(dtype)
    return trace.trace_attention(x, key, value, w_q, w_k, w_v, w_o, **options)

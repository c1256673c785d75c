"""The public keyword signatures, written once: one front door per kind of call.

Every backend keeps PyTorch's keyword arguments at its door, and behind the door only typed
values travel. Each door here turns the keywords into one `Options` (and, for a trace, one
`Example`) and calls the backend's own implementation with them; keywords only one backend
has (need_weights, dtype, device, kernel, block_size, ...) pass through to it untouched. The
doors hold no arithmetic: every backend still writes its own math below its door.

    forward_door(impl)   scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                         is_causal, scale, *, enable_gqa, masked_rows, rng, return_lse)
                         -> impl(query, key, value, options, **more)
    backward_door(impl)  scaled_dot_product_attention_backward(query, key, value, grad_output,
                         the forward's arguments but return_lse)
                         -> impl(query, key, value, grad_output, options, **more)
    multi_head_door(impl) multi_head_attention(query, key, value, w_q, w_k, w_v, w_o=None, *,
                         num_heads, num_kv_heads, b_q, b_k, b_v, b_o, attn_mask, is_causal, scale,
                         masked_rows) -> impl(query, key, value, params, heads, options, **more)
    trace_door(impl)     trace_attention(x, key, value, w_q, w_k, w_v, w_o, *, tokens,
                         key_tokens, num_heads, num_kv_heads, b_q ... b_o, attn_mask, is_causal,
                         scale, masked_rows, dropout_p, rng) -> impl(example, options, **more)
    flex_door(impl)      flex_attention(query, key, value, score_mod, block_mask, scale,
                         enable_gqa, return_lse, *, sinks) -> impl(query, key, value, options)
    flex_backward_door(impl) flex_attention_backward(query, key, value, grad_output, the
                         forward's arguments but return_lse) -> impl(..., grad_output, options)

`own_rng=True`: the backend reads `rng` itself (an int seed, a numpy or torch generator as well
as a random.Random), so it is passed on as `rng=` instead of into Options, which takes only
the ground truth's kinds.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from .example import Example
from .options import FlexOptions, Options
from .plan import projections
from .validate import check_projections, check_value_has_key


def _named(door: Callable, impl: Callable) -> Callable:
    """The door wears the implementation's module; its docstring says both (name: the door's)."""
    door.__module__ = impl.__module__
    door.__doc__ = f"{door.__doc__}\n\n{impl.__name__}: {impl.__doc__}"
    return door


def _extra_keywords(impl: Callable, passed: int) -> frozenset[str] | None:
    """The keywords impl takes after the `passed` arguments its door gives it (None: any)."""
    params = list(inspect.signature(impl).parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in params[passed:] if p.kind in named)


def _refuse_unknown(door: str, accepted: frozenset[str] | None, more: dict) -> None:
    """A misspelled keyword is named with the public function's name, not the backend's."""
    unknown = [name for name in more if accepted is not None and name not in accepted]
    if unknown:
        also = ", ".join(sorted(accepted)) or "none"
        raise TypeError(
            f"{door}() got an unexpected keyword argument {unknown[0]!r} "
            f"(this backend's own keywords: {also})"
        )


def _rng(own_rng: bool, rng: object, more: dict) -> object:
    """The rng that goes into Options; a backend with its own kinds gets it as `rng=` instead."""
    if own_rng:
        more["rng"] = rng
        return None
    return rng


def forward_door(impl: Callable, *, own_rng: bool = False) -> Callable:
    """scaled_dot_product_attention's keywords -> impl(query, key, value, options, **more)."""
    accepted = _extra_keywords(impl, 4)

    def scaled_dot_product_attention(
        query: object,
        key: object,
        value: object,
        attn_mask: object = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        *,
        enable_gqa: bool = False,
        masked_rows: str = "zero",
        rng: object = None,
        return_lse: bool = False,
        **more: object,
    ) -> object:
        """The keywords as one Options, then the backend's own function:"""
        _refuse_unknown("scaled_dot_product_attention", accepted, more)
        rng = _rng(own_rng, rng, more)
        options = Options(attn_mask, is_causal, scale=scale, dropout_p=dropout_p, rng=rng,
                          enable_gqa=enable_gqa, masked_rows=masked_rows,
                          return_lse=return_lse)  # fmt: skip
        return impl(query, key, value, options, **more)

    return _named(scaled_dot_product_attention, impl)


def backward_door(impl: Callable, *, own_rng: bool = False) -> Callable:
    """The backward's keywords (the forward's, after grad_output) -> impl(query, key, value,
    grad_output, options, **more)."""
    accepted = _extra_keywords(impl, 5)

    def scaled_dot_product_attention_backward(
        query: object,
        key: object,
        value: object,
        grad_output: object,
        attn_mask: object = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        *,
        enable_gqa: bool = False,
        masked_rows: str = "zero",
        rng: object = None,
        **more: object,
    ) -> object:
        """The keywords as one Options, then the backend's own backward:"""
        _refuse_unknown("scaled_dot_product_attention_backward", accepted, more)
        rng = _rng(own_rng, rng, more)
        options = Options(attn_mask, is_causal, scale=scale, dropout_p=dropout_p, rng=rng,
                          enable_gqa=enable_gqa, masked_rows=masked_rows)  # fmt: skip
        return impl(query, key, value, grad_output, options, **more)

    return _named(scaled_dot_product_attention_backward, impl)


def multi_head_door(impl: Callable) -> Callable:
    """multi_head_attention's keywords -> impl(query, key, value, params, heads, options)."""
    accepted = _extra_keywords(impl, 6)

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
        **more: object,
    ) -> object:
        """The keywords as projections, head counts and one Options, then the backend's own:"""
        _refuse_unknown("multi_head_attention", accepted, more)
        check_projections(w_q, w_k, w_v)
        check_value_has_key(key, value)
        options = Options(attn_mask, is_causal, scale=scale, masked_rows=masked_rows)
        params = projections(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)
        return impl(query, key, value, params, (num_heads, num_kv_heads), options, **more)

    return _named(multi_head_attention, impl)


def trace_door(impl: Callable) -> Callable:
    """trace_attention's keywords -> impl(Example, Options, **more) (more: dtype, on_projected,
    grad_output, ...: what that backend's trace_example takes)."""
    accepted = _extra_keywords(impl, 2)

    def trace_attention(
        x: object,
        key: object = None,
        value: object = None,
        w_q: object = None,
        w_k: object = None,
        w_v: object = None,
        w_o: object = None,
        *,
        tokens: object = None,
        key_tokens: object = None,
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
        dropout_p: float = 0.0,
        rng: object = None,
        **more: object,
    ) -> object:
        """One worked example x (L, d_model), every step kept; projections are optional. The
        keywords become one Example and one Options, then the backend's own trace_example:"""
        _refuse_unknown("trace_attention", accepted, more)
        params = projections(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)
        example = Example(x, key, value, params, tokens, key_tokens, num_heads, num_kv_heads)
        options = Options(
            attn_mask, is_causal, scale=scale, dropout_p=dropout_p, masked_rows=masked_rows, rng=rng
        )
        return impl(example, options, **more)

    return _named(trace_attention, impl)


def flex_door(impl: Callable) -> Callable:
    """flex_attention's keywords -> impl(query, key, value, options: FlexOptions, **more)."""
    accepted = _extra_keywords(impl, 4)

    def flex_attention(
        query: object,
        key: object,
        value: object,
        score_mod: Callable | None = None,
        block_mask: object = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        return_lse: bool = False,
        *,
        sinks: object = None,
        **more: object,
    ) -> object:
        """The keywords as one FlexOptions, then the backend's own flex_attention:"""
        _refuse_unknown("flex_attention", accepted, more)
        options = FlexOptions(score_mod, block_mask, scale, enable_gqa, return_lse, sinks)
        return impl(query, key, value, options, **more)

    return _named(flex_attention, impl)


def flex_backward_door(impl: Callable) -> Callable:
    """flex_attention_backward's keywords (the forward's, after grad_output, but return_lse) ->
    impl(query, key, value, grad_output, options: FlexOptions, **more)."""
    accepted = _extra_keywords(impl, 5)

    def flex_attention_backward(
        query: object,
        key: object,
        value: object,
        grad_output: object,
        score_mod: Callable | None = None,
        block_mask: object = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        *,
        sinks: object = None,
        **more: object,
    ) -> object:
        """The keywords as one FlexOptions, then the backend's own flex_attention_backward:"""
        _refuse_unknown("flex_attention_backward", accepted, more)
        options = FlexOptions(score_mod, block_mask, scale, enable_gqa, sinks=sinks)
        return impl(query, key, value, grad_output, options, **more)

    return _named(flex_attention_backward, impl)


__all__ = [
    "backward_door",
    "flex_backward_door",
    "flex_door",
    "forward_door",
    "multi_head_door",
    "trace_door",
]

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

Each kind's parameters are written once, in the private function that turns them into impl's
arguments (`_sdpa_arguments`, `_multi_head_arguments`, `_trace_arguments`, `_flex_arguments`);
a backward's are its forward's with grad_output after value and no return_lse
(`_backward_of`), and one `_door` binds every call to them.

`own_rng=True`: the backend reads `rng` itself (an int seed, a numpy or torch generator as well
as a random.Random), so it is passed on as `rng=` instead of into Options, which takes only
the ground truth's kinds.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable

from scratch.core.example import Example
from scratch.core.options import FlexOptions, Options
from scratch.ops.plan import projections
from scratch.ops.validate import check_projections, check_value_has_key


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


def _backward_of(signature: inspect.Signature) -> inspect.Signature:
    """A forward's parameters as its backward's: grad_output after value, no return_lse."""
    params = [p for p in signature.parameters.values() if p.name != "return_lse"]
    grad_output = inspect.Parameter("grad_output", params[0].kind, annotation=params[0].annotation)
    return signature.replace(parameters=[*params[:3], grad_output, *params[3:]])


def bound(signature: inspect.Signature, name: str, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by parameter name; a call that does not fit is a TypeError naming
    the public function `name`."""
    try:
        return signature.bind(*args, **kwargs).arguments
    except TypeError as error:
        raise TypeError(f"{name}() {error}") from None


def _door(
    name: str, front: Callable, impl: Callable, passed: int, *, own_rng: bool = False
) -> Callable:
    """The public function `name`: front's parameters (a *_backward's: _backward_of them) and
    **more.

    front turns the keywords into impl's first `passed` arguments (a backward's grad_output
    goes in after value); **more, the backend's own keywords, passes on untouched.
    `own_rng`: the backend reads `rng` itself, so it goes into more, not into front.
    """
    backward = name.endswith("_backward")
    signature = inspect.signature(front)
    signature = _backward_of(signature) if backward else signature
    more = inspect.Parameter("more", inspect.Parameter.VAR_KEYWORD, annotation="object")
    signature = signature.replace(
        parameters=[*signature.parameters.values(), more], return_annotation="object"
    )
    accepted = _extra_keywords(impl, passed)

    def door(*args: object, **kwargs: object) -> object:
        given = bound(signature, name, args, kwargs)
        extra = given.pop("more", {})
        _refuse_unknown(name, accepted, extra)
        if own_rng:
            extra["rng"] = given.pop("rng", None)
        if not backward:
            return impl(*front(**given), **extra)
        grad_output = given.pop("grad_output")
        query, key, value, *options = front(**given)
        return impl(query, key, value, grad_output, *options, **extra)

    door.__signature__ = signature
    door.__name__ = door.__qualname__ = name
    door.__module__ = impl.__module__
    # the door's arguments are front's, not impl's (impl takes Options)
    arguments = arguments_for(signature.parameters, front.__doc__, KEYWORDS)
    door.__doc__ = with_arguments(impl.__doc__ or name, arguments, replace=True)
    return door


KEYWORDS = """The words for the keywords several doors share (a door's own are in its front's).

    Args:
        grad_output: dO (..., L, Ev), the loss's gradient by the forward's output.
        num_heads: H, the query heads.
        num_kv_heads: Hkv, the key/value heads (grouped-query attention); None: H.
        b_q: (H * E,) or None.
        b_k: (Hkv * E,) or None.
        b_v: (Hkv * Ev,) or None.
        b_o: (d_out,) or None.
        **more: the backend's own keywords (need_weights, dtype, device, kernel, ...), passed
            on untouched; one it does not take is refused.
    """


def arguments_of(doc: str) -> list[str]:
    """The entries of a docstring's `Args:` section, each with its continuation lines (a door's
    keywords are described once, in the function that reads them)."""
    doc = inspect.cleandoc(doc)
    block = doc[doc.index("Args:\n") + len("Args:\n") :].split("\n\n")[0]
    return re.split(r"\n(?=    \S)", block)


def arguments_for(names: Iterable[str], *docs: str) -> list[str]:
    """The `Args:` entry of each name, in the order of `names`, from the first of `docs` that
    describes it (a name none describes is left out: tests/test_docstrings.py finds it)."""
    found: dict[str, str] = {}
    for doc in docs:
        for entry in arguments_of(doc):
            found.setdefault(entry.split(":")[0].strip().lstrip("*"), entry)
    return [found[name] for name in names if name in found]


def with_arguments(doc: str, entries: list[str], *, replace: bool = False) -> str:
    """doc (cleaned) with `entries` at the end of its `Args:` section (`replace`: instead of
    its entries), or in a new one before its Returns/Examples (or at its end)."""
    doc = inspect.cleandoc(doc)
    if "Args:\n" in doc:
        start = doc.index("Args:\n")
        end = doc.find("\n\n", start)
        end = len(doc) if end < 0 else end
        kept = doc[: start + len("Args:")] if replace else doc[:end]
        return "\n".join([kept, *entries]) + doc[end:]
    later = re.search(r"\n\n(?=(Returns|Examples):\n)", doc)
    end = later.start() if later else len(doc)
    return "\n".join([doc[:end] + "\n\nArgs:", *entries]) + doc[end:]


def _sdpa_arguments(
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
) -> tuple:
    """scaled_dot_product_attention's keywords as one Options.

    Args:
        query: q (..., L, E); the leading axes (batch, heads) broadcast.
        key: k (..., S, E).
        value: v (..., S, Ev).
        attn_mask: None, or (..., L, S) broadcast to the scores: bool (True = may attend) or
            float (added to the scaled scores).
        dropout_p: the probability of dropping a weight (the kept ones scale by 1 / (1 - p)).
        is_causal: key j visible to query i iff j <= i (top-left, as PyTorch); not with
            attn_mask.
        scale: the scores' factor; None: 1 / sqrt(E).
        enable_gqa: grouped-query attention: H query heads share H / Hkv key/value heads.
        masked_rows: a row with no visible key: "zero" (weights 0, as PyTorch >= 2.5), "nan"
            (the textbook 0 / 0) or "uniform" (equal weights: what a -1e9 fill gives).
        rng: the dropout's random.Random (or the backend's generator or an int seed).
        return_lse: return (output, lse (..., L)) instead of (output, weights (..., L, S)).
    """
    options = Options(attn_mask, is_causal, scale=scale, dropout_p=dropout_p, rng=rng,
                      enable_gqa=enable_gqa, masked_rows=masked_rows,
                      return_lse=return_lse)  # fmt: skip
    return query, key, value, options


def _multi_head_arguments(
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
) -> tuple:
    """multi_head_attention's keywords as projections, head counts and one Options.

    Args:
        query: the queries' inputs (..., L, d_model).
        key: the keys' inputs (..., S, d_kv_in); None: self-attention (key = value = query).
        value: the values' inputs (..., S, d_kv_in); None: value = key.
        w_q: (d_model, H * E), q = query @ w_q (+ b_q).
        w_k: (d_kv_in, Hkv * E), k = key @ w_k (+ b_k).
        w_v: (d_kv_in, Hkv * Ev), v = value @ w_v (+ b_v).
        w_o: (H * Ev, d_out), the heads side by side @ w_o (+ b_o); None: no output projection.
        attn_mask: None, or (..., L, S) broadcast over the heads: bool (True = may attend) or
            float (added to the scaled scores).
        is_causal: key j visible to query i iff j <= i (top-left); not with attn_mask.
        scale: the scores' factor; None: 1 / sqrt(E).
        masked_rows: a row with no visible key: "zero", "nan" or "uniform".
    """
    check_projections(w_q, w_k, w_v)
    check_value_has_key(key, value)
    options = Options(attn_mask, is_causal, scale=scale, masked_rows=masked_rows)
    params = projections(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)
    return query, key, value, params, (num_heads, num_kv_heads), options


def _trace_arguments(
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
) -> tuple:
    """trace_attention's keywords as one Example and one Options; projections are optional.

    Args:
        x: the worked example (L, d_model): the queries' inputs (q itself without w_q).
        key: the keys' inputs (S, d_kv_in); None: self-attention (the keys are x).
        value: the values' inputs (S, d_kv_in); None: value = key.
        w_q: (d_model, H * E) or None (q = x).
        w_k: (d_kv_in, Hkv * E) or None.
        w_v: (d_kv_in, Hkv * Ev) or None.
        w_o: (H * Ev, d_out) or None (no output projection).
        tokens: L labels of the queries (default "t0", "t1", ...).
        key_tokens: S labels of the keys (default: tokens, in self-attention).
        attn_mask: None, or (L, S): bool (True = may attend) or float (added).
        is_causal: key j visible to query i iff j <= i (top-left); not with attn_mask.
        scale: the scores' factor; None: 1 / sqrt(E).
        masked_rows: a row with no visible key: "zero", "nan" or "uniform".
        dropout_p: the probability of dropping a weight.
        rng: the dropout's random.Random.
    """
    params = projections(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)
    example = Example(x, key, value, params, tokens, key_tokens, num_heads, num_kv_heads)
    options = Options(
        attn_mask, is_causal, scale=scale, dropout_p=dropout_p, masked_rows=masked_rows, rng=rng
    )
    return example, options


def _flex_arguments(
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
) -> tuple:
    """flex_attention's keywords as one FlexOptions.

    Args:
        query: q (B, H, L, E).
        key: k (B, Hkv, S, E).
        value: v (B, Hkv, S, Ev).
        score_mod: score_mod(score, b, h, q_idx, kv_idx) -> the changed score (after the
            scale), or None.
        block_mask: a BlockMask from create_block_mask (its mask_mod says which keys a query
            sees), or None: every key.
        scale: the scores' factor; None: 1 / sqrt(E).
        enable_gqa: grouped-query attention: H query heads share H / Hkv key/value heads.
        return_lse: return (output, lse (B, H, L)) instead of output alone.
        sinks: one learned sink logit per query head (gpt-oss), added to each row's
            denominator; None: no sink.
    """
    return (
        query,
        key,
        value,
        FlexOptions(score_mod, block_mask, scale, enable_gqa, return_lse, sinks),
    )


def forward_door(impl: Callable, *, own_rng: bool = False) -> Callable:
    """scaled_dot_product_attention's keywords -> impl(query, key, value, options, **more)."""
    return _door("scaled_dot_product_attention", _sdpa_arguments, impl, 4, own_rng=own_rng)


def backward_door(impl: Callable, *, own_rng: bool = False) -> Callable:
    """The backward's keywords (the forward's, after grad_output) -> impl(query, key, value,
    grad_output, options, **more)."""
    return _door("scaled_dot_product_attention_backward", _sdpa_arguments, impl, 5, own_rng=own_rng)


def multi_head_door(impl: Callable) -> Callable:
    """multi_head_attention's keywords -> impl(query, key, value, params, heads, options)."""
    return _door("multi_head_attention", _multi_head_arguments, impl, 6)


def trace_door(impl: Callable) -> Callable:
    """trace_attention's keywords -> impl(Example, Options, **more) (more: dtype, on_projected,
    grad_output, ...: what that backend's trace_example takes)."""
    return _door("trace_attention", _trace_arguments, impl, 2)


def flex_door(impl: Callable) -> Callable:
    """flex_attention's keywords -> impl(query, key, value, options: FlexOptions, **more)."""
    return _door("flex_attention", _flex_arguments, impl, 4)


def flex_backward_door(impl: Callable) -> Callable:
    """flex_attention_backward's keywords (the forward's, after grad_output, but return_lse) ->
    impl(query, key, value, grad_output, options: FlexOptions, **more)."""
    return _door("flex_attention_backward", _flex_arguments, impl, 5)


__all__ = [
    "arguments_for",
    "arguments_of",
    "backward_door",
    "bound",
    "flex_backward_door",
    "flex_door",
    "forward_door",
    "multi_head_door",
    "trace_door",
    "with_arguments",
]

"""Decode: L queries at the last positions of S keys, every variant evaluated at true positions.

The convention, one for every decode call here (decode_attention, KVCache.attend, split-KV,
the paged cache): a score_mod or mask_mod is written in *true positions*, as if the whole
sequence were one call, and the call adds the offset. Query row i of L sits at position
S - L + i, so the mods are called with q_idx = S - L + i (kv_idx is the key's own position).
Hence:
  - `Causal()` at true positions is bottom-right causal: row i sees keys j <= S - L + i, the
    same keys as `Causal.aligned("bottom-right", L, S)` on row indices;
  - `SlidingWindow(left, 0)` counts back from the true position; ALiBi's `kv_idx - q_idx` is
    the true distance (a row index there is the "positions not offset" bug);
  - a variant that carries its own nonzero `shift` is refused: it would be shifted twice.
mask_mod None: every key is seen (FlexAttention's meaning); at L = 1 that is causal too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from scratch.core.front_doors import arguments_for, bound, with_arguments
from scratch.core.options import FlexOptions
from scratch.flex.forward import FlexInputs, create_block_mask, flex_attention, prepare
from scratch.ops.validate import as_tensor, check_flag, check_hook
from scratch.variants.base import Variant, check_sizes


def query_offset(L: int, S: int) -> int:
    """The true position of query row 0 when L queries are the last of S keys."""
    return S - L


def four_dims(x: object, name: str, dims: str = "(B, H, seq, dim)") -> tuple[list, tuple]:
    """x as nested lists with exactly 4 dims (ValueError naming x otherwise)."""
    data, shape = as_tensor(x, name, min_dims=0)
    if len(shape) != 4:
        raise ValueError(f"{name}: expected 4 dims {dims}, found shape {shape}")
    return data, shape


def key_value(key: object, value: object, seq: str = "S") -> tuple[list, list, tuple]:
    """key (B, Hkv, seq, E) and value (B, Hkv, seq, Ev) checked: (k, v, (B, Hkv, seq, E, Ev))."""
    k, (B, Hkv, S, E) = four_dims(key, "key", f"(B, Hkv, {seq}, E)")
    v, (Bv, Hv, Sv, Ev) = four_dims(value, "value", f"(B, Hkv, {seq}, Ev)")
    if (Bv, Hv, Sv) != (B, Hkv, S):
        raise ValueError(
            f"value: expected (B, Hkv, {seq}) = {(B, Hkv, S)} as key, found {(Bv, Hv, Sv)}"
        )
    return k, v, (B, Hkv, S, E, Ev)


def at_positions(
    mod: Callable | None, q_offset: int, kv_offset: int = 0, batch: int | None = None
) -> Callable | None:
    """mod called at true indices: q_idx + q_offset, kv_idx + kv_offset (b = batch if given)."""
    if mod is None:
        return None

    def moved(*args):  # (score,) b, h, q_idx, kv_idx: a score_mod or a mask_mod alike
        *score, b, h, q_idx, kv_idx = args
        return mod(*score, b if batch is None else batch, h, q_idx + q_offset, kv_idx + kv_offset)

    return moved


def check_mods(score_mod: object, mask_mod: object, B: int | None, H: int, S: int) -> None:
    """Mods are functions; a variant has shift 0 and fits S positions (queries and keys alike)."""
    for mod, name in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        check_hook(mod, name)
        owner = getattr(mod, "__self__", None) or getattr(mod, "variant", None)
        for part in getattr(owner, "parts", (owner,)):
            shift = getattr(part, "shift", 0) if isinstance(part, Variant) else 0
            if shift:
                raise ValueError(
                    f"{name}: decode calls the variant at true positions (q_idx + S - L); "
                    f"expected {type(part).__name__} with shift 0, found shift {shift}"
                )
        check_fits(mod, name, B, H, S)


def check_fits(mod: Callable | None, name: str, B: int | None, H: int, S: int) -> None:
    """The variant's data fits B, H and S positions, or describes a longer sequence.

    Documents or a given mask of the whole text are welcome while the cache holds part of it:
    when only the lengths disagree, every cell of the S positions is asked once instead.
    """
    try:
        check_sizes(mod, B, H, S, S)
    except ValueError:
        try:
            check_sizes(mod, None, None, S, S)  # passes: B or H is what disagrees
        except ValueError:
            if covers(mod, name, B or 1, H, S):
                return
        raise


def covers(mod: Callable, name: str, B: int, H: int, S: int) -> bool:
    """mod answers for every (b, h, q_idx, kv_idx) of S positions without an IndexError."""
    extra = (0.0,) if name == "score_mod" else ()  # a score_mod takes the score first
    try:
        for b in range(B):
            for h in range(H):
                for i in range(S):
                    for j in range(S):
                        mod(*extra, b, h, i, j)
    except IndexError:
        return False
    return True


def attend_at(x, q_offset: int, kv_offset: int, score_mod, mask_mod, batch: int | None = None):
    """flex_attention of checked inputs x (FlexInputs) with the mods moved to true positions.

    Returns (output (B, H, L, Ev), lse (B, H, L)); x.sinks go into the denominator.
    """
    B, H, _, L, S, _, _ = x.shape
    moved_mask = at_positions(mask_mod, q_offset, kv_offset, batch)
    block = None if moved_mask is None else create_block_mask(moved_mask, B, H, L, S)
    return flex_attention(
        x.q,
        x.k,
        x.v,
        at_positions(score_mod, q_offset, kv_offset, batch),
        block,
        x.scale,
        x.group > 1,
        True,
        sinks=x.sinks,
    )


def arrays_only(options: FlexOptions) -> FlexOptions:
    """The options prepare checks with the arrays: scale, GQA and sinks (the mods are checked at
    true positions by check_mods)."""
    return FlexOptions(scale=options.scale, enable_gqa=options.enable_gqa, sinks=options.sinks)


def decode_inputs(query: object, key: object, value: object, options: FlexOptions) -> FlexInputs:
    """The arrays checked (scratch.flex.forward.prepare) for L queries at the last L of S
    positions, and
    the mods checked at true positions (check_mods)."""
    x = prepare(query, key, value, arrays_only(options))
    B, H, _, L, S, _, _ = x.shape
    if L > S:
        raise ValueError(
            f"query: {L} queries cannot be the last positions of {S} keys (expected L <= S)"
        )
    check_mods(options.score_mod, options.mask_mod, B, H, S)
    return x


def decode_options(
    score_mod: Callable[..., float] | None = None,
    mask_mod: Callable[..., bool] | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    *,
    sinks: object = None,
) -> FlexOptions:
    """Every decode call's keywords, after its arrays, written once: one FlexOptions.

    Args:
        score_mod: score_mod(score, b, h, q_idx, kv_idx) -> the changed score, or None; the
            mods see true positions (q_idx = S - L + i).
        mask_mod: mask_mod(b, h, q_idx, kv_idx) -> True where the query sees the key, or None.
        scale: the scores' factor; None: 1 / sqrt(E).
        enable_gqa: grouped-query attention: H query heads share H / Hkv key/value heads.
        return_lse: return (output, lse (B, H, L)) instead of output alone.
        sinks: one learned sink logit per query head, added to each row's denominator; None.
    """
    check_flag(return_lse, "return_lse")
    return FlexOptions(score_mod, None, scale, enable_gqa, return_lse, sinks, mask_mod)


def decode_door(impl: Callable) -> Callable:
    """impl(*arrays, options) -> (output, lse) becomes the public call: impl's arrays, then
    decode_options's keywords; it returns output, or (output, lse) when return_lse."""
    arrays = list(inspect.signature(impl).parameters.values())[:-1]
    keywords = list(inspect.signature(decode_options).parameters.values())
    signature = inspect.Signature(arrays + keywords, return_annotation="list | tuple[list, list]")

    def door(*args: object, **kwargs: object) -> list | tuple[list, list]:
        given = bound(signature, impl.__name__, args, kwargs)
        options = decode_options(**{p.name: given[p.name] for p in keywords if p.name in given})
        output, lse = impl(*(given[p.name] for p in arrays), options)
        return (output, lse) if options.return_lse else output

    door.__signature__ = signature
    door = functools.update_wrapper(door, impl, updated=())
    names = [p.name for p in keywords]
    door.__doc__ = with_arguments(impl.__doc__, arguments_for(names, decode_options.__doc__))
    return door


@decode_door
def decode_attention(query: object, key: object, value: object, options: FlexOptions):
    """Attention of query (B, H, L, E) at the last L positions of key (B, Hkv, S, E), value.

    Args:
        query: the new tokens' q (B, H, L, E), at positions S - L .. S - 1.
        key: every cached token's k (B, Hkv, S, E), the new ones last.
        value: v (B, Hkv, S, Ev).

    Returns:
        output (B, H, L, Ev), or (output, lse (B, H, L)) with return_lse=True.

    Examples:
        >>> import scratch
        >>> k = [[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]]  # (B, Hkv, S, E) = (1, 1, 3, 2)
        >>> out = scratch.decode_attention([[[[1.0, 0.0]]]], k, k)  # one query at position 2
        >>> [round(x, 4) for x in out[0][0][0]]
        [0.8022, 0.5989]
    """
    x = decode_inputs(query, key, value, options)
    L, S = x.shape[3:5]
    return attend_at(x, query_offset(L, S), 0, options.score_mod, options.mask_mod)


__all__ = ["at_positions", "decode_attention", "decode_door", "query_offset"]

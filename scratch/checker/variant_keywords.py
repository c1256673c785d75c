"""How a kernel receives a variant: FlashAttention's keywords or a FlexAttention mod pair.

style 'flash': causal (bottom-right), window_size=(left, right), softcap, alibi_slopes (H,),
sinks (H,), cu_seqlens_q and cu_seqlens_k (or one cu_seqlens), attention_chunk.
style 'flex': mask_mod(b, h, q_idx, kv_idx) and score_mod(score, b, h, q_idx, kv_idx), plus
sinks. Both: rotary_cos, rotary_sin (S, E / 2) and rotary_interleaved for RoPE, enable_gqa
where the kernel takes it. The mods are written so that one function serves Python numbers,
NumPy index arrays that broadcast (a tile: rows[:, None], cols[None, :]) and torch tensors
(FlexAttention's vmapped 0-d tensors): each looks a cell up in a table of the caller's arrays.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from scratch.checker.arrays import Arrays
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_numpy import Planted, allowed
from scratch.checker.variant_prepare import VariantPrepared
from scratch.variants.dual import tanh

STYLES = ("flash", "flex")
FLASH_WORDS = ("window_size", "softcap", "alibi_slopes", "cu_seqlens", "cu_seqlens_q",
               "attention_chunk", "causal")  # fmt: skip
FLEX_WORDS = ("mask_mod", "score_mod")


class NoKeyword(Exception):
    """The style has no keyword for a feature of the case (prefix-LM in FlashAttention's)."""


def style_of(fn: Callable, style: str | None) -> str:
    """'flash' or 'flex': given, or read from fn's parameters (ValueError when it cannot be)."""
    if style is not None:
        if style not in STYLES:
            raise ValueError(f"variant_style: expected one of {', '.join(STYLES)}, found {style!r}")
        return style
    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = set()
    flex, flash = names & set(FLEX_WORDS), names & set(FLASH_WORDS)
    if flex and not flash:
        return "flex"
    if flash and not flex:
        return "flash"
    found = ", ".join(sorted(flex | flash)) or "neither"
    raise ValueError(
        "variant_style: fn's parameters do not say how it takes a variant (FlashAttention's "
        f"window_size, softcap, ... or FlexAttention's mask_mod, score_mod; found {found}); "
        "pass variant_style='flash' or 'flex'"
    )


def lookup(table: object, *index: object) -> object:
    """table[index] for arrays and tensors; nested lists indexed one level at a time."""
    if isinstance(table, list):
        for i in index:
            table = table[i]
        return table
    return table[index]


def mods(case: VariantCase, prep: VariantPrepared, arrays: Arrays, dtype: str) -> dict:
    """mask_mod and score_mod for the case (only those it has), over the caller's arrays."""
    found: dict = {}
    L, S = case.q[2], case.k[2]
    seen = allowed(case, Planted(), L, S)
    if not seen.all():
        table = arrays.make(seen.tolist(), dtype)  # (L, S) bool

        def mask_mod(b, h, q_idx, kv_idx):
            return lookup(table, q_idx, kv_idx)

        found["mask_mod"] = mask_mod
    if case.softcap is None and not case.alibi:
        return found
    cap, bias = case.softcap, None
    if case.alibi:  # slope[h] * (j - i) per head, (H, L, S)
        d = np.arange(S)[None, :] - (np.arange(L)[:, None] + case.shift)
        bias = arrays.make((prep.data.slopes[:, None, None] * d[None]).tolist(), dtype)

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = cap * tanh(score / cap)
        if bias is not None:
            score = score + lookup(bias, h, q_idx, kv_idx)
        return score

    found["score_mod"] = score_mod
    return found


def int_array(arrays: Arrays, values: list[int]) -> object:
    """int32 values in the caller's array type (FlashAttention's cu_seqlens are int32)."""
    if arrays.array == "numpy":
        return np.asarray(values, dtype=np.int32)
    if arrays.array == "torch":
        return arrays.torch.tensor(values, dtype=arrays.torch.int32, device=arrays.device)
    return list(values)


def cu_words(case: VariantCase, accepts: set[str] | None) -> list[str]:
    """cu_seqlens_q and cu_seqlens_k, or cu_seqlens where fn takes only that one."""
    if accepts is not None and "cu_seqlens" in accepts and "cu_seqlens_q" not in accepts:
        return ["cu_seqlens"]
    return ["cu_seqlens_q", "cu_seqlens_k"]


def keywords(
    case: VariantCase,
    prep: VariantPrepared,
    arrays: Arrays,
    dtype: str,
    style: str,
    accepts: set[str] | None,
) -> dict:
    """The keywords fn gets for the case in its style; NoKeyword where the style has none."""
    d, kw = prep.data, {}
    if style == "flex":
        kw.update(mods(case, prep, arrays, dtype))
    else:
        if case.prefix is not None:
            raise NoKeyword("FlashAttention's keywords have none for prefix-LM (use a mask_mod)")
        if case.registered_mask is not None:
            label = case.registered().label
            raise NoKeyword(f"FlashAttention's keywords have none for {label} (use a mask_mod)")
        if case.causal:
            kw["causal"] = True
        if case.window is not None:
            kw["window_size"] = case.window
        if case.softcap is not None:
            kw["softcap"] = case.softcap
        if case.alibi:
            kw["alibi_slopes"] = arrays.make(d.slopes.tolist(), dtype)
        if case.cu_seqlens is not None:
            for word in cu_words(case, accepts):
                kw[word] = int_array(arrays, list(case.cu_seqlens))
        if case.chunk is not None:
            kw["attention_chunk"] = case.chunk
    if case.sinks:
        kw["sinks"] = arrays.make(d.sinks.tolist(), dtype)
    if case.rotary is not None:
        kw["rotary_cos"] = arrays.make(d.cos.tolist(), dtype)
        kw["rotary_sin"] = arrays.make(d.sin.tolist(), dtype)
        kw["rotary_interleaved"] = case.rotary == "interleaved"
    if case.gqa and (accepts is None or "enable_gqa" in accepts):
        kw["enable_gqa"] = True
    return kw


__all__ = ["FLASH_WORDS", "FLEX_WORDS", "NoKeyword", "STYLES", "keywords", "mods", "style_of"]

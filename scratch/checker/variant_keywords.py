"""How a kernel receives a variant: FlashAttention's keywords or a FlexAttention mod pair.

style 'flash': causal (bottom-right), window_size=(left, right), softcap, alibi_slopes (H,),
sinks (H,), cu_seqlens_q and cu_seqlens_k (or one cu_seqlens), attention_chunk.
style 'flex': mask_mod(b, h, q_idx, kv_idx) and score_mod(score, b, h, q_idx, kv_idx), plus
sinks. Styles 'flash_attn' and 'flash_attn_varlen': FlashAttention's own interface
(variant_layout.py: flash_attn_func on (B, L, H, E), flash_attn_varlen_func packed), with its
keyword names: softmax_scale (where the case has a scale of its own), causal, window_size,
softcap, alibi_slopes; cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k for varlen; sinks,
attention_chunk and rotary_cos only where fn's signature names them. All: rotary_cos,
rotary_sin (S, E / 2) and rotary_interleaved for RoPE, enable_gqa where the kernel takes it.
The mods are written so that one function serves Python numbers, NumPy index arrays that
broadcast (a tile: rows[:, None], cols[None, :]) and torch tensors (FlexAttention's vmapped 0-d
tensors): each looks a cell up in a table of the caller's arrays.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from scratch.checker.arrays import Arrays
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_layout import FLASH_ATTN, INTERFACE, VARLEN, interface_of, sequences
from scratch.checker.variant_numpy import Planted, VariantData, allowed
from scratch.ops.validate import check_choice
from scratch.variants.dual import tanh

STYLES = ("flash", "flex", *INTERFACE)
FLASH_WORDS = ("window_size", "softcap", "alibi_slopes", "cu_seqlens", "cu_seqlens_q",
               "attention_chunk", "causal")  # fmt: skip
FLEX_WORDS = ("mask_mod", "score_mod")


class NoKeyword(Exception):
    """The style has no keyword for a feature of the case (prefix-LM in FlashAttention's)."""


def style_of(fn: Callable, style: str | None) -> str:
    """A style of STYLES: given, or read from fn's name and parameters (FlashAttention's own
    interface first: variant_layout.interface_of); ValueError when it cannot be."""
    if style is not None:
        check_choice(style, "variant_style", STYLES)
        return style
    found = interface_of(fn)
    if found is not None:
        return found
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
        "pass variant_style='flash', 'flex', 'flash_attn' or 'flash_attn_varlen'"
    )


def lookup(table: object, *index: object) -> object:
    """table[index] for arrays and tensors; nested lists indexed one level at a time."""
    if isinstance(table, list):
        for i in index:
            table = table[i]
        return table
    return table[index]


def mods(case: VariantCase, data: VariantData, arrays: Arrays, dtype: str) -> dict:
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
        bias = arrays.make((data.slopes[:, None, None] * d[None]).tolist(), dtype)

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
    data: VariantData,
    arrays: Arrays,
    dtype: str,
    style: str,
    accepts: set[str] | None,
) -> dict:
    """The keywords fn gets for the case in its style; NoKeyword where the style has none."""
    d, kw = data, {}
    if style == "flex":
        kw.update(mods(case, data, arrays, dtype))
    else:
        if style in INTERFACE:
            kw.update(interface_keywords(case, style, arrays, accepts))
        kw.update(flash_words(case, data, arrays, dtype))
        if case.cu_seqlens is not None and style == "flash":
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


def flash_words(case: VariantCase, data: VariantData, arrays: Arrays, dtype: str) -> dict:
    """causal, window_size, softcap, alibi_slopes: the mask and score keywords FlashAttention
    has; NoKeyword for a mask it has none for (prefix-LM, a registered mask)."""
    if case.prefix is not None:
        raise NoKeyword("FlashAttention's interface has no keyword for prefix-LM (use a mask_mod)")
    if case.registered_mask is not None:
        label = case.registered().label
        raise NoKeyword(f"FlashAttention's interface has no keyword for {label} (use a mask_mod)")
    kw: dict = {}
    if case.causal:
        kw["causal"] = True
    if case.window is not None:
        kw["window_size"] = case.window
    if case.softcap is not None:
        kw["softcap"] = case.softcap
    if case.alibi:
        kw["alibi_slopes"] = arrays.make(data.slopes.tolist(), dtype)
    return kw


# a feature flash_attn_func's signature has no keyword for, the keyword a kernel may add for it
# (FlashAttention 3's attention_chunk; flash_attn_with_kvcache's rotary_cos), and where it lives
OPTIONAL = {
    "sinks": ("sinks", "learned sinks (sinks=)"),
    "chunk": ("attention_chunk", "chunked local attention (attention_chunk=, FlashAttention 3)"),
    "rotary": ("rotary_cos", "RoPE (rotary_cos=, rotary_sin=: flash_attn_with_kvcache)"),
}


def interface_keywords(
    case: VariantCase, style: str, arrays: Arrays, accepts: set[str] | None
) -> dict:
    """FlashAttention's own interface's keywords beyond flash_words: softmax_scale, and for
    flash_attn_varlen_func the packed sequences' int32 cu_seqlens_q/k and max_seqlen_q/k;
    NoKeyword for a feature its signature has no keyword for. keywords() adds the rest."""
    used = {"sinks": case.sinks, "chunk": case.chunk is not None, "rotary": case.rotary}
    for feature, (word, said) in OPTIONAL.items():
        if used[feature] and accepts is not None and word not in accepts:
            raise NoKeyword(f"FlashAttention's interface has no keyword for {said}")
    if case.cu_seqlens is not None and style == FLASH_ATTN:
        raise NoKeyword(
            "FlashAttention's interface has no keyword for documents in flash_attn_func "
            "(flash_attn_varlen_func takes them as cu_seqlens)"
        )
    kw = {}
    if case.scale is not None:
        kw["softmax_scale"] = case.scale
    if style == VARLEN:
        for end, n in (("q", case.q), ("k", case.k)):
            cu = sequences(n, case.cu_seqlens)
            kw[f"cu_seqlens_{end}"] = int_array(arrays, cu)
            kw[f"max_seqlen_{end}"] = max(b - a for a, b in zip(cu, cu[1:]))
    return kw


__all__ = [
    "FLASH_WORDS",
    "FLEX_WORDS",
    "NoKeyword",
    "STYLES",
    "interface_keywords",
    "keywords",
    "mods",
    "style_of",
]

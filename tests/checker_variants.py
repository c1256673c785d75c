"""The variant checker against outside-style kernels (tests/variant_kernels.py).

CORRECT: name -> (fn, array, dtype), must pass. MISTAKES: name -> (fn, array, dtype, words): one
planted mistake and the words its diagnosis must hold (None: no name expected, any name is a
misname). BACKWARD_CORRECT and BACKWARD_MISTAKES: the same for check_variants_backward. Used
by tests/test_check_variants*.py (seed 0) and tests/checker_variants_sweep.py (many seeds).
"""

from __future__ import annotations

import functools

from tests import variant_backward_kernels as vb
from tests import variant_kernels as vk


def kernel(fn, name: str, **fixed):
    """fn with keywords fixed (block sizes, the bug), its signature kept for the style."""
    part = functools.wraps(fn)(functools.partial(fn, **fixed))
    part.__name__ = part.__qualname__ = name
    return part


CORRECT: dict[str, tuple] = {}
for _dtype in ("float32", "float64"):
    CORRECT[f"flash2 tiled 16x16 {_dtype}"] = (
        kernel(vk.flash2_variants, "flash2"),
        "numpy",
        _dtype,
    )
    CORRECT[f"flash2 tiled 64x32 {_dtype}"] = (
        kernel(vk.flash2_variants, "flash2_64x32", bq=64, bk=32), "numpy", _dtype
    )  # fmt: skip
    CORRECT[f"split-KV chunk 16 {_dtype}"] = (kernel(vk.split_kv, "split_kv"), "numpy", _dtype)
    CORRECT[f"split-KV chunk 7 {_dtype}"] = (
        kernel(vk.split_kv, "split_kv_7", chunk=7), "numpy", _dtype
    )  # fmt: skip
    CORRECT[f"FlexAttention eager {_dtype}"] = (kernel(vk.flex_eager, "flex"), "torch", _dtype)
    CORRECT[f"FlexAttention from FlashAttention keywords {_dtype}"] = (
        kernel(vk.flex_from_flash_words, "flex_words"), "torch", _dtype
    )  # fmt: skip


def _planted(fn, bug: str, words: str | None, array: str = "numpy") -> tuple:
    return (kernel(fn, f"{fn.__name__}_{bug}", bug=bug), array, "float32", words)


LEFT, RIGHT = "window off by one on the left", "window off by one on the right"
MISTAKES: dict[str, tuple] = {
    # FlashAttention-2 tiled, FlashAttention's keywords
    "flash2 window left one short": _planted(vk.flash2_variants, "window-left-short", LEFT),
    "flash2 window left one long": _planted(vk.flash2_variants, "window-left-long", LEFT),
    "flash2 window right one short": _planted(vk.flash2_variants, "window-right-short", RIGHT),
    "flash2 window right one long": _planted(vk.flash2_variants, "window-right-long", RIGHT),
    "flash2 ALiBi sign reversed": _planted(vk.flash2_variants, "alibi-sign", "ALiBi sign"),
    "flash2 ALiBi slope order reversed": _planted(
        vk.flash2_variants, "alibi-order", "ALiBi slope order"
    ),
    "flash2 softcap after the mask": _planted(
        vk.flash2_variants, "softcap-after-mask", "softcap applied after the mask"
    ),
    "flash2 softcap 1/cap": _planted(vk.flash2_variants, "softcap-inverted", "wrong cap"),
    "flash2 decode top-left": _planted(vk.flash2_variants, "decode-top-left", "top-left"),
    # GQA right in prefill, h % Hkv in decode only: passed before decode-split-kv-gqa
    "flash2 decode GQA h % Hkv": _planted(vk.flash2_variants, "decode-gqa-modulo", "h % Hkv"),
    "flash2 documents leak": _planted(vk.flash2_variants, "docs-no-end", "documents leak"),
    "flash2 sink left out": _planted(vk.flash2_variants, "sink-out", "sink left out"),
    # no splits: must not be named "once per split" (the unmasked sinks case cannot tell them)
    "flash2 sink added twice": _planted(vk.flash2_variants, "sink-twice", "sink counted 2 times"),
    "flash2 RoPE pairing swapped": _planted(vk.flash2_variants, "rope-pairing", "pairing swapped"),
    "flash2 RoPE decode not offset": _planted(
        vk.flash2_variants, "rope-no-offset", "decode positions not offset"
    ),
    "flash2 window tile skipping": _planted(
        vk.flash2_variants, "tile-skip-window", "the window's left boundary tile skipped"
    ),
    # split-KV / chunked, FlexAttention's mods
    "split-KV merged without rescaling": _planted(
        vk.split_kv, "merge-no-rescale", "merged without rescaling"
    ),
    "split-KV outputs averaged": _planted(vk.split_kv, "merge-average", "averaged"),
    "split-KV sink left out": _planted(vk.split_kv, "sink-out", "sink left out"),
    "split-KV score_mod after the mask": _planted(
        vk.split_kv, "softcap-after-mask", "softcap applied after the mask"
    ),
    "split-KV RoPE pairing swapped": _planted(vk.split_kv, "rope-pairing", "pairing swapped"),
    "split-KV RoPE decode not offset": _planted(
        vk.split_kv, "rope-no-offset", "decode positions not offset"
    ),
    "split-KV RoPE decode queries at S - 1": _planted(
        vk.split_kv, "rope-last-position", "all turned at RoPE position S - 1"
    ),
    "split-KV last split one key short": _planted(
        vk.split_kv, "last-split-short", "the last key (j = S - 1) seen by no query"
    ),
    "split-KV sink once per split": _planted(
        vk.split_kv, "sink-per-split", "the sink counted once per split (2 splits of the 24 keys)"
    ),
    # torch FlexAttention, called eagerly
    "flex sink left out": _planted(vk.flex_eager, "sink-out", "sink left out", "torch"),
    "flex RoPE pairing swapped": _planted(
        vk.flex_eager, "rope-pairing", "pairing swapped", "torch"
    ),
    "flex RoPE decode not offset": _planted(
        vk.flex_eager, "rope-no-offset", "decode positions not offset", "torch"
    ),
    "flex from keywords decode top-left": _planted(
        vk.flex_from_flash_words, "decode-top-left", "top-left", "torch"
    ),
}


BACKWARD_CORRECT: dict[str, tuple] = {}
for _dtype in ("float32", "float64"):
    BACKWARD_CORRECT[f"flash2 tiled backward {_dtype}"] = (
        kernel(vb.flash2_variants_backward, "flash2_backward"), "numpy", _dtype
    )  # fmt: skip
    BACKWARD_CORRECT[f"torch autograd, explicit {_dtype}"] = (
        kernel(vb.torch_autograd_backward, "autograd"), "torch", _dtype
    )  # fmt: skip

BACKWARD_MISTAKES: dict[str, tuple] = {
    "backward softcap without 1 - tanh^2": _planted(
        vb.flash2_variants_backward, "softcap-grad", "1 - tanh^2"
    ),
    "backward sink left out of lse": _planted(
        vb.flash2_variants_backward, "sink-out", "sink left out"
    ),
    "backward window left one short": _planted(
        vb.flash2_variants_backward, "window-left-short", LEFT
    ),
    "backward ALiBi sign reversed": _planted(
        vb.flash2_variants_backward, "alibi-sign", "ALiBi sign"
    ),
    "backward RoPE not turned back": _planted(
        vb.flash2_variants_backward, "rope-unturned", "RoPE's backward missing"
    ),
    "backward decode top-left": _planted(
        vb.flash2_variants_backward, "decode-top-left", "top-left"
    ),
    "autograd RoPE pairing swapped": _planted(
        vb.torch_autograd_backward, "rope-pairing", "pairing swapped", "torch"
    ),
}

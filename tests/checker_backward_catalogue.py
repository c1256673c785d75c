"""The backward checker's catalogues: correct backward kernels and planted backward mistakes.

CORRECT maps a name to (fn, backward, array, dtype), the arguments of check_backward; PLANTED
maps a name to (fn, backward, array, dtype, words the diagnosis must contain). Used by
tests/test_checker_backward.py (a seeded subset) and tests/checker_backward_sweep.py (0-199).
"""

from __future__ import annotations

from tests.backward_kernels import numpy_backward, torch_explicit_backward, torch_manual_forward

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch is optional
    torch = None

CORRECT: dict[str, tuple] = {
    "numpy explicit float32": (numpy_backward(), None, "numpy", "float32"),
    "numpy explicit float64": (numpy_backward(), None, "numpy", "float64"),
}
if torch is not None:
    CORRECT |= {
        "autograd sdpa float32": (F.scaled_dot_product_attention, None, "torch", "float32"),
        "autograd sdpa float64": (F.scaled_dot_product_attention, None, "torch", "float64"),
        "autograd sdpa float16": (F.scaled_dot_product_attention, None, "torch", "float16"),
        "autograd sdpa bfloat16": (F.scaled_dot_product_attention, None, "torch", "bfloat16"),
        "autograd manual float32": (torch_manual_forward, None, "torch", "float32"),
        "torch explicit float32": (None, torch_explicit_backward, "torch", "float32"),
        "torch explicit float64": (None, torch_explicit_backward, "torch", "float64"),
        "torch explicit float16": (None, torch_explicit_backward, "torch", "float16"),
        "torch explicit bfloat16": (None, torch_explicit_backward, "torch", "bfloat16"),
    }


def _planted(bug: str, words: str | None, dtype: str = "float32") -> tuple:
    return (None, numpy_backward(bug), "numpy", dtype, words)


PLANTED: dict[str, tuple] = {
    "D left out": _planted("no_d", "the D term left out"),
    "D before dropout": _planted("d_before_dropout", "D taken as rowsum(dP * P)"),
    "D elementwise": _planted("d_elementwise", "D not summed over the keys"),
    "D over queries": _planted("d_over_queries", "D summed over the queries"),
    "dS sign": _planted("sign", "dS with the wrong sign"),
    "dS transposed": _planted("ds_transposed", "dS transposed"),
    "no scale in dQ": _planted("no_scale_dq", "scale missing in dQ ("),
    "no scale in dK": _planted("no_scale_dk", "scale missing in dK"),
    "no scale anywhere": _planted("no_scale", "scale missing in dQ and dK"),
    "scale twice in dQ": _planted("scale_twice_dq", "scale applied twice in dQ"),
    "scale twice in dK": _planted("scale_twice_dk", "scale applied twice in dK"),
    "GQA first head only": _planted("gqa_first_head", "GQA gradients not summed"),
    "GQA not summed (shape)": _planted("gqa_not_summed", "GQA gradients not summed"),
    "GQA mean": _planted("gqa_mean", "averaged over the group"),
    "GQA interleaved": _planted("gqa_interleaved", "h % kv_heads"),
    "dropout mask not in dP": _planted("dropout_dp", "dropout mask not reused in dP"),
    "dropout mask ignored": _planted("dropout_none", "dropout mask not reused"),
    "dropout mask drawn again": _planted("fresh_dropout", "dropout mask not reused"),
    "dropout unscaled": _planted("dropout_unscaled", "1/(1-p) missing"),
    "NaN masked rows": _planted("nan_rows", "NaN from fully masked rows"),
    "dK dV swapped": _planted("swapped", "dK and dV swapped"),
    "dQ from V": _planted("dq_from_v", "dQ computed from V"),
    "mask dropped in backward": _planted("mask_dropped", "mask (or causal mask) not applied"),
    "block softmax": _planted("block_softmax", "block's own softmax"),
    "inputs changed in place": _planted("in_place", "modifies its inputs in place"),
    "D left out float64": _planted("no_d", "the D term left out", "float64"),
    "dK dV swapped float64": _planted("swapped", "dK and dV swapped", "float64"),
}

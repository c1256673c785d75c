"""Run torch's FlexAttention (eager, float64, CPU) on a case, learned sinks as an extra key."""

from __future__ import annotations

import random
import warnings

import torch
import torch.nn.attention.flex_attention as flex_module
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from tests.flex_cases import Case


def randn(rng: random.Random, *shape: int) -> list:
    """Seeded standard normal numbers as nested lists."""
    if not shape:
        return rng.gauss(0.0, 1.0)
    return [randn(rng, *shape[1:]) for _ in range(shape[0])]


def torch_flex(case: Case, q, k, v, *, enable_gqa=False, sinks=None):
    """(output, lse) of torch's flex_attention on nested lists; sinks as a key of value 0."""
    q, k, v = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
    B, H, L, _ = q.shape
    S = k.shape[2]
    mask_mod, score_mod = case.mask_mod, case.score_mod
    if sinks is not None:  # the sink: key S, seen by every query, score sink[h], value 0
        logit = torch.tensor(sinks, dtype=torch.float64)
        k = torch.cat([k, torch.zeros_like(k[:, :, :1])], dim=2)
        v = torch.cat([v, torch.zeros_like(v[:, :, :1])], dim=2)
        inner_mask, inner_score = mask_mod, score_mod

        def score_mod(s, b, h, q_idx, kv_idx):
            kv_in = torch.clamp(kv_idx, max=S - 1)
            changed = s if inner_score is None else inner_score(s, b, h, q_idx, kv_in)
            return torch.where(kv_idx == S, logit[h], changed)

        if inner_mask is not None:

            def mask_mod(b, h, q_idx, kv_idx):
                kv_in = torch.clamp(kv_idx, max=S - 1)
                return (kv_idx == S) | inner_mask(b, h, q_idx, kv_in)

    block = None
    if mask_mod is not None:
        block = create_block_mask(mask_mod, B, H, L, k.shape[2], device="cpu")
    # eager without the dynamo trace of each new score_mod (0.02 s a call instead of 0.7 s):
    # the same higher-order op and the same dense math; the forward only (no backward here)
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager (uncompiled) flex_attention, return_lse
        out, lse = flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block, enable_gqa=enable_gqa, return_lse=True
        )
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = False
    return out, lse

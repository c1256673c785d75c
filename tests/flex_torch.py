"""Torch references for a case: torch's FlexAttention (eager, float64, CPU), learned sinks as an
extra key; and the explicit torch form of the same rule (what autograd differentiates)."""

from __future__ import annotations

import math
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


def torch_flex(case: Case, q, k, v, *, enable_gqa=False, sinks=None, traced=False, scale=None):
    """(output, lse) of torch's flex_attention on nested lists; sinks as a key of value 0.

    traced=True takes torch's ordinary eager path (a dynamo trace of the mods per call, ~0.7 s).
    """
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
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = not traced
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager (uncompiled) flex_attention, return_lse
        out, lse = flex_attention(
            q, k, v, score_mod, block, scale, enable_gqa=enable_gqa, return_lse=True
        )
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = False
    return out, lse


def explicit_forward(case: Case, q, k, v, sinks=None, dtype=torch.float64):
    """(output, leaves) of the explicit torch form: scores, the case's torch score_mod and
    mask_mod on index grids, a softmax with the learned sink in its denominator, weights @ v.
    The leaves (q, k, v and the sinks when given) require grad, for torch.autograd.grad."""
    q, k, v = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v))
    B, H, L, E = q.shape
    S, group = k.shape[2], H // k.shape[1]
    k_all, v_all = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # (B, H, S, .)
    b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
    i, j = torch.arange(L).view(1, 1, L, 1), torch.arange(S).view(1, 1, 1, S)
    scores = q @ k_all.transpose(-1, -2) / math.sqrt(E)  # (B, H, L, E) @ (B, H, E, S)
    if case.score_mod is not None:
        scores = case.score_mod(scores, b, h, i, j).to(dtype)  # float64 tables: back to dtype
    if case.mask_mod is not None:
        seen = case.mask_mod(b, h, i, j).expand(B, H, L, S)
        scores = torch.where(seen, scores, -math.inf)
    top = scores.detach().amax(-1, keepdim=True)  # (B, H, L, 1)
    leaves = [q, k, v]
    if sinks is not None:
        sink = torch.tensor(sinks, dtype=dtype, requires_grad=True)
        leaves.append(sink)
        top = torch.maximum(top, sink.detach().view(1, H, 1, 1))
    top = torch.where(torch.isinf(top), 0.0, top)
    e = torch.exp(scores - top)  # masked keys: exp(-inf) = 0
    total = e.sum(-1, keepdim=True)
    if sinks is not None:
        total = total + torch.exp(sink.view(1, H, 1, 1) - top)
    weights = e / torch.where(total == 0, 1.0, total)  # a row that sees nothing: weights 0
    return weights @ v_all, leaves  # (B, H, L, S) @ (B, H, S, Ev)

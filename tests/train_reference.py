"""The tiny transformer of scratch.train written again in torch, for autograd to differentiate.

Test-only: the same parameters (a dict of NumPy arrays) and the same forward as
scratch/train/model.py, but in torch ops, so `torch.autograd.grad` gives the reference
gradients every hand-written backward line is compared with.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from scratch.train.config import ModelConfig
from scratch.train.model import LN_EPS


def torch_loss(config: ModelConfig, params: dict, inputs, targets) -> tuple:
    """(mean loss, the parameters as leaf tensors) in float64."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    B, T = inputs.shape
    H, Hkv, dh = config.n_heads, config.kv_heads, config.d_head
    tokens = torch.tensor(inputs)
    x = p["w_te"][tokens] + p["w_pe"][:T]
    for n in range(config.n_layers):
        h = x
        if config.norm:
            h = F.layer_norm(x, (config.d_model,), p[f"{n}.ln1_g"], p[f"{n}.ln1_b"], LN_EPS)
        q = (h @ p[f"{n}.w_q"]).view(B, T, H, dh).transpose(1, 2)
        k = (h @ p[f"{n}.w_k"]).view(B, T, Hkv, dh).transpose(1, 2)
        v = (h @ p[f"{n}.w_v"]).view(B, T, Hkv, dh).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=config.causal, enable_gqa=Hkv != H)
        x = x + out.transpose(1, 2).reshape(B, T, H * dh) @ p[f"{n}.w_o"]
        if config.mlp:
            h2 = x
            if config.norm:
                h2 = F.layer_norm(x, (config.d_model,), p[f"{n}.ln2_g"], p[f"{n}.ln2_b"], LN_EPS)
            act = torch.relu(h2 @ p[f"{n}.w_fc"] + p[f"{n}.b_fc"])
            x = x + act @ p[f"{n}.w_proj"] + p[f"{n}.b_proj"]
    if config.norm:
        x = F.layer_norm(x, (config.d_model,), p["lnf_g"], p["lnf_b"], LN_EPS)
    logits = x @ p["w_u"]
    loss = F.cross_entropy(logits.reshape(B * T, -1), torch.tensor(targets).reshape(-1))
    return loss, p


def torch_gradients(config: ModelConfig, params: dict, inputs, targets) -> tuple[float, dict]:
    """(loss, every parameter's gradient as float64 NumPy) by torch autograd."""
    loss, p = torch_loss(config, params, inputs, targets)
    names = list(p)
    grads = torch.autograd.grad(loss, [p[n] for n in names])
    return float(loss.detach()), {n: g.numpy() for n, g in zip(names, grads)}


def as_float64(params: dict) -> dict:
    """A copy of the parameters in float64."""
    return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}

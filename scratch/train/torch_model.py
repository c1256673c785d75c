"""The tiny transformer of scratch.train written again in torch: autograd's reference.

The same parameters (a dict of arrays) and the same forward as model.py, in torch ops: the tests
compare every hand-written gradient with `torch.autograd.grad` of this loss in float64, and the
benchmark trains it beside the NumPy model on the same data (bench/train_goal.py). Needs torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from scratch.train.config import ModelConfig
from scratch.train.model import LN_EPS


def leaves(params: dict, dtype: torch.dtype = torch.float64) -> dict:
    """The parameters as torch leaf tensors that want gradients."""
    return {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in params.items()}


def torch_loss(config: ModelConfig, p: dict, inputs, targets) -> torch.Tensor:
    """The mean loss of the model with parameters `p` (torch tensors)."""
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
    return F.cross_entropy(logits.reshape(B * T, -1), torch.tensor(targets).reshape(-1))


def torch_gradients(config: ModelConfig, params: dict, inputs, targets) -> tuple[float, dict]:
    """(loss, every parameter's gradient as float64 NumPy) by torch autograd."""
    p = leaves(params)
    loss = torch_loss(config, p, inputs, targets)
    names = list(p)
    grads = torch.autograd.grad(loss, [p[n] for n in names])
    return float(loss.detach()), {n: g.numpy() for n, g in zip(names, grads)}


__all__ = ["leaves", "torch_gradients", "torch_loss"]

"""The torch backend's flex_attention and its backward: torch's FlexAttention, or written out.

Same arguments and meaning as scratch.flex_attention / scratch.flex_attention_backward (tensors,
NumPy arrays or nested lists in; tensors on the backend's device out, in the inputs' common
floating dtype or `dtype=`). The kernel is chosen once per call, never swapped silently
(`kernel=` picks one, or says why it cannot run):

- "flex-compiled": torch.compile(flex_attention) with torch's block mask of the mask_mod. Chosen
  where the machine can compile (torch_flex_compile probes once per device type and caches the
  answer). torch 2.13 compiles FlexAttention on CPU for float32/16-bit inference without lse
  only; on this development machine (CPU, g++) the probe passes after about 25 s, and each new
  shape or mod compiles again.
- "flex-eager": torch's FlexAttention uncompiled (dense math, every (b, h, q, kv) cell), with
  the block mask; what runs for float64 (any device), and on CPU for return_lse and sinks.
- "explicit": the same steps written out in torch (torch_flex_explicit); what runs on CPU when
  any input needs a gradient, since torch 2.13's FlexAttention has no CPU backward.

Learned sinks: FlexAttention has no `sinks` argument in torch 2.13; from its output o and lse the
sink is folded in exactly: lse' = logaddexp(lse, sink[h]), o' = o * exp(lse - lse').

The backward is torch.autograd.grad through the explicit path on CPU, and through FlexAttention
on CUDA (compiled where the probe passes); with sinks the explicit path on CUDA too (its sink
gradient needs no gradient through FlexAttention's lse).
"""

from __future__ import annotations

import warnings

import torch
from torch.nn.attention.flex_attention import AuxRequest
from torch.nn.attention.flex_attention import flex_attention as torch_flex_attention

from scratch.front_doors import flex_backward_door, flex_door
from scratch.options import FlexOptions
from scratch.validate import check_flag, check_grad_output

from .torch_flex_compile import compile_problem, compiled_flex_attention
from .torch_flex_explicit import explicit_steps
from .torch_flex_inputs import FlexCall, prepare

KERNELS = ("flex-compiled", "flex-eager", "explicit")


def choose_kernel(call: FlexCall, kernel: str | None, lse: bool, grad: bool) -> str:
    """The kernel for this call: `kernel` if it can run it (ValueError saying why not); by
    default compiled FlexAttention where it can run, else eager, else the explicit path."""
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel: expected None or one of {', '.join(KERNELS)}, found {kernel!r}")
    device, storage = call.place.device, call.place.storage
    no_flex = None  # why FlexAttention itself cannot run the call
    if grad and device.type == "cpu":
        no_flex = "torch 2.13's FlexAttention does not support backward on CPU"
    elif grad and call.sinks is not None:
        no_flex = "the sinks' gradient is taken through the explicit path"
    if kernel == "explicit" or (kernel is None and no_flex):
        return "explicit"
    if kernel is None:
        return "flex-eager" if compile_problem(device, storage, lse, grad) else "flex-compiled"
    reason = no_flex or (kernel == "flex-compiled" and compile_problem(device, storage, lse, grad))
    if reason:
        raise ValueError(f"kernel: {kernel!r} cannot run this call ({reason})")
    return kernel


def _flex(call: FlexCall, kernel: str, q, k, v, lse: bool):
    """torch's FlexAttention (compiled or eager) on the call; (output, lse) when lse."""
    run = compiled_flex_attention(call.place.device) if kernel == "flex-compiled" else None
    run = run or torch_flex_attention
    group = call.q.shape[1] != call.k.shape[1]
    aux = AuxRequest(lse=True) if lse else None
    with warnings.catch_warnings():  # eager on purpose: torch's advice to compile is not news
        warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
        found = run(
            q, k, v, call.score_mod, call.torch_block_mask(), call.scale, group, return_aux=aux
        )
    return (found[0], found[1].lse) if lse else found


def _forward(call: FlexCall, kernel: str, q, k, v, sinks) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, lse) of the call by `kernel`, sinks folded in; lse None for compiled on CPU."""
    if kernel == "explicit":
        wide = call.place.wide
        steps = explicit_steps(
            q.to(wide), k.to(wide), v.to(wide), call.scale, call.score_mod, call.mask_mod, sinks
        )
        return steps.output, steps.lse
    if kernel == "flex-compiled" and call.place.device.type == "cpu":
        return _flex(call, kernel, q, k, v, lse=False), None
    output, lse = _flex(call, kernel, q, k, v, lse=True)
    if sinks is not None:
        # the sink is one more denominator term: lse' = log(e^lse + e^sink), weights * e^(lse-lse')
        total = torch.logaddexp(lse, sinks.view(1, -1, 1))  # (B, H, L)
        output, lse = output * torch.exp(lse - total).unsqueeze(-1), total
    return output, lse


def attention_of(
    query, key, value, options: FlexOptions, *, kernel: str | None = None, device="cpu",
    dtype=None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """FlexAttention in torch: output (B, H, L, Ev), and lse (B, H, L) with return_lse.

    Inputs that require a gradient get one through the result (explicit path on CPU)."""
    call = prepare(query, key, value, options, device, dtype)
    wants = check_flag(options.return_lse, "return_lse")
    inputs = (call.q, call.k, call.v, call.sinks)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
    chosen = choose_kernel(call, kernel, wants or call.sinks is not None, grad)
    output, lse = _forward(call, chosen, call.q, call.k, call.v, call.sinks)
    output = output.to(call.place.storage)
    return (output, lse.to(call.place.wide)) if wants else output


flex_attention = flex_door(attention_of)


def gradients_of(
    query, key, value, grad_output, options: FlexOptions, *, kernel: str | None = None,
    device="cpu", dtype=None,
) -> tuple:  # fmt: skip
    """(grad_query, grad_key, grad_value), plus grad_sinks (H,) when sinks are given."""
    call = prepare(query, key, value, options, device, dtype)
    B, H, L, _ = call.shape
    Ev = call.v.shape[3]
    d_out = call.place.tensor(grad_output, "grad_output", min_dims=0)
    check_grad_output(tuple(d_out.shape), (B, H, L, Ev))
    chosen = choose_kernel(call, kernel, call.sinks is not None, grad=True)
    leaves = [t.detach().requires_grad_() for t in (call.q, call.k, call.v)]
    if call.sinks is not None:
        leaves.append(call.sinks.detach().requires_grad_())
    with torch.enable_grad():
        output, _ = _forward(call, chosen, *leaves[:3], leaves[3] if len(leaves) > 3 else None)
        grads = torch.autograd.grad(output, leaves, d_out.to(output.dtype), allow_unused=True)
    return tuple(
        torch.zeros_like(leaf) if g is None else g.to(call.place.storage)
        for g, leaf in zip(grads, leaves)
    )


flex_attention_backward = flex_backward_door(gradients_of)


__all__ = ["KERNELS", "choose_kernel", "flex_attention", "flex_attention_backward"]

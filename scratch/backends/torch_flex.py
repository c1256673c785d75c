"""The torch backend's flex_attention and its backward: torch's FlexAttention, or written out.

Same arguments and meaning as scratch.flex_attention / scratch.flex_attention_backward (tensors,
NumPy arrays or nested lists in; tensors on the backend's device out, in the inputs' common
floating dtype or `dtype=`). The kernel is chosen once per call, never swapped silently
(`kernel=` picks one, or says why it cannot run):

- "flex-compiled": torch.compile(flex_attention) with torch's block mask of the mask_mod. Chosen
  where the machine can compile: one probe per device type, cached for the process, compiles a
  tiny causal float32 case and compares it with eager FlexAttention; any failure (no C++
  compiler or Triton, an inductor error, a wrong answer) is recorded as the reason and the call
  runs eagerly. torch 2.13 compiles FlexAttention on CPU for float32/16-bit inference without
  lse only (`compile_problem` refuses the rest before the probe: float64, and on CPU return_lse
  and any gradient); on this development machine (CPU, g++) the probe passes after about 25 s,
  and each new shape or mod compiles again (about 10 s): compiling pays only for large or
  repeated calls.
- "flex-eager": torch's FlexAttention uncompiled (dense math, every (b, h, q, kv) cell), with
  the block mask; what runs for float64 (any device), and on CPU for return_lse and sinks.
- "explicit": the same steps written out in torch (torch_flex_explicit); what runs on CPU when
  any input needs a gradient, since torch 2.13's FlexAttention has no CPU backward.

A call's inputs are checked by the ground truth's rules and words (scratch.flex.forward.check_call;
`prepare`). block_mask is a scratch BlockMask (from scratch.create_block_mask; its mask_mod's
torch form builds torch's own block mask) or a torch BlockMask (from torch's create_block_mask,
used as it is).

Learned sinks: FlexAttention has no `sinks` argument in torch 2.13; from its output o and lse the
sink is folded in exactly: lse' = logaddexp(lse, sink[h]), o' = o * exp(lse - lse').

The backward is torch.autograd.grad through the explicit path on CPU, and through FlexAttention
on CUDA (compiled where the probe passes); with sinks the explicit path on CUDA too (its sink
gradient needs no gradient through FlexAttention's lse).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask
from torch.nn.attention.flex_attention import BlockMask as TorchBlockMask
from torch.nn.attention.flex_attention import flex_attention as torch_flex_attention

from scratch.backends.torch_flex_explicit import explicit_steps, torch_form
from scratch.backends.torch_inputs import Placement, placement
from scratch.core.front_doors import flex_backward_door, flex_door
from scratch.core.options import FlexOptions
from scratch.flex.forward import check_block_shape, check_call
from scratch.ops.validate import check_flag, check_grad_output, check_scale
from scratch.variants.causal import at_or_before
from scratch.variants.sinks import sink_logits

KERNELS = ("flex-compiled", "flex-eager", "explicit")


# ---------------------------------------------------------------- one call's inputs


_QKV = ("query", "key", "value")


@dataclass(frozen=True)
class FlexCall:
    """A checked call: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) and what changes them."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    place: Placement
    scale: float
    score_mod: Callable | None  # torch forms (torch_flex_explicit.torch_form)
    mask_mod: Callable | None
    mask_shape: tuple[int, int] | None  # the block mask's (B, H): 1 broadcasts
    block_size: tuple[int, int] | int
    given_block: TorchBlockMask | None  # a torch BlockMask passed in
    sinks: torch.Tensor | None  # (H,) in the math dtype

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H, L, S)."""
        return (*self.q.shape[:3], self.k.shape[2])

    def torch_block_mask(self) -> TorchBlockMask | None:
        """torch's block mask of the mask_mod's torch form (the tiles FlexAttention visits)."""
        if self.given_block is not None or self.mask_mod is None:
            return self.given_block
        (_, _, L, S), (mb, mh) = self.shape, self.mask_shape
        return create_block_mask(
            self.mask_mod, mb, mh, L, S, device=self.place.device, BLOCK_SIZE=self.block_size
        )


def _sinks(sinks: object, H: int, place: Placement) -> torch.Tensor | None:
    """The sink logits as a (H,) tensor in the math dtype (a tensor passed in keeps its graph)."""
    if sinks is None:
        return None
    if isinstance(sinks, torch.Tensor):
        sink_logits(sinks.detach().tolist() if sinks.ndim == 1 else sinks, H)
        return sinks.to(device=place.device, dtype=place.wide)
    logits = sink_logits(sinks, H)
    return torch.tensor(logits, device=place.device, dtype=place.wide)


def prepare(
    query: object, key: object, value: object, options: FlexOptions, device, dtype
) -> FlexCall:
    """Check one call's inputs (the ground truth's rules) and give its tensors and torch mods."""
    place = placement((query, key, value), dtype, device)
    q, k, v = (place.tensor(x, name, min_dims=0) for x, name in zip((query, key, value), _QKV))
    block_mask = options.block_mask
    given = block_mask if isinstance(block_mask, TorchBlockMask) else None
    shapes = (tuple(t.shape) for t in (q, k, v))
    checked = replace(options, block_mask=None) if given else options  # torch's: checked below
    B, H, _, L, S, E, _ = check_call(*shapes, checked)
    if given is not None:
        check_block_shape(tuple(given.shape), B, H, L, S)
        mask_mod, mask_shape, size = given.mask_mod, None, 128
    elif block_mask is not None:
        mask_mod, mask_shape = torch_form(block_mask.mask_mod, "mask"), block_mask.shape[:2]
        size = block_mask.block_size
    else:
        mask_mod, mask_shape, size = None, None, 128
    return FlexCall(
        q,
        k,
        v,
        place,
        check_scale(options.scale, E),
        torch_form(options.score_mod, "score"),
        mask_mod,
        mask_shape,
        size,
        given,
        _sinks(options.sinks, H, place),
    )


# ---------------------------------------------------------------- can this machine compile?


_probed: dict[str, str | None] = {}  # device type -> None if compiling works, else why not
_compiled: dict[str, Callable] = {}


def _causal(b, h, q_idx, kv_idx):
    return at_or_before(kv_idx, q_idx)


def _probe(device_type: str) -> str | None:
    """Compile FlexAttention once on this device type; None if it runs and agrees with eager."""
    try:
        compiled = torch.compile(torch_flex_attention, dynamic=False)
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 1, 128, 16, generator=gen).to(device_type) for _ in range(3))
        block = create_block_mask(_causal, 1, 1, 128, 128, device=device_type)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, want = (
                compiled(q, k, v, block_mask=block),
                torch_flex_attention(q, k, v, block_mask=block),
            )
    except Exception as exc:  # any failure means "cannot compile here", with its reason
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"torch.compile of FlexAttention failed ({type(exc).__name__}: {first[:200]})"
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        return "torch.compile of FlexAttention disagreed with eager FlexAttention"
    _compiled[device_type] = compiled
    return None


def compile_problem(device: torch.device, dtype: torch.dtype, lse: bool, grad: bool) -> str | None:
    """Why compiled FlexAttention cannot run this call (None: it can; probes once per device)."""
    if dtype == torch.float64:  # CPU: refused by inductor; CUDA: its lse is kept in float32
        return "compiled FlexAttention works in float32, float16 or bfloat16, not float64"
    if device.type == "cpu":
        if lse:
            return "compiled FlexAttention on CPU returns no lse (return_lse or sinks)"
        if grad:
            return "compiled FlexAttention on CPU is inference only (no gradient)"
    if device.type not in _probed:
        _probed[device.type] = _probe(device.type)
    return _probed[device.type]


def compiled_flex_attention(device: torch.device) -> Callable:
    """The compiled flex_attention for a device type that passed its probe."""
    return _compiled[device.type]


# ---------------------------------------------------------------- the kernels


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


__all__ = [
    "KERNELS",
    "FlexCall",
    "choose_kernel",
    "compile_problem",
    "flex_attention",
    "flex_attention_backward",
    "prepare",
]

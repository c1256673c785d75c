"""Can this machine compile FlexAttention? One probe per device type, cached for the process.

The probe compiles `torch.compile(flex_attention)` for a tiny causal float32 case and compares
it with eager FlexAttention; any failure (no C++ compiler or Triton, an inductor error, a wrong
answer) is recorded as the reason and the callers run eagerly instead. On a CPU with g++ (the
development machine: 2 cores) the probe takes about 25 s, and every new shape or mod compiles
again (about 10 s), so compiling pays only for large or repeated calls. What torch 2.13's compiled
FlexAttention cannot do is refused before the probe, by `compile_problem`: float64 (CPU: refused
by inductor; CUDA: its lse is stored in float32), and on CPU return_lse and any gradient.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from ..variants.causal import at_or_before

_probed: dict[str, str | None] = {}  # device type -> None if compiling works, else why not
_compiled: dict[str, Callable] = {}


def _causal(b, h, q_idx, kv_idx):
    return at_or_before(kv_idx, q_idx)


def _probe(device_type: str) -> str | None:
    """Compile FlexAttention once on this device type; None if it runs and agrees with eager."""
    try:
        compiled = torch.compile(flex_attention, dynamic=False)
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 1, 128, 16, generator=gen).to(device_type) for _ in range(3))
        block = create_block_mask(_causal, 1, 1, 128, 128, device=device_type)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, want = (
                compiled(q, k, v, block_mask=block),
                flex_attention(q, k, v, block_mask=block),
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


__all__ = ["compile_problem", "compiled_flex_attention"]

"""The checker's catalogues: correct kernels (must pass every seed) and planted mistakes.

CORRECT maps a name to (fn, array, dtype); PLANTED maps a name to (fn, array, dtype, the words
the diagnosis must contain, or None where no diagnosis is expected). Used by tests/test_checker
(a seeded subset) and tests/checker_sweep.py (seeds 0-199).
"""

from __future__ import annotations

import functools

import scratch.backends as backends
from tests import kernels_for_checker as kernels
from tests import tiled_kernels as tk

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch is optional
    torch = None


def named(fn, name: str):
    """fn under a readable name (the report prints it)."""

    @functools.wraps(fn)
    def kernel(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        return fn(q, k, v, attn_mask, is_causal, scale, enable_gqa)

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def sdpa_nd(n: int):
    """PyTorch's fused SDPA called on n-D input (leading dims of 1 added, removed after)."""

    def kernel(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        extra = max(0, n - q.dim())
        up = (1,) * extra
        q2, k2, v2 = (x.reshape(up + tuple(x.shape)) for x in (q, k, v))
        out = F.scaled_dot_product_attention(
            q2, k2, v2, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
        )
        return out.reshape(tuple(out.shape[extra:]))

    kernel.__name__ = kernel.__qualname__ = f"sdpa_{n}d"
    return kernel


def backend_fn(name: str):
    """A backend's scaled_dot_product_attention as a checker-style fn."""
    sdpa = backends.get(name).scaled_dot_product_attention

    def fn(q, k, v, **kwargs):
        return sdpa(q, k, v, **kwargs)

    fn.__name__ = fn.__qualname__ = f"{name}_sdpa"
    return fn


def _correct() -> dict:
    found = {}
    numpy_kernels = {
        "numpy-plain": kernels.attention,
        "numpy-reversed": named(functools.partial(tk.reordered, order="reversed"), "reversed"),
        "numpy-key-by-key": named(functools.partial(tk.reordered, order="key-by-key"), "by_key"),
        "numpy-shuffled-per-call": named(functools.partial(tk.reordered, order="shuffled"), "shuf"),
    }
    for block in (1, 8, 16, 32, 64, 128):
        numpy_kernels[f"tiled-{block}"] = named(functools.partial(tk.tiled, block=block), "tiled")
    for block in (16, 64):
        numpy_kernels[f"tiled-{block}-exp2"] = named(
            functools.partial(tk.tiled, block=block, exp2=True), "tiled_exp2"
        )
    for name, fn in numpy_kernels.items():
        for dtype in ("float32", "float64"):
            found[f"{name} {dtype}"] = (fn, "numpy", dtype)
    found["tiled-16 float16"] = (numpy_kernels["tiled-16"], "numpy", "float16")
    for name in backends.available():
        array = "torch" if name.startswith("torch") else "numpy"
        found[f"backend {name} float32"] = (backend_fn(name), array, "float32")
    if torch is not None:
        for n in (3, 4):
            for dtype in ("float32", "float16", "bfloat16", "float64"):
                found[f"torch sdpa {n}-D {dtype}"] = (sdpa_nd(n), "torch", dtype)
    return found


CORRECT = _correct()

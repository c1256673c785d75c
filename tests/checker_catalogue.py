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
    found["numpy float16 textbook"] = (kernels.attention, "numpy", "float16")
    if torch is not None:
        for dtype in ("float16", "bfloat16"):
            found[f"torch {dtype} textbook (nanoGPT manual)"] = (textbook_zero_rows, "torch", dtype)
        for n in (3, 4):
            for dtype in ("float32", "float16", "bfloat16", "float64"):
                found[f"torch sdpa {n}-D {dtype}"] = (sdpa_nd(n), "torch", dtype)
    return found


def textbook_torch(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """nanoGPT's manual attention: scores, softmax and output all in the input dtype."""
    if enable_gqa and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale  # (..., L, E) @ (..., E, S) -> (..., L, S)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    elif attn_mask is not None:
        s = (
            s.masked_fill(~attn_mask, float("-inf"))
            if attn_mask.dtype == torch.bool
            else s + attn_mask
        )
    return torch.softmax(s, dim=-1) @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)


def textbook_zero_rows(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The textbook kernel with fully masked rows set to 0 (masked_rows='zero')."""
    out = textbook_torch(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    return torch.nan_to_num(out, nan=0.0)


def output_to_float16(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """A float32 kernel that rounds its output through float16 (an intermediate cast)."""
    out = kernels.attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    return out.astype("float16").astype(out.dtype)


def shuffled_missing_scale(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Sums keys in a different order on every call, and forgets the scale."""
    return tk.reordered(q, k, v, attn_mask, is_causal, 1.0, enable_gqa, order="shuffled")


def _planted() -> dict:
    expected = {
        "missing-scale": "missing scale",
        "scale-1/d": "scale 1/d instead of 1/sqrt(d)",
        "wrong-axis": "softmax over the wrong axis",
        "no-transpose": "without the transpose",
        "mask-inverted": "mask convention inverted",
        "causal-off-by-one": "diagonal excluded",
        "causal-bottom-right": "bottom-right causal alignment",
        "mask-before-scale": "mask added before scaling",
        "dropout": "dropout left on",
        "dropout-seeded": "dropout left on (weights zeroed or rescaled by 1.25",
        "no-max": "subtract the row max",
        "ignore-scale": "scale ignored",
        "gqa-interleaved": "h % Hkv",
        "nan-rows": "masked_rows='nan'",
        "float16": "lower precision",
        "returns-weights": "returned the weights instead of the output",
        "sloppy": None,  # a uniform 2^-20 relative error: no known mistake, nothing to name
    }
    found = {f"numpy {b}": (kernels.BUGGY[b], "numpy", "float32", w) for b, w in expected.items()}
    tiled = {
        ("no-rescale", 16): "accumulator not rescaled",
        ("no-rescale", 64): "accumulator not rescaled",
        ("rescale-inverted", 16): "rescale factor inverted",
        ("rescale-inverted", 32): "rescale factor inverted",
        ("stale-max", 16): "running max stale",
        ("sum-not-rescaled", 32): "denominator not rescaled",
        ("drop-last", 16): "last partial key block dropped",
        ("drop-last", 64): "last partial key block dropped",
        ("causal-future", 16): "one future key allowed",
        ("causal-diag", 32): "diagonal excluded",
        ("k-as-v", 16): "k read where v belongs",
        ("scores-fp16", 16): "scores q @ k^T summed in float16",
        ("mutate-q", 16): "modifies its inputs in place",
    }
    for (bug, block), words in tiled.items():
        fn = named(functools.partial(tk.tiled, block=block, bug=bug), f"tiled_{bug}")
        found[f"tiled-{block} {bug}"] = (fn, "numpy", "float32", words)
    cast = named(functools.partial(tk.tiled, bug="scores-f32"), "tiled_scores_f32")
    found["tiled float64 scores cast to float32"] = (cast, "numpy", "float64", "lower precision")
    eps = named(functools.partial(tk.tiled, bug="eps"), "tiled_eps")
    found["tiled float64 +1e-12 in the denominator"] = (
        eps,
        "numpy",
        "float64",
        "epsilon added to the softmax denominator",
    )
    found["numpy float32 output through float16"] = (
        output_to_float16,
        "numpy",
        "float32",
        "lower precision",
    )
    acc16 = named(functools.partial(tk.tiled, bug="scores-16-sum"), "tiled_scores_16_sum")
    found["tiled float16 q @ k^T summed in float16"] = (
        acc16,
        "numpy",
        "float16",
        "16-bit accumulation",
    )
    found["numpy shuffled order, missing scale"] = (
        shuffled_missing_scale,
        "numpy",
        "float32",
        "missing scale",
    )
    if torch is not None:
        found["torch sdpa, scale argument dropped"] = (
            sdpa_without_scale,
            "torch",
            "float32",
            "scale ignored",
        )
        found["torch sdpa, bool mask inverted"] = (
            sdpa_mask_inverted,
            "torch",
            "float32",
            "mask convention inverted",
        )
    return found


def sdpa_without_scale(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's SDPA called without passing the scale on."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa
    )


def sdpa_mask_inverted(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's SDPA given ~mask (a 'True means masked' convention)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
    )


CORRECT = _correct()
PLANTED = _planted()


def diagnosis_counts(seed: int = 0, cases: str = "standard") -> dict:
    """{'named': [...], 'unnamed': [...], 'misnamed': [...], 'passed': [...]} over PLANTED.

    A mistake expected to be named is named when the first diagnosis holds the expected words,
    unnamed when there is none, misnamed otherwise; one expected to stay unnamed (None) is
    misnamed by any diagnosis. 'passed' lists planted mistakes the checker did not fail."""
    from scratch.checker import check

    counts: dict[str, list] = {"named": [], "unnamed": [], "misnamed": [], "passed": []}
    for name, (fn, array, dtype, words) in PLANTED.items():
        report = check(fn, array=array, dtype=dtype, seed=seed, cases=cases)
        if report:
            counts["passed"].append(name)
            continue
        first = report.diagnosis.split("; ")[0] if report.diagnosis else None
        if first is None:
            counts["unnamed"].append(name)
        elif words is not None and words in report.diagnosis:
            counts["named"].append(name)
        else:
            counts["misnamed"].append((name, report.diagnosis))
    return counts

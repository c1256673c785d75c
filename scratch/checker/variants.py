"""Deliberately wrong attentions in float64 NumPy: each plants one known mistake.

The diagnosis names a failing kernel's mistake only when the kernel's output lands on one of
these (diagnosis.py holds the catalogue). Each function takes a reference.Problem and returns
(..., L, Ev).
"""

from __future__ import annotations

import numpy as np

from scratch.checker.reference import Problem, online, store


def attend(
    p: Problem,
    *,
    scale: float | None = None,
    allowed: object = "same",
    axis: int = -1,
    transpose: bool = True,
    mask_first: bool = False,
    interleave: bool = False,
    read_k_as_v: bool = False,
    policy: str = "zero",
    narrow: tuple[str, str] | None = None,
    stretch: float = 1.0,
    v_interleave: bool = False,
    add_transposed: bool = False,
    mask_after: bool = False,
    denominator: float = 0.0,
    lse_in_exp2: bool = False,
) -> np.ndarray:
    """Attention in float64 with one thing changed (or, with narrow=(stage, dtype), rounded).

    stretch multiplies the masked scores (exp for exp2 after a log2(e) fold: log2(e));
    denominator is added to each row's sum of exp(s - max); mask_after applies the mask to the
    weights of the unmasked scores; lse_in_exp2 weights exp2(s log2(e) - lse) with lse natural."""
    k, v = p.heads(interleave)
    if v_interleave:
        v = p.heads(True)[1]
    q = p.q
    if read_k_as_v:
        v = k
    if narrow and narrow[0] == "inputs":
        q, k, v = (store(a, narrow[1]) for a in (q, k, v))
    scale = p.scale if scale is None else scale
    keep = p.allowed if isinstance(allowed, str) else allowed
    with np.errstate(all="ignore"):
        if narrow and narrow[0] in ("scores summed", "scores accumulated"):  # each term rounded
            kt = np.swapaxes(store(k, narrow[1]), -1, -2)  # (..., E, S)
            qn = store(q, narrow[1])
            s = np.zeros(q.shape[:-1] + (kt.shape[-1],))
            for i in range(q.shape[-1]):  # (..., L, 1) * (..., 1, S) -> (..., L, S)
                s = store(
                    s + store(qn[..., :, i : i + 1] * kt[..., i : i + 1, :], narrow[1]), narrow[1]
                )
        elif narrow and narrow[0] == "scores computed":  # numpy's float16 matmul
            s = store(q, narrow[1]).astype(np.float16) @ np.swapaxes(k, -1, -2).astype(np.float16)
            s = s.astype(np.float64)
        else:
            s = q @ (np.swapaxes(k, -1, -2) if transpose else k)  # (..., L, E) @ (..., E, S)
        add = None if p.add is None else (p.add.swapaxes(-1, -2) if add_transposed else p.add)
        if add is not None and not mask_after:
            s = (s + add) * scale if mask_first else s * scale + add
        else:
            s = s * scale
        s = s * stretch
        if narrow and narrow[0] in ("scores", "scores computed", "scores summed"):
            s = store(s, narrow[1])
        if keep is not None and not mask_after:
            s = np.where(keep, s, -np.inf)
        top = np.max(s, axis=axis, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = np.sum(e, axis=axis, keepdims=True)
        w = e / np.where(total > 0, total + denominator, 1.0)
        if lse_in_exp2:  # exp2(s log2(e) - lse) = exp(s - lse) * exp(lse (1 - ln 2))
            lse = np.where(total > 0, top + np.log(np.where(total > 0, total, 1.0)), 0.0)
            w = w * np.exp(lse * (1.0 - np.log(2.0)))
        if mask_after:  # softmax of the unmasked scores, then the mask applied to the weights
            if add is not None:
                w = w * np.exp(add)
            if keep is not None:
                w = np.where(keep, w, 0.0)
            total = np.sum(w, axis=axis, keepdims=True)
        if narrow and narrow[0] in ("weights", "weights @ v"):
            w = store(w, narrow[1])
        if narrow and narrow[0] == "weights @ v":  # a 16-bit matmul: operands and result rounded
            v = store(v, narrow[1])
        out = w @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
        empty = (total == 0) if axis == -1 else np.zeros(out.shape[:-1] + (1,), dtype=bool)
        if policy == "nan":
            out = np.where(empty, np.nan, out)
        elif policy == "uniform":
            out = np.where(empty, np.mean(v, axis=-2, keepdims=True), out)
        if narrow and narrow[0] in ("output", "weights @ v"):
            out = store(out, narrow[1])
        return out


def tiled(p: Problem, block: int, **planted) -> np.ndarray:
    """Online softmax over key blocks in float64 with a block mistake planted (reference.online's
    keywords: rescale, drop_last, store_acc)."""
    return online(p, "float64", block, **planted)

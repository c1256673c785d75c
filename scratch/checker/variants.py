"""Deliberately wrong attentions in float64 NumPy: each plants one known mistake.

The diagnosis names a failing kernel's mistake only when the kernel's output lands on one of
these (see diagnosis.py). Each function takes a reference.Problem and returns (..., L, Ev).
"""

from __future__ import annotations

import numpy as np

from .reference import Problem, store


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
) -> np.ndarray:
    """Attention in float64 with one thing changed (or, with narrow=(stage, dtype), rounded)."""
    k, v = p.heads(interleave)
    q = p.q
    if read_k_as_v:
        v = k
    if narrow and narrow[0] == "inputs":
        q, k, v = (store(a, narrow[1]) for a in (q, k, v))
    scale = p.scale if scale is None else scale
    keep = p.allowed if isinstance(allowed, str) else allowed
    with np.errstate(all="ignore"):
        if narrow and narrow[0] == "scores summed":  # each product and partial sum rounded
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
        if p.add is not None:
            s = (s + p.add) * scale if mask_first else s * scale + p.add
        else:
            s = s * scale
        if narrow and narrow[0] in ("scores", "scores computed", "scores summed"):
            s = store(s, narrow[1])
        if keep is not None:
            s = np.where(keep, s, -np.inf)
        top = np.max(s, axis=axis, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = np.sum(e, axis=axis, keepdims=True)
        w = e / np.where(total > 0, total, 1.0)
        if narrow and narrow[0] == "weights":
            w = store(w, narrow[1])
        out = w @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
        empty = (total == 0) if axis == -1 else np.zeros(out.shape[:-1] + (1,), dtype=bool)
        if policy == "nan":
            out = np.where(empty, np.nan, out)
        elif policy == "uniform":
            out = np.where(empty, np.mean(v, axis=-2, keepdims=True), out)
        if narrow and narrow[0] == "output":
            out = store(out, narrow[1])
        return out


def tiled(p: Problem, block: int, *, rescale: str = "right", drop_last: bool = False):
    """Online softmax over key blocks in float64, with the accumulator's rescale mishandled."""
    k, v = p.heads()
    q, S = p.q, k.shape[-2]
    with np.errstate(all="ignore"):
        s_all = q @ np.swapaxes(k, -1, -2) * p.scale  # (..., L, S)
        if p.add is not None:
            s_all = s_all + p.add
        if p.allowed is not None:
            s_all = np.where(p.allowed, s_all, -np.inf)
        top = np.full(q.shape[:-1] + (1,), -np.inf)
        total = np.zeros_like(top)
        out = np.zeros(q.shape[:-1] + (v.shape[-1],))
        end = S - S % block if drop_last else S
        for j in range(0, end, block):
            s = s_all[..., j : j + block]
            new = np.maximum(top, np.max(s, axis=-1, keepdims=True))
            safe = np.where(np.isfinite(new), new, 0)
            alpha = np.exp(top - safe)
            e = np.exp(s - safe)
            total = total * alpha + np.sum(e, axis=-1, keepdims=True)
            if rescale == "right":
                out = out * alpha
            elif rescale == "inverted":  # exp(new - old) instead of exp(old - new)
                out = out * np.where(alpha > 0, 1.0 / alpha, 0.0)
            out = out + e @ v[..., j : j + block, :]
            top = new
        return out / np.where(total > 0, total, 1.0)


BLOCKS = (8, 16, 32, 64, 128)


def tiled_mistakes(p: Problem) -> list[tuple[str, object]]:
    """(name, () -> output) for the block mistakes a one-pass kernel can make, per block size."""
    S = p.k.shape[-2]
    found, ends = [], set()
    for b in BLOCKS:
        if b < S:
            found.append(
                (
                    "accumulator not rescaled when the running max grows (o += p @ v without "
                    "o *= exp(m_old - m_new))",
                    lambda b=b: tiled(p, b, rescale="none"),
                )
            )
            found.append(
                (
                    "rescale factor inverted: exp(m_new - m_old) instead of exp(m_old - m_new)",
                    lambda b=b: tiled(p, b, rescale="inverted"),
                )
            )
        end = S - S % b
        if S % b and end not in ends:  # blocks with the same full part drop the same keys
            ends.add(end)
            found.append(
                (
                    "last partial key block dropped (keys past the last full block ignored)",
                    lambda b=b: tiled(p, b, drop_last=True),
                )
            )
    return found

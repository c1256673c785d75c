"""Reference kernels in NumPy: correct kernels in the checked dtype (the rule's yardstick).

A `Problem` holds one case's inputs as float64 arrays (already rounded to the checked dtype).
`kernel_errors` runs several correct kernels that differ only in summation order - plain
softmax(q @ k^T) @ v, the same with the keys reversed, and online-softmax (FlashAttention-style)
loops over key blocks of 1, 16 and 64 with exp or exp2 - and returns each one's max error against
the ground truth. The checker's rule allows a kernel twice the largest of them (see the README).
For float16/bfloat16 every reference sums in float32 and stores scores, weights and output in
16 bits (PyTorch's policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratch.bounds.tolerance import ACCUMULATE
from scratch.variants.causal import causal_tile

LOG2E = 1.0 / math.log(2.0)


def causal(L: int, S: int, shift: int, rows: np.ndarray | None = None) -> np.ndarray:
    """(L, S) bool, or the rows `rows` of it: the causal grid whose diagonal is `shift` (0 is
    PyTorch's; the diagnoses plant -1, 1 and S - L), from scratch.variants.causal."""
    if rows is None:
        return causal_tile(shift, range(L), range(S))  # (L, S)
    picked = [causal_tile(shift, range(i, i + 1), range(S)) for i in rows]  # R of (1, S)
    return np.concatenate(picked) if picked else np.zeros((0, S), dtype=bool)  # (R, S)


@dataclass
class Problem:
    """One case's inputs: float64 arrays with GQA heads not yet repeated, and the options."""

    q: np.ndarray  # (..., L, E): only the checked query rows
    k: np.ndarray  # (..., S, E)
    v: np.ndarray  # (..., S, Ev)
    scale: float  # resolved: 1/sqrt(E) when the case passes none
    allowed: np.ndarray | None  # (L, S) bool, None: every key
    add: np.ndarray | None  # (L, S) float mask added to the scaled scores
    gqa: bool

    def reversed_keys(self) -> Problem:
        """The same problem with the mask's key axis reversed (k and v are reversed by callers)."""
        return Problem(
            self.q,
            self.k,
            self.v,
            self.scale,
            None if self.allowed is None else self.allowed[..., ::-1],
            None if self.add is None else self.add[..., ::-1],
            self.gqa,
        )

    def heads(self, interleave: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """k, v with grouped-query heads repeated to q's heads (h // group, or h % Hkv)."""
        k, v = self.k, self.v
        if self.gqa and k.ndim >= 3 and k.shape[-3] != self.q.shape[-3]:
            group = self.q.shape[-3] // k.shape[-3]
            if interleave:
                reps = [1] * k.ndim
                reps[-3] = group
                return np.tile(k, reps), np.tile(v, reps)
            return np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
        return k, v


def problem_for(case, q: list, k: list, v: list, mask: list | None, rows=None) -> Problem:
    """A case's float64 Problem: the checked query rows (all when `rows` is None), its mask."""
    L, S, E = case.q[-2], case.k[-2], case.q[-1]
    allowed, add = None, None
    if case.is_causal:
        allowed = causal(L, S, 0, rows)
    elif case.mask == "float":
        m = np.asarray(mask, dtype=np.float64)
        add = m if rows is None else m[rows]
        allowed = np.isfinite(add)
        add = np.where(allowed, add, 0.0)
    elif mask is not None:
        m = np.asarray(mask, dtype=bool)
        allowed = m if rows is None else m[rows]
    scale = case.scale if case.scale is not None else 1.0 / math.sqrt(E)
    arrays = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    return Problem(*arrays, scale, allowed, add, case.gqa)


def store(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to `dtype` storage (round to nearest even), kept in x's float type."""
    if dtype == "float16":
        return x.astype(np.float16).astype(x.dtype)
    if dtype == "bfloat16":
        bits = x.astype(np.float32).view(np.uint32)
        bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(
            0xFFFF0000
        )
        return bits.view(np.float32).astype(x.dtype)
    return x.astype(dtype).astype(x.dtype)


def scores(p: Problem, q, k, acc, *, exp2: bool = False) -> np.ndarray:
    """Scaled, masked scores in `acc`: (..., L, E) @ (..., E, S) -> (..., L, S)."""
    factor = p.scale * (LOG2E if exp2 else 1.0)
    s = (q @ np.swapaxes(k, -1, -2)) * acc(factor)
    if p.add is not None:
        s = s + (p.add * (LOG2E if exp2 else 1.0)).astype(acc)
    if p.allowed is not None:
        s = np.where(p.allowed, s, -np.inf)
    return s


def plain(p: Problem, dtype: str, *, reverse: bool = False) -> np.ndarray:
    """softmax(q @ k^T * scale + mask) @ v: sums in ACCUMULATE[dtype], weights stored in dtype."""
    acc = np.dtype(ACCUMULATE[dtype]).type
    k, v = p.heads()
    q, k, v = p.q.astype(acc), k.astype(acc), v.astype(acc)
    sub = p
    if reverse:  # the same attention with keys in the opposite order: other summation orders
        k, v = k[..., ::-1, :], v[..., ::-1, :]
        sub = p.reversed_keys()
    with np.errstate(all="ignore"):
        s = store(scores(sub, q, k, acc), dtype)  # (..., L, S), kept in the dtype
        top = np.max(s, axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0))
        w = store(e / np.sum(e, axis=-1, keepdims=True), dtype)
        return store(w @ v, dtype).astype(np.float64)  # (..., L, S) @ (..., S, Ev)


def online(
    p: Problem,
    dtype: str,
    block: int,
    *,
    exp2: bool = False,
    rescale: str = "right",
    drop_last: bool = False,
    store_acc: str | None = None,
) -> np.ndarray:
    """One pass over key blocks with a running max, running sum and rescaled accumulator.

    The diagnosis plants a block mistake here (in float64; a row with no key then gives 0):
    rescale 'none' / 'inverted' (the accumulator only), 'none-sum' (the denominator only),
    'none-both' / 'inverted-both' (both), 'stale' (exp(s - m) with the max from before the
    block, 0 before the first), 'stale-own' (the first block's own max there), 'chunk' (each
    block's own max, blocks summed without correction); drop_last leaves out the keys past the
    last full block; store_acc rounds the accumulator to that dtype after every block."""
    acc = np.dtype(ACCUMULATE[dtype]).type
    k, v = p.heads()
    q, k, v = p.q.astype(acc), k.astype(acc), v.astype(acc)
    S = k.shape[-2]
    exp = np.exp2 if exp2 else np.exp
    top = np.full(q.shape[:-1] + (1,), -np.inf, dtype=acc)  # (..., L, 1) running max
    total = np.zeros_like(top)  # (..., L, 1) running sum of exp
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=acc)  # (..., L, Ev)
    planted = rescale != "right" or drop_last or store_acc is not None
    with np.errstate(all="ignore"):
        s_all = scores(p, q, k, acc, exp2=exp2)  # (..., L, S); blocks are column slices of it
        for j in range(0, S - S % block if drop_last else S, block):
            s = store(s_all[..., j : j + block], dtype)  # kept in the dtype
            new = np.maximum(top, np.max(s, axis=-1, keepdims=True))
            if rescale == "chunk":
                new = np.max(s, axis=-1, keepdims=True)
            safe = np.where(np.isfinite(new), new, 0)
            alpha = exp(top - safe)  # rescales what was summed under the old max
            a_out = a_sum = alpha
            if planted:
                before = {"stale": 0.0, "stale-own": safe}.get(rescale)  # the first block's base
                if before is not None:
                    safe = np.where(np.isfinite(top), top, before)
                inverse = np.where(alpha > 0, 1.0 / alpha, 0.0)  # exp(new - old): inverted
                out_factor = {"none": 1.0, "none-both": 1.0, "chunk": 1.0, "inverted": inverse,
                              "inverted-both": inverse}  # fmt: skip
                sum_factor = {"none-sum": 1.0, "none-both": 1.0, "chunk": 1.0,
                              "inverted-both": inverse}  # fmt: skip
                a_out, a_sum = out_factor.get(rescale, alpha), sum_factor.get(rescale, alpha)
            e = exp(s - safe)
            total = total * a_sum + np.sum(e, axis=-1, keepdims=True)
            out = out * a_out + store(e, dtype) @ v[..., j : j + block, :]
            if store_acc:  # the accumulator kept in a narrower dtype between blocks
                out = store(out, store_acc)
            top = new
        if planted:
            return out / np.where(total > 0, total, 1.0)
        return store(out / total, dtype).astype(np.float64)


def kernel_errors(p: Problem, dtype: str, truth: np.ndarray, live: np.ndarray) -> list[float]:
    """Max |reference - truth| over live rows, for each correct reference kernel in `dtype`."""
    S = p.k.shape[-2]
    outs = [plain(p, dtype), plain(p, dtype, reverse=True), online(p, dtype, 16, exp2=True)]
    outs.append(online(p, dtype, 64))
    if S <= 512:  # key by key: S numpy steps, too slow for the 4096-key cases
        outs.append(online(p, dtype, 1))
    return [max_error(o, truth, live) for o in outs]


def max_error(got: np.ndarray, truth: np.ndarray, rows: np.ndarray | None = None) -> float:
    """max |got - truth|, over `rows` (a bool index: the live rows, the finite lse entries) when
    given: NaN against NaN is 0, NaN or inf against a number is inf; 0 where nothing counts."""
    with np.errstate(invalid="ignore"):
        both = np.isnan(got) & np.isnan(truth)
        diff = np.where(both, 0.0, np.abs(got - truth))
    if rows is not None:
        diff = diff[rows]
    if diff.size == 0:
        return 0.0
    return math.inf if not np.all(np.isfinite(diff)) else float(np.max(diff))

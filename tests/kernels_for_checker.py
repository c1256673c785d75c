"""Small numpy attention kernels for the checker's tests: one correct, the rest each with one bug.

Every kernel takes (q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False) like
torch.nn.functional.scaled_dot_product_attention and returns the output. `attention` is the
correct one; each other function plants exactly one classic mistake through a `bug=` switch.
"""

from __future__ import annotations

import math

import numpy as np


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *, bug=None):
    """softmax(q @ k^T * scale + mask) @ v in the input's dtype, with an optional planted bug."""
    with np.errstate(all="ignore"):  # the buggy variants overflow and divide 0 by 0 on purpose
        return _attention(q, k, v, attn_mask, is_causal, scale, enable_gqa, bug)


def _attention(q, k, v, attn_mask, is_causal, scale, enable_gqa, bug):
    """attention(), without the error-state guard."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    E, L, S = q.shape[-1], q.shape[-2], k.shape[-2]
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        if bug == "gqa-interleaved":  # head h reads kv head h % Hkv
            k, v = np.tile(k, (group, 1, 1)), np.tile(v, (group, 1, 1))
        else:  # head h reads kv head h // group
            k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    if scale is None or bug == "ignore-scale":
        scale = 1.0 / math.sqrt(E)
    if bug == "missing-scale":
        scale = 1.0
    if bug == "scale-1/d":
        scale = 1.0 / E
    # step 1: scores = q @ k^T        (..., L, E) @ (..., E, S) -> (..., L, S)
    scores = q @ k if bug == "no-transpose" else q @ np.swapaxes(k, -1, -2)
    # step 2: scale, then mask
    allowed = None
    if is_causal:
        if bug == "causal-off-by-one":
            allowed = np.tril(np.ones((L, S), dtype=bool), k=-1)
        elif bug == "causal-bottom-right":
            allowed = np.tril(np.ones((L, S), dtype=bool), k=S - L)
        else:
            allowed = np.tril(np.ones((L, S), dtype=bool))
    elif attn_mask is not None and np.asarray(attn_mask).dtype == bool:
        allowed = np.asarray(attn_mask)
        if bug == "mask-inverted":
            allowed = ~allowed
    if attn_mask is not None and np.asarray(attn_mask).dtype != bool:
        add = np.asarray(attn_mask, dtype=q.dtype)
        masked = (scores + add) * scale if bug == "mask-before-scale" else scores * scale + add
    else:
        masked = scores * q.dtype.type(scale)
    if allowed is not None:
        masked = np.where(allowed, masked, -np.inf)
    # step 3: softmax along keys (subtract the row max so exp never overflows)
    axis = -2 if bug == "wrong-axis" else -1
    top = np.max(masked, axis=axis, keepdims=True)
    if bug != "nan-rows":
        top = np.where(np.isfinite(top), top, 0)  # fully masked rows: exp(-inf) = 0 everywhere
    if bug == "no-max":
        top = np.zeros_like(top)
    e = np.exp(masked - top)
    total = np.sum(e, axis=axis, keepdims=True)
    if bug != "nan-rows":
        total = np.where(total > 0, total, 1)  # fully masked rows: weights 0, output 0
    weights = e / total
    if bug == "dropout":  # unseeded dropout with p = 0.1, left on at inference
        keep = np.random.default_rng().random(weights.shape) >= 0.1
        weights = weights * keep / 0.9
    if bug == "dropout-seeded":  # the same dropout mask on every call, p = 0.2
        keep = np.random.default_rng(0).random(weights.shape) >= 0.2
        weights = weights * keep / weights.dtype.type(0.8)
    if bug == "float16":  # computes in float16 whatever it is given
        weights = weights.astype(np.float16)
        v = v.astype(np.float16)
    # step 4: output = weights @ v    (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    if bug == "returns-weights":
        return weights
    output = (weights @ v).astype(q.dtype)
    if bug == "sloppy":  # 2^-20 relative error: inside the float32 bound, far above 2x plain
        output = output * output.dtype.type(1 + 2.0**-20)
    return (output, weights) if bug == "dropout-seeded" else output


def _with_bug(bug: str):
    """The attention kernel with one planted bug."""

    def kernel(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        return attention(q, k, v, attn_mask, is_causal, scale, enable_gqa, bug=bug)

    kernel.__name__ = kernel.__qualname__ = "attention_" + bug.replace("-", "_").replace("/", "")
    return kernel


BUGS = (
    "missing-scale",
    "scale-1/d",
    "wrong-axis",
    "no-transpose",
    "mask-inverted",
    "causal-off-by-one",
    "causal-bottom-right",
    "mask-before-scale",
    "dropout",
    "dropout-seeded",
    "no-max",
    "ignore-scale",
    "gqa-interleaved",
    "nan-rows",
    "float16",
    "returns-weights",
    "sloppy",
)
BUGGY = {bug: _with_bug(bug) for bug in BUGS}
missing_scale = BUGGY["missing-scale"]  # for the command-line test


def attention_no_masks(q, k, v, scale=None):
    """A correct kernel that supports neither masks nor GQA (no such keywords)."""
    return attention(q, k, v, scale=scale)


def attention_refuses_masks(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """A correct kernel that raises for the features it does not implement."""
    if attn_mask is not None or is_causal:
        raise NotImplementedError("masks are not implemented")
    return attention(q, k, v, scale=scale)


NOT_A_FUNCTION = 42


def attention_square_causal_only(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Builds its causal mask as (L, L): right when L == S, a broadcasting crash otherwise."""
    if is_causal:
        L = np.shape(q)[-2]
        attn_mask, is_causal = np.tril(np.ones((L, L), dtype=bool)), False
    return attention(q, k, v, attn_mask, is_causal, scale)


def attention_refuses_non_square_causal(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Says plainly that causal masks need L == S (a refusal, not a crash)."""
    if is_causal and np.shape(q)[-2] != np.shape(k)[-2]:
        raise NotImplementedError("is_causal needs L == S")
    return attention(q, k, v, attn_mask, is_causal, scale)


def attention_forgets_return_with_masks(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Returns None whenever a mask is involved (a forgotten `return`)."""
    out = attention(q, k, v, attn_mask, is_causal, scale)
    return None if attn_mask is not None or is_causal else out


def attention_ragged_list(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Returns nested lists whose last row is one entry short."""
    out = attention(q, k, v, attn_mask, is_causal, scale, enable_gqa).tolist()
    last = out
    while isinstance(last[-1][-1], list):
        last = last[-1]
    last[-1] = last[-1][:-1]
    return out


scale_1_d = BUGGY["scale-1/d"]  # for the docs picture of the Check a kernel tab

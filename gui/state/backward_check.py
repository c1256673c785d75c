"""The backward view's numbers: dO from the session, and the backend's gradients checked (no Qt).

The ground truth's backward trace (`trace_example(example, options, grad_output=dO)`) is what the
Backward view shows. The Check tab compares the chosen backend's own backward function
(`scaled_dot_product_attention_backward`, run on the heads' q, k, v and dO) with the ground
truth's backward on the same inputs rounded to the backend's dtype, within
`scratch.bounds.grad_tolerance`'s bound for that dtype.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np

import scratch
from gui.state.session import Session
from scratch import backends, step_check

# above this many query x key pairs the pure-Python backward is not computed in the window:
# the backward trace (forward included) measured 0.03 s at 64 tokens, 0.45 s at 256 and 1.7 s
# at 512 (2 shared cores, d_model 8, 2 heads of d_k = d_v = 4); it grows with L x S, so 4096
# tokens (64 times 512's pairs) would take about 2 minutes
MAX_PAIRS = 512 * 512
# the Check tab's gradient check adds the backend's backward, the ground truth's on the rounded
# inputs and scratch.bounds.grad_tolerance's bound, all but the backend's in pure Python: measured
# 0.15 s at 64 tokens, 1.7 s at 256 and 8.8 s at 512 (mostly the bound), so it stops at 256
CHECK_PAIRS = 256 * 256
GRADIENTS = ("grad_query", "grad_key", "grad_value")  # what a backend's backward returns
BACKWARD_OPTIONS = ("attn_mask", "is_causal", "scale", "enable_gqa", "masked_rows")


def _over_limit(s: Session, limit: int, what: str, cost: str) -> str:
    """'' when `s` has at most `limit` query-key pairs, else that `what` stops there and why."""
    pairs = s.num_tokens * s.num_keys
    if pairs <= limit:
        return ""
    side = math.isqrt(limit)
    return (
        f"{what} up to {limit:,} query-key pairs ({side} x {side} tokens); this example has "
        f"{s.num_tokens} x {s.num_keys} = {pairs:,}. {cost}"
    )


def too_large(s: Session) -> str:
    """Why the backward is not computed for `s` ('' when it is)."""
    cost = (
        "The exact pure-Python gradients took 1.7 s at 512 tokens here and grow with L x S "
        "(about 2 minutes at 4096), so lower the number of tokens to see them."
    )
    return _over_limit(s, MAX_PAIRS, "The backward pass is computed", cost)


def check_skipped(s: Session) -> str:
    """Why the Check tab's gradient check is not run for `s` ('' when it is)."""
    cost = (
        "The pure-Python ground truth and error bound of the check took 8.8 s at 512 tokens "
        "here. The Backward view still shows the exact gradients."
    )
    return _over_limit(s, CHECK_PAIRS, "Gradients are checked only", cost)


def target_cell(s: Session) -> tuple[int, int]:
    """The cell (i, c) of the one-hot target that seed `grad_seed` picks."""
    rng = random.Random(s.grad_seed)
    return rng.randrange(s.num_tokens), rng.randrange(s.d_out)


def grad_output_for(s: Session) -> list[list[float]]:
    """dO (L, d_out) for the session's choice (scratch.backward.grad_output.make_grad_output)."""
    rows, cols = s.num_tokens, s.d_out
    if s.grad_output == "training":  # the example's own (with_fitting_grad keeps its shape)
        return [list(row) for row in s.grad_given.values]
    if s.grad_output == "target":
        target = scratch.one_hot(rows, cols, *target_cell(s))
        return scratch.make_grad_output("target", rows, cols, target=target)
    return scratch.make_grad_output(s.grad_output, rows, cols, seed=s.grad_seed)


def describe_grad_output(s: Session) -> str:
    """What dO is, in words."""
    if s.grad_output == "ones":
        return "dO = 1 everywhere: the gradient of loss = sum(output)"
    if s.grad_output == "random":
        return f"dO random in [-1, 1] (seed {s.grad_seed})"
    if s.grad_output == "training":
        return f"dO: {s.grad_given.source}"
    i, c = target_cell(s)
    return (
        f"dO = target, the gradient of loss = sum(output * target); the target is one-hot at "
        f"output[{i}][{c}] (seed {s.grad_seed}), so every gradient says how output[{i}][{c}] "
        f"depends on it"
    )


# ---------------------------------------------------------------- the backend's gradients


def _heads(m: object, heads: int) -> np.ndarray:
    """(n, heads * d) -> (heads, n, d): head h is the column block h*d:(h+1)*d."""
    return np.ascontiguousarray(backends.split_heads(np.asarray(m, np.float64), heads))


def _rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """`a` rounded to `dtype` and back to float64: the inputs a backend computes on."""
    if dtype == "float64":
        return a
    if dtype == "bfloat16":  # NumPy has no bfloat16
        import torch

        return torch.from_numpy(a).to(torch.bfloat16).double().numpy()
    return a.astype(dtype).astype(np.float64)


def head_inputs(trace: object, dtype: str) -> tuple[list, list, list, list]:
    """The heads' q (H, L, d_k), k (Hkv, S, d_k), v (Hkv, S, d_v) and dO (H, L, d_v) of a
    backward trace, rounded to `dtype` (what a backend computing in it works on)."""
    H, Hkv = trace.num_heads, trace.num_kv_heads
    q, k, v = (_heads(trace[n].value, h) for n, h in (("q", H), ("k", Hkv), ("v", Hkv)))
    if "grad_head_outputs" in trace:
        dO = np.asarray(trace["grad_head_outputs"].value, np.float64)
    else:
        dO = np.asarray(trace["grad_output"].value, np.float64)[None]
    return tuple(_rounded(a, dtype).tolist() for a in (q, k, v, dO))


def check_options(trace: object, options: scratch.Options) -> scratch.Options:
    """The session's `options` for the backward of its trace's heads: the trace's scale, GQA
    when the heads share key/value heads."""
    gqa = trace.num_heads != trace.num_kv_heads
    return dataclasses.replace(options, scale=trace.scale, enable_gqa=gqa)


def _keywords(options: scratch.Options) -> dict:
    """`options` as the keywords of the backward functions (PyTorch's names; no dropout)."""
    return {name: getattr(options, name) for name in BACKWARD_OPTIONS}


def backward_with_backend(
    name: str, dtype: str, q, k, v, grad_output, options: scratch.Options
) -> tuple:
    """Backend `name`'s scaled_dot_product_attention_backward in `dtype`: (dq, dk, dv)."""
    fn = backends.get(name).scaled_dot_product_attention_backward
    keywords = _keywords(options)
    if name == "scratch":  # the ground truth has one dtype and no dtype argument
        return fn(q, k, v, grad_output, **keywords)
    return fn(q, k, v, grad_output, **keywords, dtype=dtype)


def check_heads(q, k, v, dO, options, backend: str, dtype: str) -> list[scratch.StepCheck]:
    """StepChecks of `backend`'s dQ, dK, dV on the heads' inputs against the ground truth's."""
    # step 1: the backend's own backward function, in the session's dtype
    found = backward_with_backend(backend, dtype, q, k, v, dO, options)
    # step 2: the ground truth's backward on the same inputs, and scratch.gradient_tolerance's
    # per-element bound for `dtype`
    keywords = _keywords(options)
    truth = scratch.scaled_dot_product_attention_backward(q, k, v, dO, **keywords)
    bound = scratch.gradient_tolerance(q, k, v, dO, **keywords, dtype=dtype)
    return [
        step_check(name, f, t, bound[name], dtype)  # it reads lists, arrays and tensors
        for name, f, t in zip(GRADIENTS, found, truth)
    ]


def gradient_checks(
    trace: object, options: scratch.Options, backend: str, dtype: str
) -> tuple[list, str]:
    """([StepCheck] for dQ, dK, dV, the sentence saying what was compared) for `backend`.

    `trace` is the ground truth's backward trace of the session (its q, k, v and the heads' dO
    are the backend's inputs); `options` the session's Options (mask, masked rows)."""
    H, Hkv = trace.num_heads, trace.num_kv_heads
    checks = check_heads(*head_inputs(trace, dtype), check_options(trace, options), backend, dtype)
    rounding = "" if dtype == "float64" else f", rounded to {dtype}"
    heads = f"{H} head{'s' if H > 1 else ''}" + (f", {Hkv} kv" if Hkv != H else "")
    compared = (
        f"{backend}'s scaled_dot_product_attention_backward ({dtype}) vs the ground truth's on "
        f"the same q, k, v and dO ({heads}{rounding}), "
        f"within scratch.bounds.grad_tolerance's bound; "
        f"dP, D and dS are not compared (a backward function returns only dQ, dK, dV)"
    )
    return checks, compared

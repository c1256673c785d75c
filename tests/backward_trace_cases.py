"""The calls, traces and independent references the backward trace's tests share."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import scratch

rng0 = np.random.default_rng(21)


def m(rows: int, cols: int) -> list:
    """A seeded (rows, cols) matrix of O(1) numbers."""
    return rng0.normal(size=(rows, cols)).round(3).tolist()


X = m(4, 4)
MEM = m(3, 4)
ALLOW = (rng0.random((4, 4)) < 0.6) | np.eye(4, dtype=bool)
SETUPS = {
    "plain": {},
    "projections+biases": {
        "w_q": m(4, 4),
        "w_k": m(4, 4),
        "w_v": m(4, 4),
        "b_q": [0.5, -0.5, 0.25, 0.0],
        "b_k": [0.25] * 4,
        "b_v": [-1.0, 0.5, 0.0, 1.0],
    },
    "causal, heads, w_o, b_o": {
        "w_q": m(4, 4),
        "w_k": m(4, 4),
        "w_v": m(4, 4),
        "w_o": m(4, 3),
        "b_o": [1.0] * 3,
        "num_heads": 2,
        "is_causal": True,
    },
    "gqa, bool mask": {
        "w_q": m(4, 4),
        "w_k": m(4, 2),
        "w_v": m(4, 2),
        "num_heads": 2,
        "num_kv_heads": 1,
        "attn_mask": ALLOW.tolist(),
    },
    "float mask, four heads, gqa": {
        "w_q": m(4, 8),
        "w_k": m(4, 4),
        "w_v": m(4, 4),
        "num_heads": 4,
        "num_kv_heads": 2,
        "attn_mask": np.where(ALLOW, 0.5, -np.inf).tolist(),
    },
    "cross, one input": {"key": MEM, "w_q": m(4, 4), "w_k": m(4, 4), "w_v": m(4, 4)},
    "cross, two inputs, projections": {
        "key": MEM,
        "value": m(3, 2),
        "w_q": m(4, 4),
        "w_k": m(4, 4),
        "w_v": m(2, 4),
        "b_k": [0.5] * 4,
        "num_heads": 2,
    },
    "cross, two inputs, w_o": {"key": MEM, "value": m(3, 4), "w_o": m(4, 4)},
    "w_o, one head": {"w_o": m(4, 4), "b_o": [0.5, 0.0, -0.5, 1.0]},
    "w_q only, two heads": {"w_q": m(4, 4), "b_q": [0.5] * 4, "num_heads": 2},
    "a fully masked row, heads": {
        "w_q": m(4, 4),
        "w_k": m(4, 4),
        "w_v": m(4, 4),
        "w_o": m(4, 4),
        "num_heads": 2,
        "attn_mask": [[True, False, True, True], [False] * 4, [True] * 4, [False, True] * 2],
    },
}  # fmt: skip
AUTOGRAD_NAN = {"a fully masked row, heads"}  # autograd's softmax of all -inf: NaN everywhere
FORWARD_ONLY = {name: scratch.trace_attention(X, **kw) for name, kw in SETUPS.items()}


def dO_for(name: str, seed: int = 0) -> list:
    """A seeded dO shaped like the output of setup `name`."""
    shape = FORWARD_ONLY[name]["output"].shape
    return np.random.default_rng(seed).normal(size=shape).round(2).tolist()


def traced(name: str, seed: int = 0, x: list = X, **more) -> scratch.Trace:
    """Setup `name` traced forward and backward for a seeded dO."""
    return scratch.trace_attention(x, **SETUPS[name], **more, grad_output=dO_for(name, seed))


def heads_of(matrix: list, heads: int) -> np.ndarray:
    """(n, heads * d) -> (heads, n, d)."""
    a = np.asarray(matrix, dtype=float)
    return a.reshape(a.shape[0], heads, -1).transpose(1, 0, 2)


def side_by_side(a: list) -> np.ndarray:
    """(heads, n, d) -> (n, heads * d)."""
    a = np.asarray(a, dtype=float)
    return a.transpose(1, 0, 2).reshape(a.shape[1], -1)


def same(name: str, ours: object, theirs: object) -> None:
    """Equal to float64 rounding, NaN exactly where the other has NaN."""
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    assert a.shape == b.shape, f"{name}: shape {a.shape} vs {b.shape}"
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14, equal_nan=True, err_msg=name)


def mask_args(kwargs: dict) -> dict:
    """The mask keywords of a setup."""
    return {k: kwargs[k] for k in ("attn_mask", "is_causal") if k in kwargs}


def autograd(kwargs: dict, dO: list, keep: list | None = None, x: list = X) -> dict:
    """Every gradient of sum(output * dO) by torch.autograd in float64, named as the trace's;
    `keep` (H, L, S): dropout's factors (0 or 1/(1-p)) on the weights after softmax."""
    torch = pytest.importorskip("torch")

    def leaf(value):
        return torch.tensor(value, dtype=torch.float64, requires_grad=True)

    x = leaf(x)
    key = leaf(kwargs["key"]) if "key" in kwargs else None
    value = leaf(kwargs["value"]) if "value" in kwargs else None
    params = {n: leaf(kwargs[n]) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v",
                                           "b_o") if n in kwargs}  # fmt: skip
    H = kwargs.get("num_heads", 1)
    Hkv = kwargs.get("num_kv_heads") or H
    src = {"q": x, "k": x if key is None else key, "v": x if key is None else key}
    if value is not None:
        src["v"] = value
    proj = {}
    for n in "qkv":
        out = src[n] @ params[f"w_{n}"] if f"w_{n}" in params else src[n] * 1.0
        if f"b_{n}" in params:
            out = out + params[f"b_{n}"]
        out.retain_grad()
        proj[n] = out
    L, S = proj["q"].shape[0], proj["k"].shape[0]
    q = proj["q"].reshape(L, H, -1).transpose(0, 1)  # (H, L, d)
    k = proj["k"].reshape(S, Hkv, -1).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    v = proj["v"].reshape(S, Hkv, -1).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    scale = 1 / math.sqrt(q.shape[-1])
    masked = q @ k.transpose(1, 2) * scale  # (H, L, S)
    if kwargs.get("is_causal"):
        masked = masked.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    elif "attn_mask" in kwargs:
        mask = torch.tensor(kwargs["attn_mask"])
        masked = masked.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else masked + mask
    masked.retain_grad()
    weights = torch.softmax(masked, dim=-1)
    if keep is not None:
        weights = weights * torch.tensor(keep, dtype=torch.float64)  # the trace's weights
    weights.retain_grad()
    head_outputs = weights @ v  # (H, L, d_v)
    head_outputs.retain_grad()
    concat = head_outputs.transpose(0, 1).reshape(L, -1)
    output = concat @ params["w_o"] if "w_o" in params else concat
    if "b_o" in params:
        output = output + params["b_o"]
    (output * torch.tensor(dO, dtype=torch.float64)).sum().backward()
    dO_h = head_outputs.grad
    got = {
        "grad_head_outputs": dO_h,
        "grad_weights": weights.grad,
        "row_dot": (dO_h * head_outputs).sum(-1),
        "grad_scores": masked.grad,
        "grad_query": proj["q"].grad,
        "grad_key": proj["k"].grad,
        "grad_value": proj["v"].grad,
        "grad_x": x.grad,
        "grad_key_input": None if key is None else key.grad,
        "grad_value_input": None if value is None else value.grad,
    }
    got.update({f"grad_{n}": p.grad for n, p in params.items()})
    return {n: g.detach().numpy() for n, g in got.items() if g is not None}


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def reevaluate(text: str) -> tuple[float, float, float] | None:
    """(printed result, the printed arithmetic evaluated, the size of its terms), or None when the
    text shows no complete arithmetic (a cut sum, a given value, inf or nan)."""
    parts = text.split(" = ")
    if len(parts) < 3 or "more terms" in text or re.search(r"inf|nan", parts[-2] + parts[-1]):
        return None
    expr, result = parts[-2], float(parts[-1].split()[0])
    if re.search(r"[A-Za-z_\[]", expr):
        return None
    size = eval(NUMBER.sub(lambda mt: repr(abs(float(mt.group()))), expr).replace(" - ", " + "))
    return result, eval(expr), size

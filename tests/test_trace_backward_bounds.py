"""The backward steps' bounds (scratch/backward_bounds.py) against a real float32 backward:
NumPy's forward trace in float32 and the backward written out below, with planted mistakes."""

from __future__ import annotations

import numpy as np
import pytest

import scratch
from tests.backward_trace_cases import SETUPS, X, dO_for, traced


def float32_trace(name: str, seed: int, mistake: str = "", x: list = X) -> scratch.Trace:
    """Setup `name` computed in float32 by NumPy, forward (the numpy backend) and backward
    (written out below, with an optional planted `mistake`), laid out like the ground truth's."""
    import dataclasses

    kwargs, dO = SETUPS[name], dO_for(name, seed)
    fwd = scratch.backends.get("numpy").trace_attention(x, **kwargs, dtype="float32")
    grads = numpy_backward(fwd, kwargs, np.asarray(dO, dtype=np.float32), mistake)
    reference = traced(name, seed, x)
    steps = [dataclasses.replace(s, value=fwd[s.name].value) for s in reference if s.name in fwd]
    steps += [dataclasses.replace(reference[n], value=v) for n, v in grads.items()]
    return dataclasses.replace(
        reference, steps=tuple(steps), options=fwd.options, source=fwd.source
    )


def numpy_backward(t: scratch.Trace, kwargs: dict, dO: np.ndarray, mistake: str) -> dict:
    """Every backward step of float32 trace `t`, in float32 (step numbers as in the registry)."""
    f32 = np.float32

    def a(name):
        return np.asarray(t[name].value, dtype=f32)

    H, Hkv = t.num_heads, t.num_kv_heads
    g, scale, L = H // Hkv, f32(t.scale), dO.shape[0]
    multi = "head_outputs" in t
    out = {"grad_output": dO}
    d_concat = dO
    if "w_o" in t:  # step 10
        out["grad_w_o"] = a("concat").T @ dO
        if "b_o" in kwargs:
            out["grad_b_o"] = dO.sum(0)
        d_concat = dO @ a("w_o").T
    dOh = d_concat.reshape(L, H, -1).transpose(1, 0, 2)  # (H, L, d_v)
    if multi:
        out["grad_head_outputs"] = dOh
    P = a("weights") if multi else a("weights")[None]  # (H, L, S)
    O = a("head_outputs") if multi else a("output")[None]
    S = P.shape[-1]
    q = a("q").reshape(L, H, -1).transpose(1, 0, 2)
    k = a("k").reshape(S, Hkv, -1).transpose(1, 0, 2).repeat(g, 0)  # (H, S, d)
    v = a("v").reshape(S, Hkv, -1).transpose(1, 0, 2).repeat(g, 0)
    dV = (P.transpose(0, 2, 1) @ dOh).reshape(Hkv, g, S, -1).sum(1)  # step 11: (Hkv, S, d_v)
    dP = dOh @ v.transpose(0, 2, 1)
    D = (dOh * O).sum(-1)  # step 12
    dS = P * dP if mistake == "D left out" else P * (dP - D[..., None])  # step 13
    dq = scale * dS @ k  # step 14
    if mistake == "scale twice":
        dq = dq * scale
    dk = (scale * dS.transpose(0, 2, 1) @ q).reshape(Hkv, g, S, -1).sum(1)
    if mistake == "GQA not summed":
        dk = (scale * dS.transpose(0, 2, 1) @ q)[::g]
    one = (lambda x: x) if multi else (lambda x: x[0])
    out.update(grad_value=dV.transpose(1, 0, 2).reshape(S, -1), grad_weights=one(dP),
               row_dot=one(D), grad_scores=one(dS), grad_query=dq.transpose(1, 0, 2).reshape(L, -1),
               grad_key=dk.transpose(1, 0, 2).reshape(S, -1))  # fmt: skip
    source = {"q": "x", "k": "key_input" if "key_input" in t else "x"}
    source["v"] = "value_input" if "value_input" in t else source["k"]
    grad = {"q": out["grad_query"], "k": out["grad_key"], "v": out["grad_value"]}
    for n in "qkv":  # step 15
        if f"w_{n}" in t:
            out[f"grad_w_{n}"] = a(source[n]).T @ grad[n]
    for n in "qkv":
        if f"b_{n}" in kwargs:
            out[f"grad_b_{n}"] = grad[n].sum(0)
    if any(f"w_{n}" in t for n in "qkv"):  # step 16
        for step in ("x", "key_input", "value_input"):
            paths = [grad[n] @ a(f"w_{n}").T if f"w_{n}" in t else grad[n]
                     for n in "qkv" if source[n] == step]  # fmt: skip
            if paths and step in t:
                out[f"grad_{step}"] = sum(paths[1:], paths[0])
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", SETUPS)
def test_a_float32_backward_passes_every_bound(name, seed):
    t = float32_trace(name, seed)
    checks = scratch.compare_traces(t, traced(name, seed))
    assert [c.name for c in checks] == traced(name, seed).names()
    assert [c.message for c in checks if not c.ok] == []


@pytest.mark.parametrize("seed", [21, 73])
def test_subnormal_gradients_stay_within_their_bound(seed):
    """Inputs 3x larger: some weights are ~e^-90, so entries of dK and dQ are subnormal in
    float32; each product's underflow is in the bound (without it these runs raised alarms)."""
    x = (np.random.default_rng(1000 + seed).normal(size=(4, 4)) * 3.0).round(3).tolist()
    for name in ("causal, heads, w_o, b_o", "a fully masked row, heads"):
        checks = scratch.compare_traces(float32_trace(name, seed, x=x), traced(name, seed, x))
        assert [c.message for c in checks if not c.ok] == [], name


@pytest.mark.parametrize(
    "name, mistake, step",
    [
        ("plain", "D left out", "grad_scores"),
        ("causal, heads, w_o, b_o", "D left out", "grad_scores"),
        ("plain", "scale twice", "grad_query"),
        ("gqa, bool mask", "scale twice", "grad_query"),
        ("gqa, bool mask", "GQA not summed", "grad_key"),
        ("float mask, four heads, gqa", "GQA not summed", "grad_key"),
    ],
)
def test_a_planted_gradient_mistake_fails_its_own_step_first(name, mistake, step):
    failed = [c.name for c in scratch.compare_traces(float32_trace(name, 1, mistake),
                                                     traced(name, 1)) if not c.ok]  # fmt: skip
    assert failed[:1] == [step]

"""The backward steps of a trace: which steps, their shapes, their numbers (against the ground
truth's backward functions and against torch.autograd), explain's arithmetic and the bounds."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

import scratch
from scratch.step_explain import number
from scratch.steps import STEPS, call_of

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


BASE = ["grad_output", "grad_value", "grad_weights", "row_dot", "grad_scores", "grad_query",
        "grad_key"]  # fmt: skip
EXPECTED = {
    "plain": BASE,
    "projections+biases": BASE + ["grad_w_q", "grad_w_k", "grad_w_v", "grad_b_q", "grad_b_k",
                                  "grad_b_v", "grad_x"],
    "causal, heads, w_o, b_o": ["grad_output", "grad_w_o", "grad_b_o", "grad_head_outputs",
                                *BASE[1:], "grad_w_q", "grad_w_k", "grad_w_v", "grad_x"],
    "gqa, bool mask": ["grad_output", "grad_head_outputs", *BASE[1:], "grad_w_q", "grad_w_k",
                       "grad_w_v", "grad_x"],
    "cross, one input": BASE + ["grad_w_q", "grad_w_k", "grad_w_v", "grad_x", "grad_key_input"],
    "cross, two inputs, projections": ["grad_output", "grad_head_outputs", *BASE[1:], "grad_w_q",
                                       "grad_w_k", "grad_w_v", "grad_b_k", "grad_x",
                                       "grad_key_input", "grad_value_input"],
    "cross, two inputs, w_o": ["grad_output", "grad_w_o", "grad_head_outputs", *BASE[1:]],
    "w_o, one head": ["grad_output", "grad_w_o", "grad_b_o", "grad_head_outputs", *BASE[1:]],
    "w_q only, two heads": ["grad_output", "grad_head_outputs", *BASE[1:], "grad_w_q",
                            "grad_b_q", "grad_x"],
}  # fmt: skip


@pytest.mark.parametrize("name", EXPECTED)
def test_backward_steps_follow_the_forward_exactly_when_they_should(name):
    forward, trace = FORWARD_ONLY[name], traced(name)
    assert trace.names()[: len(forward)] == forward.names()
    assert trace.names()[len(forward) :] == EXPECTED[name]
    for step in forward:  # the forward part is untouched
        assert trace[step.name] == step, step.name
    call = call_of(trace)
    assert call.backward and not call_of(forward).backward
    backward = [s.name for s in STEPS if s.backward]
    assert [n for n in trace.names() if n in backward] == EXPECTED[name]
    assert not any(n in backward for n in forward.names())


def test_the_registry_marks_every_gradient_and_nothing_else_as_backward():
    numbers = {s.name: s.number for s in STEPS if s.backward}
    assert numbers == {
        "grad_output": 9, "grad_w_o": 10, "grad_b_o": 10, "grad_head_outputs": 10,
        "grad_value": 11, "grad_weights": 11, "row_dot": 12, "grad_scores": 13,
        "grad_query": 14, "grad_key": 14, "grad_w_q": 15, "grad_w_k": 15, "grad_w_v": 15,
        "grad_b_q": 15, "grad_b_k": 15, "grad_b_v": 15, "grad_x": 16, "grad_key_input": 16,
        "grad_value_input": 16,
    }  # fmt: skip
    assert all(s.number <= 8 for s in STEPS if not s.backward)
    per_head = {s.name for s in STEPS if s.backward and s.per_head}
    assert per_head == {"grad_weights", "row_dot", "grad_scores"}


@pytest.mark.parametrize("name", SETUPS)
def test_every_gradient_has_the_shape_and_axes_of_what_it_is_the_gradient_of(name):
    t = traced(name)
    of = {"grad_output": "output", "grad_value": "v", "grad_query": "q", "grad_key": "k",
          "grad_weights": "weights", "grad_scores": "weights", "grad_head_outputs": "head_outputs",
          "grad_x": "x", "grad_key_input": "key_input", "grad_value_input": "value_input",
          **{f"grad_w_{n}": f"w_{n}" for n in "qkvo"}}  # fmt: skip
    for grad, forward in of.items():
        if grad in t:
            assert t[grad].shape == t[forward].shape, grad
            assert t[grad].axes == t[forward].axes, grad
    kwargs = SETUPS[name]
    for n in "qkvo":
        if f"b_{n}" in kwargs:
            assert t[f"grad_b_{n}"].shape == (len(kwargs[f"b_{n}"]),)
    assert t["row_dot"].shape == t["weights"].shape[:-1]
    assert t["row_dot"].axes == t["weights"].axes[:-1]


# -- the numbers: the ground truth's own backward functions -----------------------------------


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


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("name", SETUPS)
def test_steps_11_to_14_equal_scaled_dot_product_attention_backward(name, policy):
    """dV, dQ, dK of the trace: sdpa_backward's for the trace's own q, k, v and heads' dO."""
    t = traced(name, masked_rows=policy)
    H, Hkv = t.num_heads, t.num_kv_heads
    dO = t["grad_head_outputs"].value if "grad_head_outputs" in t else [t["grad_output"].value]
    dq, dk, dv = scratch.scaled_dot_product_attention_backward(
        heads_of(t["q"].value, H).tolist(), heads_of(t["k"].value, Hkv).tolist(),
        heads_of(t["v"].value, Hkv).tolist(), dO, scale=t.scale, enable_gqa=Hkv < H,
        masked_rows=policy, **mask_args(SETUPS[name]),
    )  # fmt: skip
    same("grad_query", t["grad_query"].value, side_by_side(dq))
    same("grad_key", t["grad_key"].value, side_by_side(dk))
    same("grad_value", t["grad_value"].value, side_by_side(dv))


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize(
    "name", [n for n, kw in SETUPS.items() if {"w_q", "w_k", "w_v"} <= set(kw)]
)
def test_weight_and_input_gradients_equal_multi_head_attention_backward(name, policy):
    kwargs = dict(SETUPS[name])
    t = traced(name, masked_rows=policy)
    g = scratch.multi_head_attention_backward(
        X, kwargs.pop("key", None), kwargs.pop("value", None), kwargs.pop("w_q"),
        kwargs.pop("w_k"), kwargs.pop("w_v"), kwargs.pop("w_o", None),
        grad_output=t["grad_output"].value, masked_rows=policy, **kwargs,
    )  # fmt: skip
    same("grad_x", t["grad_x"].value, g.grad_query)
    for step, theirs in (("grad_key_input", g.grad_key), ("grad_value_input", g.grad_value)):
        assert (step in t) == (theirs is not None), step
        if theirs is not None:
            same(step, t[step].value, theirs)
    for n in "qkvo":
        for kind in "wb":
            theirs = getattr(g, f"grad_{kind}_{n}")
            assert (f"grad_{kind}_{n}" in t) == (theirs is not None), f"grad_{kind}_{n}"
            if theirs is not None:
                same(f"grad_{kind}_{n}", t[f"grad_{kind}_{n}"].value, theirs)


def test_a_fully_masked_row_follows_masked_rows():
    allow = [[True, True, False, True], [False] * 4, [True, False, True, True], [True] * 4]
    kwargs = {"w_q": SETUPS["projections+biases"]["w_q"], "attn_mask": allow}
    dO = np.random.default_rng(5).normal(size=(4, 4)).round(2).tolist()
    zero, nan, uniform = (
        scratch.trace_attention(X, **kwargs, masked_rows=p, grad_output=dO)
        for p in ("zero", "nan", "uniform")
    )
    for step in ("grad_query", "grad_key", "grad_value", "grad_x", "grad_w_q", "grad_scores"):
        assert not np.isnan(np.asarray(zero[step].value)).any(), step
    assert np.asarray(zero["grad_query"].value)[1].tolist() == [0.0] * 4
    assert np.asarray(zero["grad_scores"].value)[1].tolist() == [0.0] * 4
    assert np.asarray(uniform["grad_scores"].value)[1].tolist() == [0.0] * 4
    assert np.isnan(np.asarray(nan["grad_query"].value)[1]).all()
    assert np.isnan(np.asarray(nan["grad_key"].value)).all()
    assert not np.isnan(np.asarray(nan["grad_query"].value)[[0, 2, 3]]).any()
    # uniform: weights 1/S give value rows dO_1 / S each, on top of the other rows' shares
    share = np.asarray(uniform["grad_value"].value) - np.asarray(zero["grad_value"].value)
    np.testing.assert_allclose(share, np.tile(np.asarray(dO[1]) / 4, (4, 1)), rtol=1e-12)


# -- the numbers: torch.autograd, an independent implementation -------------------------------


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


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", [n for n in SETUPS if n not in AUTOGRAD_NAN])
def test_every_gradient_equals_torch_autograd_in_float64(name, seed):
    t = traced(name, seed)
    want = autograd(SETUPS[name], dO_for(name, seed))
    checked = 0
    for step in t.steps[t.names().index("grad_output") + 1 :]:
        theirs = want[step.name]
        if step.name in ("grad_weights", "grad_scores", "row_dot") and step.axes[0] != "head":
            theirs = theirs[0]  # one head: (L, S) and (L,), no head axis
        a = np.asarray(step.value, dtype=float)
        assert a.shape == theirs.shape, f"{name}: {step.name} shape {a.shape} vs {theirs.shape}"
        size = np.abs(theirs).max() + 1.0  # sums of O(1) terms that may cancel to ~0
        gap = np.abs(a - theirs).max()
        assert gap <= 1e-12 * size, f"{name}: {step.name} max diff {gap:.3g}"
        checked += 1
    assert checked == len([s for s in STEPS if s.backward and s.name in t]) - 1  # all but dO


# -- explain: every cell, its arithmetic re-evaluated from its own printed terms -------------


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


@pytest.mark.parametrize("name", SETUPS)
def test_explain_arithmetic_of_every_backward_cell_reevaluates_to_its_value(name):
    t = traced(name, 1)
    checked = 0
    for step in t.steps[t.names().index("grad_output") :]:
        values = np.asarray(step.value, dtype=float)
        for index in np.ndindex(*step.shape):
            e = scratch.explain(t, step.name, index)
            label = step.name + "".join(f"[{n}]" for n in index)
            assert e.text.startswith(label + " = "), e.text
            got = reevaluate(e.text)
            if got is None:
                continue
            result, evaluated, size = got
            # every printed number carries 4 significant digits: relative error <= 5e-4 each
            assert abs(evaluated - result) <= 2e-3 * size + 1e-12, e.text
            assert abs(result - values[index]) <= 5e-4 * abs(values[index]) + 1e-12, e.text
            checked += 1
    assert checked >= 40


def test_explain_grad_scores_names_its_terms_and_sources():
    t = traced("causal, heads, w_o, b_o", 2)
    P, dP = t["weights"].value[1][2][1], t["grad_weights"].value[1][2][1]
    D, dS = t["row_dot"].value[1][2], t["grad_scores"].value[1][2][1]
    n = number
    e = scratch.explain(t, "grad_scores", (1, 2, 1))
    assert e.text == (
        "grad_scores[1][2][1] = weights[1][2][1] * (grad_weights[1][2][1] - row_dot[1][2]) = "
        f"{n(P)} * ({n(dP)} - {n(D)}) = {n(dS)}"
    )
    assert e.sources == (("weights", 0, 2), ("grad_weights", 0, 2), ("row_dot", 0, 2))


def test_explain_grad_key_sums_every_head_of_its_group():
    t = traced("gqa, bool mask", 0)
    e = scratch.explain(t, "grad_key", (3, 1))
    assert "sum over heads h in [0, 1]" in e.text
    assert e.sources == (("grad_scores", 1, 3), ("q", 1, 1), ("q", 1, 3))


def test_explain_a_fully_masked_row_names_the_policy():
    allow = [[True] * 4, [False] * 4, [True] * 4, [True] * 4]
    dO = [[1.0] * 4] * 4
    t = scratch.trace_attention(X, attn_mask=allow, masked_rows="uniform", grad_output=dO)
    text = scratch.explain(t, "grad_scores", (1, 2)).text
    assert text.startswith("grad_scores[1][2] = 0: every key is masked for query 't1'")
    assert "masked_rows='uniform'" in text


# -- bounds: compare_traces on gradients ------------------------------------------------------


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
    return dataclasses.replace(reference, steps=tuple(steps), options=fwd.options)


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


# -- input errors -----------------------------------------------------------------------------


def test_a_grad_output_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"grad_output: expected the output's shape \(4, 4\)"):
        scratch.trace_attention(X, grad_output=[[1.0] * 3] * 4)
    with pytest.raises(TypeError, match="grad_output"):
        scratch.trace_attention(X, grad_output="ones")


# -- the README's worked example, reproduced without the code under test ----------------------

README_X = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
README_DO = [[0.5, 1.0], [1.0, -1.0], [0.0, 2.0]]
README_NUMBERS = {  # as printed in README.md, section "Backward: the gradients, traced"
    "grad_value": [[0.8302, 1.1663], [0.6698, -0.1733], [0, 1.007]],
    "grad_weights": [[0.5, 1, 1.5], [1, -1, 0], [0, 2, 2]],
    "row_dot": [0.5, -0.3395, 1.5035],
    "grad_scores": [[0, 0, 0], [0.4424, -0.4424, 0], [-0.3732, 0.1233, 0.25]],
    "grad_query": [[0, 0], [0.3128, -0.3128], [-0.0872, 0.2639]],
    "grad_key": [[-0.2639, 0.0489], [0.0872, -0.2256], [0.1768, 0.1768]],
}


def test_the_readme_numbers_are_what_autograd_gives():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    q, k, v = (torch.tensor(README_X, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dO = torch.tensor(README_DO, dtype=torch.float64)
    # the gradients of q, k and v separately (the trace's q = k = v = x has no projection)
    out = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dO)
    scores = (q @ k.T / math.sqrt(2)).masked_fill(~torch.ones(3, 3).bool().tril(), -math.inf)
    scores.retain_grad()
    weights = torch.softmax(scores, -1)
    weights.retain_grad()
    o = weights @ v
    (o * dO).sum().backward()
    want = {"grad_value": dv, "grad_query": dq, "grad_key": dk, "grad_weights": weights.grad,
            "grad_scores": scores.grad, "row_dot": (dO * o).sum(-1)}  # fmt: skip
    for name, value in want.items():
        np.testing.assert_allclose(value.detach().numpy(), README_NUMBERS[name], atol=5e-5,
                                   err_msg=name)  # fmt: skip
    trace = scratch.trace_attention(README_X, is_causal=True, grad_output=README_DO)
    for name, printed in README_NUMBERS.items():
        np.testing.assert_allclose(trace[name].value, printed, atol=5e-5, err_msg=name)


def test_the_readme_grad_scores_cell_by_hand():
    """dS[2][1] from the forward weights alone: P = softmax(c's causal scores), dP = dO V^T,
    D = sum_j P_j dP_j (= rowsum(dO * O)), dS = P (dP - D)."""
    s = [sum(a * b for a, b in zip(README_X[2], kj)) / math.sqrt(2) for kj in README_X]
    e = [math.exp(x - max(s)) for x in s]
    P = [x / sum(e) for x in e]
    dP = [sum(a * b for a, b in zip(README_DO[2], vj)) for vj in README_X]
    D = sum(p * d for p, d in zip(P, dP))
    dS = P[1] * (dP[1] - D)
    assert round(dS, 4) == README_NUMBERS["grad_scores"][2][1] == 0.1233
    trace = scratch.trace_attention(README_X, is_causal=True, grad_output=README_DO)
    assert trace["grad_scores"].value[2][1] == pytest.approx(dS, rel=1e-14)
    text = scratch.explain(trace, "grad_scores", (2, 1)).text
    assert text == ("grad_scores[2][1] = weights[2][1] * (grad_weights[2][1] - row_dot[2]) = "
                    "0.2483 * (2 - 1.503) = 0.1233")  # fmt: skip


def test_the_readme_prints_these_numbers():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    fmt = lambda x: f"{x:g}"  # noqa: E731
    for name, printed in README_NUMBERS.items():
        rows = printed if isinstance(printed[0], list) else [printed]
        text = ", ".join("[" + ", ".join(fmt(x) for x in row) + "]" for row in rows)
        text = f"[{text}]" if isinstance(printed[0], list) else text
        assert f"# {name.ljust(12)} {text}" in readme, name


def test_value_passed_as_the_key_itself_is_one_input():
    kwargs = {k: SETUPS["cross, one input"][k] for k in ("w_q", "w_k", "w_v")}
    dO = dO_for("cross, one input")
    one = scratch.trace_attention(X, MEM, **kwargs, grad_output=dO)
    same_object = scratch.trace_attention(X, MEM, MEM, **kwargs, grad_output=dO)
    assert same_object.names() == one.names()
    assert "grad_value_input" not in one
    assert same_object["grad_key_input"].value == one["grad_key_input"].value
    g = scratch.multi_head_attention_backward(X, MEM, None, **kwargs, grad_output=dO)
    same("grad_key_input", one["grad_key_input"].value, g.grad_key)


# -- dropout: the forward's mask, reused -------------------------------------------------------

DROPOUT = ["plain", "causal, heads, w_o, b_o", "gqa, bool mask", "a fully masked row, heads"]


def keep_mask(seed: int, heads: int, L: int, S: int, p: float) -> list:
    """Dropout's factors as the ground truth draws them: row-major, head by head."""
    rng = random.Random(seed)
    return [[[0.0 if rng.random() < p else 1 / (1 - p) for _ in range(S)] for _ in range(L)]
            for _ in range(heads)]  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", DROPOUT)
def test_dropout_weights_and_gradients_equal_the_ground_truth_functions(name, seed):
    t = traced(name, seed, dropout_p=0.3, rng=random.Random(seed))
    H, Hkv = t.num_heads, t.num_kv_heads
    heads = [heads_of(t[n].value, h).tolist() for n, h in (("q", H), ("k", Hkv), ("v", Hkv))]
    args = dict(scale=t.scale, enable_gqa=Hkv < H, dropout_p=0.3, **mask_args(SETUPS[name]))
    _, weights = scratch.scaled_dot_product_attention(*heads, **args, rng=random.Random(seed))
    same("weights", t["weights"].value, weights if t["weights"].axes[0] == "head" else weights[0])
    dO = t["grad_head_outputs"].value if "grad_head_outputs" in t else [t["grad_output"].value]
    dq, dk, dv = scratch.scaled_dot_product_attention_backward(
        *heads, dO, **args, rng=random.Random(seed)
    )
    same("grad_query", t["grad_query"].value, side_by_side(dq))
    same("grad_key", t["grad_key"].value, side_by_side(dk))
    same("grad_value", t["grad_value"].value, side_by_side(dv))
    assert 0.0 in np.asarray(t["weights"].value)  # some weights were dropped


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", [n for n in DROPOUT if n not in AUTOGRAD_NAN])
def test_dropout_gradients_equal_torch_autograd_with_the_same_mask(name, seed):
    t = traced(name, seed, dropout_p=0.25, rng=random.Random(seed))
    L, S = t["weights"].shape[-2:]
    want = autograd(SETUPS[name], dO_for(name, seed), keep_mask(seed, t.num_heads, L, S, 0.25))
    for step in t.steps[t.names().index("grad_output") + 1 :]:
        theirs = want[step.name]
        if step.name in ("grad_weights", "grad_scores", "row_dot") and step.axes[0] != "head":
            theirs = theirs[0]
        gap = np.abs(np.asarray(step.value, dtype=float) - theirs).max()
        assert gap <= 1e-12 * (np.abs(theirs).max() + 1.0), f"{name}: {step.name} {gap:.3g}"


def test_dropout_from_the_global_generator_is_reused_and_not_consumed_twice():
    random.seed(11)
    t = scratch.trace_attention(X, dropout_p=0.5, grad_output=dO_for("plain"))
    after = random.random()
    random.seed(11)
    _, weights = scratch.scaled_dot_product_attention(X, X, X, dropout_p=0.5)
    assert random.random() == after  # the trace drew the forward's mask once, as sdpa does
    random.seed(11)
    dq, dk, dv = scratch.scaled_dot_product_attention_backward(X, X, X, dO_for("plain"),
                                                               dropout_p=0.5)  # fmt: skip
    assert t["weights"].value == weights
    assert (t["grad_query"].value, t["grad_key"].value, t["grad_value"].value) == (dq, dk, dv)


@pytest.mark.parametrize("name", DROPOUT)
def test_dropout_explain_reads_and_arithmetic(name):
    t = traced(name, 2, dropout_p=0.3, rng=random.Random(4))
    call, names = call_of(t), t.names()
    assert "dropout (p = 0.3)" in t["weights"].formula
    assert t["grad_scores"].formula.startswith("grad_scores")
    assert "softmax(masked" in t["grad_scores"].formula
    checked = 0
    for step in t.steps[names.index("weights") :]:
        spec = [s for s in STEPS if s.name == step.name and s.present(call)][0]
        cited = set()
        for index in np.ndindex(*step.shape):
            e = scratch.explain(t, step.name, index)
            cited |= {s for s, _, _ in e.sources}
            got = reevaluate(e.text)
            if got is not None:
                result, evaluated, size = got
                assert abs(evaluated - result) <= 2e-3 * size + 1e-12, e.text
                value = np.asarray(step.value, dtype=float)[index]
                assert abs(result - value) <= 5e-4 * abs(value) + 1e-12, e.text
                checked += 1
        assert cited == set(spec.reads(call)), step.name
    assert checked >= 40


def test_a_dropout_trace_has_no_bound_for_grad_scores_and_says_so():
    t = traced("plain", 0, dropout_p=0.3, rng=random.Random(1))
    failed = {c.name: c.message for c in scratch.compare_traces(t, t) if not c.ok}
    assert list(failed) == ["grad_scores"]
    assert "no propagated bound (P before dropout)" in failed["grad_scores"]

"""The backward steps of a trace: which steps, their shapes, their numbers (against the ground
truth's backward functions and against torch.autograd), explain's arithmetic, the docs'
worked example. Bounds: test_trace_backward_bounds.py; dropout: test_trace_backward_dropout.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import scratch
from scratch.trace.step_explain import number
from scratch.trace.steps import STEPS, call_of
from tests.backward_trace_cases import (
    AUTOGRAD_NAN,
    FORWARD_ONLY,
    MEM,
    SETUPS,
    X,
    autograd,
    dO_for,
    heads_of,
    mask_args,
    reevaluate,
    same,
    side_by_side,
    traced,
)  # fmt: skip

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


# -- input errors -----------------------------------------------------------------------------


def test_a_grad_output_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"grad_output: expected the output's shape \(4, 4\)"):
        scratch.trace_attention(X, grad_output=[[1.0] * 3] * 4)
    with pytest.raises(TypeError, match="grad_output"):
        scratch.trace_attention(X, grad_output="ones")


# -- the docs' worked example, reproduced without the code under test ----------------------

README_X = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
README_DO = [[0.5, 1.0], [1.0, -1.0], [0.0, 2.0]]
README_NUMBERS = {  # as printed in docs/learn/ground-truth.md (Backward: the gradients, traced)
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

    readme = (Path(__file__).resolve().parents[1] / "docs" / "learn" / "ground-truth.md").read_text(
        encoding="utf-8"
    )
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

"""Dropout in the ground truth's trace: the forward's mask drawn from rng and reused backward."""

from __future__ import annotations

import random

import numpy as np
import pytest

import scratch
from scratch.trace.steps import STEPS, call_of
from tests.backward_trace_cases import (
    AUTOGRAD_NAN,
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
    backward = t.steps[t.names().index("grad_output") + 1 :]
    assert {"grad_query", "grad_key", "grad_value"} <= {s.name for s in backward}
    for step in backward:
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

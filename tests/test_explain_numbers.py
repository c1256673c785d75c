"""Each step's hover explanation (scratch.trace.step_explain) read back: every number it writes is
the
entry of the array it names, computed here with NumPy from the inputs, and its arithmetic holds."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

from scratch import explain, trace_attention

NUM = r"(-?inf|nan|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
DIGITS = 5e-4  # scratch.trace.step_explain.number writes 4 significant digits: within half a unit


def close(written: str, true: float) -> bool:
    """`written` is `true` as 4 significant digits write it."""
    x = float(written)
    if math.isinf(true) or math.isinf(x):
        return x == true
    return abs(x - true) <= DIGITS * abs(true) + 1e-300


def example(seed: int, causal: bool):
    """A projected example with its arrays computed here: (trace, arrays)."""
    rng = random.Random(seed)
    L, d, E = rng.randint(3, 6), rng.randint(2, 4), rng.randint(2, 3)
    x = [[rng.gauss(0, 1) for _ in range(d)] for _ in range(L)]
    w = {n: [[rng.gauss(0, 1) for _ in range(E)] for _ in range(d)] for n in ("w_q", "w_k", "w_v")}
    trace = trace_attention(x, **w, is_causal=causal)
    a = {"x": np.array(x)} | {n: np.array(m) for n, m in w.items()}
    for n in "qkv":
        a[n] = a["x"] @ a[f"w_{n}"]  # (L, d) @ (d, E) -> (L, E)
    a["scores"] = a["q"] @ a["k"].T  # (L, E) @ (E, L) -> (L, L)
    a["scaled"] = a["scores"] / math.sqrt(E)
    keep = np.tril(np.ones((L, L), bool)) if causal else np.ones((L, L), bool)
    a["masked"] = np.where(keep, a["scaled"], -np.inf)
    e = np.exp(a["masked"] - a["masked"].max(axis=1, keepdims=True))
    a["weights"] = e / e.sum(axis=1, keepdims=True)
    a["output"] = a["weights"] @ a["v"]  # (L, L) @ (L, E) -> (L, E)
    return trace, a, rng


def products(text: str) -> list[tuple[str, str]]:
    """The 'a*b' terms of a written sum."""
    return re.findall(NUM + r"\*" + NUM, text)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_the_dot_products_name_their_rows_and_columns(seed, causal):
    trace, a, rng = example(seed, causal)
    L, E = a["q"].shape
    for step, left, right in (
        ("q", lambda i: a["x"][i], lambda j: a["w_q"][:, j]),
        ("v", lambda i: a["x"][i], lambda j: a["w_v"][:, j]),
        ("scores", lambda i: a["q"][i], lambda j: a["k"][j]),
        ("output", lambda i: a["weights"][i], lambda j: a["v"][:, j]),
    ):
        i, j = rng.randrange(L), rng.randrange(a[step].shape[1])
        text = explain(trace, step, (i, j)).text
        pairs = products(text)
        u, v = left(i), right(j)
        assert len(pairs) == len(u), (step, text)
        for (p, r), true_p, true_r in zip(pairs, u, v):
            assert close(p, true_p) and close(r, true_r), (step, text, true_p, true_r)
        value = re.search(r"= " + NUM + r"$", text).group(1)
        assert close(value, a[step][i, j]), (step, text, a[step][i, j])
        assert float(np.dot(u, v)) == pytest.approx(a[step][i, j], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_scale_mask_and_softmax_explanations_state_the_arrays(seed, causal):
    trace, a, rng = example(seed, causal)
    L, E = a["q"].shape
    i, j = rng.randrange(L), rng.randrange(L)
    text = explain(trace, "scaled", (i, j)).text
    s, scale, value = re.search(rf"= {NUM} \* {NUM} = {NUM}$", text).groups()
    assert close(s, a["scores"][i, j]) and close(scale, 1 / math.sqrt(E)), text
    assert close(value, a["scaled"][i, j]), text
    for i in range(L):
        for j in range(L):
            text = explain(trace, "masked", (i, j)).text
            if causal and j > i:  # the reason names the two tokens, in their order
                assert text == (
                    f"masked[{i}][{j}] = -inf: key '{trace.key_tokens[j]}' comes after query "
                    f"'{trace.tokens[i]}' (causal mask)"
                ), text
            else:
                assert text.endswith("(not masked)"), text
                assert close(re.search(rf"= {NUM} \(not", text).group(1), a["masked"][i, j])
            text = explain(trace, "weights", (i, j)).text
            m, top, total = re.search(rf"= exp\({NUM} - {NUM}\) / {NUM}", text).groups()
            row = a["masked"][i]
            assert close(m, row[j]) and close(top, row.max()), (text, row)
            assert close(total, float(np.exp(row - row.max()).sum())), text
            value = re.search(rf"= {NUM}(?: \(masked: .*\))?$", text).group(1)
            assert close(value, a["weights"][i, j]), (text, a["weights"][i, j])
            if row[j] > -np.inf:  # the difference as written is the difference of the two
                diff = re.search(rf"= exp\({NUM}\) / ", text).group(1)
                assert close(diff, row[j] - row.max()), text


@pytest.mark.parametrize("seed", range(6))
def test_heads_gqa_concat_and_the_output_bias_are_read_from_their_own_columns(seed):
    rng = random.Random(seed)
    L, d, dk, H = rng.randint(2, 5), rng.randint(2, 4), rng.randint(1, 3), rng.choice([2, 4])
    x = np.array([[rng.gauss(0, 1) for _ in range(d)] for _ in range(L)])
    w_q = np.array([[rng.gauss(0, 1) for _ in range(H * dk)] for _ in range(d)])
    w_k = np.array([[rng.gauss(0, 1) for _ in range(dk)] for _ in range(d)])  # one kv head
    w_o = np.array([[rng.gauss(0, 1) for _ in range(d)] for _ in range(H * dk)])
    b_o = [rng.gauss(0, 3) for _ in range(d)]
    trace = trace_attention(
        x.tolist(), w_q=w_q.tolist(), w_k=w_k.tolist(), w_v=w_k.tolist(), w_o=w_o.tolist(),
        b_o=b_o, num_heads=H, num_kv_heads=1,
    )  # fmt: skip
    q, k = x @ w_q, x @ w_k  # (L, H*dk), (L, dk): v = k
    h, i, j = rng.randrange(H), rng.randrange(L), rng.randrange(L)
    qh = q[:, h * dk : (h + 1) * dk]  # (L, dk): head h's columns
    text = explain(trace, "scores", (h, i, j)).text
    assert f"q_{h}[{i}] . k_0[{j}]" in text, text  # GQA: every head reads kv head 0
    for (p, r), a, b in zip(products(text), qh[i], k[j]):
        assert close(p, a) and close(r, b), text
    s = qh @ k.T / math.sqrt(dk)  # (L, dk) @ (dk, L) -> (L, L)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    c = rng.randrange(dk)
    text = explain(trace, "head_outputs", (h, i, c)).text
    for (p, r), a, b in zip(products(text), w[i], k[:, c]):
        assert close(p, a) and close(r, b), text
    concat = np.concatenate([_head_output(q, k, g, dk) for g in range(H)], axis=1)  # (L, H*dk)
    m = rng.randrange(H * dk)
    text = explain(trace, "concat", (i, m)).text
    assert f"= head_outputs[{m // dk}][{i}][{m % dk}] = " in text and f"(head {m // dk})" in text
    assert close(re.search(rf"= {NUM} \(head", text).group(1), concat[i, m]), text
    o = rng.randrange(d)
    text = explain(trace, "output", (i, o)).text
    for (p, r), a, b in zip(products(text), concat[i], w_o[:, o]):
        assert close(p, a) and close(r, b), text
    bias = re.search(rf"\+ {NUM} \(b_o\[{o}\]\)", text).group(1)
    assert close(bias, b_o[o]), text
    value = re.search(rf"= {NUM}$", text).group(1)
    assert close(value, float(concat[i] @ w_o[:, o] + b_o[o])), text


def _head_output(q: np.ndarray, k: np.ndarray, h: int, dk: int) -> np.ndarray:
    """Head h's output (L, dk) with v = k, computed here."""
    s = q[:, h * dk : (h + 1) * dk] @ k.T / math.sqrt(dk)  # (L, dk) @ (dk, L) -> (L, L)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ k  # (L, L) @ (L, dk) -> (L, dk)

"""Each step's hover explanation (scratch.step_explain) read back: every number it writes is the
entry of the array it names, computed here with NumPy from the inputs, and its arithmetic holds."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

from scratch import explain, trace_attention

NUM = r"(-?inf|nan|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
DIGITS = 5e-4  # scratch.step_explain.number writes 4 significant digits: within half a unit


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

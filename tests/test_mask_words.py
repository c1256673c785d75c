"""mask_words: every mask kind a trace can have has its formula, note and reason, in one table."""

import pytest

from scratch import trace_attention
from scratch.core.options import MASK_KINDS
from scratch.trace.mask_words import MASK_WORDS, trace_mask_kind

X = [[1.0, 0.0], [0.5, 2.0], [-1.0, 1.0]]


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_every_options_kind_has_words(kind):
    for is_bool in (True, False):
        words = MASK_WORDS[trace_mask_kind(kind, is_bool)]
        assert words.formula.format(s="scaled").startswith("scaled")
        assert words.note


def test_a_given_mask_is_named_by_its_dtype():
    assert trace_mask_kind("given", True) == "bool"
    assert trace_mask_kind("given", False) == "float"
    assert trace_mask_kind("causal", None) == "causal"


@pytest.mark.parametrize(
    ("kwargs", "kind", "reason"),
    [
        ({"is_causal": True}, "causal", "key 't2' comes after query 't0' (causal mask)"),
        ({"attn_mask": [[True, True, False]] * 3}, "bool", "attn_mask is False for query 't0'"),
        (
            {"attn_mask": [[0.0, 0.0, float("-inf")]] * 3},
            "float",
            "attn_mask is -inf for query 't0'",
        ),
    ],
)
def test_the_trace_and_explain_speak_the_table(kwargs, kind, reason):
    from scratch import explain

    trace = trace_attention(X, **kwargs)
    words = MASK_WORDS[kind]
    assert trace.source.mask == kind
    assert trace["masked"].formula == "masked = " + words.formula.format(s="scaled")
    assert trace["masked"].note == words.note
    assert reason in explain(trace, "masked", (0, 2)).text


@pytest.mark.parametrize("seed", range(6))
def test_each_kinds_formula_and_reasons_hold_on_every_cell(seed):
    """The masked step's words against its cells, L != S included: causal hides exactly the
    keys j > i; a bool mask exactly its False cells; a float mask is added; every hidden cell's
    hover names its own query and key."""
    import math
    import random

    from scratch import explain

    rng = random.Random(seed)
    L, S, d = rng.randint(2, 6), rng.randint(2, 6), 2
    x = [[rng.gauss(0, 1) for _ in range(d)] for _ in range(L)]
    kv = [[rng.gauss(0, 1) for _ in range(d)] for _ in range(S)]
    grid = [[rng.random() < 0.7 for _ in range(S)] for _ in range(L)]
    add = [[rng.choice([0.0, -math.inf, rng.gauss(0, 1)]) for _ in range(S)] for _ in range(L)]
    for kwargs, hidden in (
        ({"is_causal": True}, lambda i, j: j > i),
        ({"attn_mask": grid}, lambda i, j: not grid[i][j]),
        ({"attn_mask": add}, lambda i, j: add[i][j] == -math.inf),
    ):
        trace = trace_attention(x, key=kv, value=kv, **kwargs)
        if "is_causal" in kwargs:  # the rule the formula states is the one tested here
            assert "where key j > query i" in trace["masked"].formula
        scaled, masked = trace["scaled"].tolist(), trace["masked"].tolist()
        for i in range(L):
            for j in range(S):
                assert (masked[i][j] == -math.inf) == hidden(i, j), (kwargs, i, j)
                if trace.source.mask == "float" and not hidden(i, j):
                    assert masked[i][j] == scaled[i][j] + add[i][j]  # 'scaled + attn_mask'
                text = explain(trace, "masked", (i, j)).text
                if hidden(i, j):
                    assert f"query '{trace.tokens[i]}'" in text, text
                    assert f"key '{trace.key_tokens[j]}'" in text, text
                    assert text.startswith(f"masked[{i}][{j}] = -inf: "), text
                else:
                    assert "-inf" not in text.split(" = ")[-1], text

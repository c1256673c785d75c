"""mask_words: every mask kind a trace can have has its formula, note and reason, in one table."""

import pytest

from scratch import trace_attention
from scratch.mask_words import MASK_WORDS, trace_mask_kind
from scratch.options import MASK_KINDS

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

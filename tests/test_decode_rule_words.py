"""At a decode step the masked step's rule speaks of the positions the window shows (the query
is token n - 1, not row 0) and is the Variant panel's text: its inequality, evaluated at the
query's position, picks exactly the keys the masked row leaves finite."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gui.state import controller, variant_session
from gui.state import session as sm
from scratch.variants import VariantChoice

CHOICES = [
    dict(mask="window", left=2, right=0),
    dict(mask="window", left=1, right=0),
    dict(mask="window", left=3, right=-1),
    dict(mask="causal"),
    dict(mask="chunked", chunk=2),
    dict(mask="prefix", prefix=2),
]


def _seen_by_rule(note: str, i: int, S: int) -> set[int]:
    """The keys j the note's 'key j seen by query i iff <inequality>' admits at position i."""
    assert "key j seen by query i iff " in note, note
    inequality = note.split(" iff ", 1)[1]
    return {j for j in range(S) if eval(inequality, {"__builtins__": {}}, {"i": i, "j": j})}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: "-".join(map(str, c.values())))
def test_the_decode_rule_names_the_keys_the_picture_shows(choice, seed):
    s = sm.random_session(seed, num_tokens=7)
    n = 3 + seed  # decode step n: token n - 1 queries the n cached tokens
    s = dataclasses.replace(s, variant=VariantChoice(**choice), decode=n)
    trace = controller.run(s).trace
    note = trace["masked"].note
    shown = {j for j, v in enumerate(trace["masked"].tolist()[0][0]) if v != -math.inf}
    assert _seen_by_rule(note, n - 1, n) == shown, note
    rule = note.split("variant: ", 1)[1]
    assert rule in variant_session.rule(s), (rule, variant_session.rule(s))  # the panel's words

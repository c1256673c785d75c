"""Copy as code: each library's snippet runs and gives the ground truth's output within a float64
rounding bound, for cross-attention, heads, GQA, causal and custom masks, every masked_rows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scratch
from gui.present import codegen
from gui.state import controller, session_file
from gui.state import session as sm
from tests.journey_sessions import journey_typed, with_mask

EPS64 = np.finfo(np.float64).eps


def _bound(trace) -> float:
    """float64 rounding bound for the snippet vs the exact core: a few ulps per term summed."""
    q, k, v = (np.abs(np.asarray(trace[n].tolist())) for n in ("q", "k", "v"))
    terms = q.shape[1] + k.shape[0] + 8
    return 16 * terms * EPS64 * max(1.0, float(v.max())) * max(1.0, float(q.max() * k.max()))


SNIPPET_CASES = [
    ("journey", {}),
    ("cross", {"mask": "causal-bottom-right"}),  # L = 2 queries, S = 4 keys
    ("random-2h", {"mask": "causal-top-left"}),
    ("random-gqa", {"mask": "causal-bottom-right", "masked_rows": "uniform"}),
    ("project-key-no-value", {}),  # cross-attention whose values come from the key input
] + [  # a custom mask with a fully masked row, under each masked_rows policy
    (
        "random-custom",
        {"mask": "custom", "masked_rows": policy, "scale_mode": "custom", "scale_value": 0.7},
    )
    for policy in sm.MASKED_ROWS
]


@pytest.mark.parametrize("library", codegen.LIBRARIES)
@pytest.mark.parametrize(("case", "changes"), SNIPPET_CASES)
def test_copy_as_code_snippet_runs_and_matches_the_trace(library, case, changes):
    if case == "journey":
        s = journey_typed()
    elif case == "cross":
        s = sm.Session(
            tokens=("a", "b"),
            key_tokens=("k0", "k1", "k2", "k3"),
            mode="qkv",
            query=((0.0, 1.0, 0.5), (1.0, -1.0, 2.0)),
            key=((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (0.5, 0.5, 0.5)),
            value=((1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (7.0, 8.0)),
        )
    elif case == "random-2h":
        s = sm.random_session(5, 5, 4, 2, 3, 2)
    elif case == "project-key-no-value":
        key = ((1.0, 0.5, -1.0, 2.0), (0.0, 1.0, 0.25, -0.5))  # (S=2, d_kv_in=4)
        s = dataclasses.replace(sm.random_session(7, 3), key=key, key_tokens=("k0", "k1"))
        session_file.validate(s.to_dict())
    else:
        s = sm.random_session(6, 4, 6, 3, 2, 4, 2)
    if case == "random-custom":
        changes = dict(
            changes,
            grid=(
                (True, False, True, False),
                (False,) * 4,
                (True,) * 4,
                (False, False, False, True),
            ),
        )
    mask, grid = changes.pop("mask", "none"), changes.pop("grid", None)
    s = with_mask(dataclasses.replace(s, **changes), mask, grid)
    trace = scratch.trace_example(*controller.example_and_options(s))
    namespace: dict = {}
    exec(compile(codegen.snippet(s, library), "<snippet>", "exec"), namespace)  # noqa: S102
    got = np.asarray(namespace["output"], dtype=np.float64)
    want = np.asarray(trace["output"].tolist(), dtype=np.float64)
    assert got.shape == want.shape, f"{library} snippet output shape {got.shape} != {want.shape}"
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN rows differ"
    diff = np.nanmax(np.abs(got - want)) if np.isfinite(want).any() else 0.0
    assert diff <= _bound(trace), f"{library} snippet output differs by {diff:.3g}"

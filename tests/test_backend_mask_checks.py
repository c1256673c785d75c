"""The window's backend check for every choice of the one mask: NumPy and torch compute the
mask themselves, and the check compares every step of theirs with the ground truth's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scratch
from gui.state import controller, variant_session
from gui.state import session as sm
from gui.state.input_modes import with_mode
from tests.test_session_options import CHOICES, chosen

BACKENDS = [("numpy", "float64"), ("numpy", "float32"), ("torch-cpu", "float64")]
STEPS = ["scores", "scaled", "masked", "weights", "head_outputs", "output"]


@pytest.mark.parametrize("backend, dtype", BACKENDS)
@pytest.mark.parametrize(
    "fields", CHOICES, ids=[f"{c['mask']}-{c.get('align', '')}" for c in CHOICES]
)
@pytest.mark.parametrize("seed", range(3))
def test_every_mask_choice_is_computed_by_the_backend_and_checked(seed, fields, backend, dtype):
    pytest.importorskip("torch" if backend.startswith("torch") else "numpy")
    s = sm.random_session(seed, num_tokens=4 + seed, num_heads=2)
    s = dataclasses.replace(chosen(s, fields, seed), backend=backend, dtype=dtype)
    outcome = controller.run(s)
    assert outcome.backend == backend and outcome.trace is not outcome.reference
    checks = {c.name: c for c in outcome.checks}
    assert set(STEPS) <= set(checks) and all(c.ok for c in outcome.checks), outcome.checks
    # the backend's own masked step: -inf exactly where the window draws a masked cell
    shown = np.array(variant_session.shown_mask(s))  # (L, S)
    masked = np.asarray(outcome.trace["masked"].tolist())  # (H, L, S)
    assert (np.isneginf(masked) == ~shown[None]).all()
    # a real comparison: one allowed cell of the backend's masked step moved fails its check
    i, j = np.argwhere(shown)[seed % int(shown.sum())]
    moved = np.array(outcome.trace["masked"].tolist())  # (H, L, S), float64
    moved[1, i, j] += 1e-3 * max(1.0, abs(float(moved[1, i, j])))
    steps = tuple(
        dataclasses.replace(step, value=moved) if step.name == "masked" else step
        for step in outcome.trace.steps
    )
    wrong = scratch.compare_traces(
        dataclasses.replace(outcome.trace, steps=steps), outcome.reference
    )
    assert [c.name for c in wrong if not c.ok] == ["masked"]


@pytest.mark.parametrize("fields", [c for c in CHOICES if c["mask"] in ("none", "causal", "drawn")])
@pytest.mark.parametrize("seed", range(3))
def test_the_backward_view_computes_every_sdpa_mask(seed, fields):
    """The backward paths take SDPA's masks: none, causal either alignment (cross-attention:
    bottom-right's diagonal is not 0) and a drawn grid reach them, and their gradients check."""
    s = sm.random_session(seed, num_tokens=3 + seed, num_heads=2)
    s = sm.resized(with_mode(s, "qkv"), num_keys=s.num_tokens + 2)  # S = L + 2 keys
    s = dataclasses.replace(chosen(s, fields, seed), backend="numpy")
    outcome = controller.run_backward(s)
    assert outcome.refused == "" and outcome.checks, outcome.compared
    assert all(c.ok for c in outcome.checks), outcome.checks
    shown = np.array(
        variant_session.shown_mask(s)
    )  # (L, S): the forward steps of the backward trace
    masked = np.asarray(outcome.trace["masked"].tolist())  # (H, L, S)
    assert (np.isneginf(masked) == ~shown[None]).all()

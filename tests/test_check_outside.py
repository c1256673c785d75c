"""The checker on kernels written the way outside projects write them (tests/checker_outside.py).

Each planted mistake on fixed seeds (forward 0-1, about a second of CPU per check; backward
0-2): caught every time, never given a wrong name, and named on every seed where a name is
expected. The 50-seed sweep is tests/checker_outside_sweep.py
(its numbers are in the README's checker section).
"""

from __future__ import annotations

import pytest

from scratch.checker import check, check_backward
from tests.checker_outside import (
    BACKWARD,
    CORRECT,
    CORRECT_BACKWARD,
    FORWARD,
    REFUSES_EV,
    outcome,
)

SEEDS = (0, 1, 2)
FORWARD_SEEDS = (0, 1)  # the suite's time budget; the sweep runs 0-49


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_outside_forward_mistake_is_caught_and_never_misnamed(name):
    fn, dtype, policy, words = FORWARD[name]
    for seed in FORWARD_SEEDS:
        report = check(fn, array="numpy", dtype=dtype, seed=seed, masked_rows=policy)
        found = outcome(report, words)
        assert found != "passed", (name, seed)
        assert found != "misnamed", (name, seed, report.diagnosis)
        if words is not None:
            assert found == "named", (name, seed, str(report))


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_outside_backward_mistake_is_caught_and_named(name):
    fn, dtype, words = BACKWARD[name]
    for seed in SEEDS:
        report = check_backward(None, backward=fn, array="numpy", dtype=dtype, seed=seed)
        assert outcome(report, words) == "named", (name, seed, str(report))


def test_correct_outside_kernels_raise_no_alarm():
    """Every correct outside kernel, every dtype, on seed 0 (the sweep runs seeds 0-49)."""
    for name, (fn, array, dtype, policy) in CORRECT.items():
        report = check(fn, array=array, dtype=dtype, seed=0, masked_rows=policy)
        assert report, (name, str(report))
    for name, (fn, dtype) in CORRECT_BACKWARD.items():
        report = check_backward(None, backward=fn, array="numpy", dtype=dtype, seed=0)
        assert report, (name, str(report))


def test_a_kernel_refusing_ev_not_e_passes_with_that_feature_unsupported():
    """Flash kernels raise NotImplementedError when v's head dim differs from q's."""
    report = check(REFUSES_EV, array="numpy", dtype="float32")
    assert report, str(report)
    assert "Ev != E unsupported" in report.verdict, report.verdict
    refused = [c for c in report.cases if c.status == "unsupported"]
    assert refused and all("ev" in c.features for c in refused)


def test_a_crash_on_ev_not_e_is_a_failure_not_a_refusal():
    """Only NotImplementedError refuses Ev != E; any other error there is a bug."""

    def crashes(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        if v.shape[-1] != q.shape[-1]:
            raise ValueError("shapes")
        return REFUSES_EV(q, k, v, attn_mask, is_causal, scale, enable_gqa)

    report = check(crashes, array="numpy", dtype="float32")
    assert not report
    assert report.cases[0].name == "plain" and report.cases[0].status == "fail"

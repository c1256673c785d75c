"""The slow-work question's estimate counts the work the call really does: its score cells and
multiply-adds, read here from the shapes of the trace the call returns (at decode step n: one
query against n keys, so the 4095-token decode step is not estimated as a 4096-token run)."""

from __future__ import annotations

import dataclasses
import math

import pytest

pytest.importorskip("PyQt6")

from gui.state import controller  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.state.input_modes import with_mode  # noqa: E402
from gui.views import slow_warning  # noqa: E402


def _work_of(trace) -> tuple[int, int]:
    """(score cells, multiply-adds) counted from a trace's arrays."""
    H, S = trace.num_heads, trace["k"].shape[0]
    cells = math.prod(trace["scores"].shape)  # (H, L, S) or (L, S)
    d_k = trace["q"].shape[1] // H
    outputs = trace["head_outputs"].shape if "head_outputs" in trace else trace["output"].shape
    multiplies = cells * d_k + math.prod(outputs) * S  # q . k per cell; each output sums S terms
    if "w_q" in trace:  # projections: every q, k, v entry sums d_model products
        d_model = trace["w_q"].shape[0]
        multiplies += d_model * sum(math.prod(trace[n].shape) for n in "qkv")
    return cells, multiplies


@pytest.mark.parametrize("seed", range(6))
def test_the_estimate_counts_the_calls_own_work(seed):
    heads, kv = [(1, 1), (2, 2), (4, 2)][seed % 3]
    sizes = dict(d_model=4 * (1 + seed), d_k=2, d_v=1 + seed % 2)
    s = sm.random_session(seed, 5 + seed, **sizes, num_heads=heads, num_kv_heads=kv)
    s = with_mode(s, ["project", "self", "qkv"][seed % 3])
    for decode in (0, 2, s.num_tokens):
        d = dataclasses.replace(s, decode=decode)
        trace = controller.run(d).trace
        assert slow_warning.scratch_work(d) == _work_of(trace), (seed, decode)
        cells, multiplies = _work_of(trace)
        want = (cells * slow_warning.CELL_US + multiplies * slow_warning.MULTIPLY_US) / 1e6
        assert slow_warning.scratch_seconds(d) == pytest.approx(want, rel=1e-12)


def test_a_decode_step_is_estimated_as_one_query_not_the_whole_sequence():
    """4096 tokens: the full run is asked about; decode step 4095 (one query; the keys still
    projected) is thousands of times less work and not asked about."""
    s = sm.random_session(0, num_tokens=4096, d_model=3, d_k=2, d_v=2, num_heads=1)
    full = slow_warning.scratch_seconds(s)
    step = slow_warning.scratch_seconds(dataclasses.replace(s, decode=4095))
    assert full > slow_warning.WARN_S > step
    assert full / step > 1000

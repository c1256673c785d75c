"""Trace.head_average: the one number the window shows that is not a step is the trace's own."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

import scratch
from scratch import backends

SEEDS = range(30)


def case(seed: int) -> dict:
    """Seeded multi-head self-attention arguments (some causal, some grouped-query)."""
    rng = random.Random(seed)
    heads = rng.choice((2, 3, 4))
    L, d_head = rng.randint(1, 6), rng.randint(1, 3)
    x = [[rng.uniform(-2, 2) for _ in range(heads * d_head)] for _ in range(L)]
    return dict(x=x, num_heads=heads, is_causal=rng.random() < 0.5)


def exact_mean(values: list[float]) -> float:
    """The mean in exact rational arithmetic, rounded once at the end."""
    return float(sum(Fraction(v) for v in values) / len(values))


def per_cell(nested: list, heads: int) -> list[tuple[list[float], float]]:
    """(values over the heads, nothing else) for every cell of an (H, rows, cols) list."""
    rows, cols = len(nested[0]), len(nested[0][0])
    return [
        ([nested[h][i][j] for h in range(heads)], (i, j)) for i in range(rows) for j in range(cols)
    ]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("step", ["scores", "weights", "masked"])
def test_the_ground_truth_average_is_the_exact_mean_over_heads(seed, step):
    kwargs = case(seed)
    trace = scratch.trace_attention(**kwargs)
    values, average = trace[step].tolist(), trace.head_average(step)
    for over_heads, (i, j) in per_cell(values, kwargs["num_heads"]):
        got = average[i][j]
        if all(v == -math.inf for v in over_heads):  # masked in every head
            assert got == -math.inf
            continue
        want = exact_mean(over_heads)
        # fsum rounds the sum once, the division once more: at most one unit in the last place
        assert abs(got - want) <= math.ulp(want), (step, i, j, got, want)


def test_nan_and_infinities_average_as_numpy_does():
    steps = (
        scratch.Step(
            "scores",
            "",
            [[[math.nan, 1.0, math.inf, -math.inf]], [[2.0, 3.0, math.inf, math.inf]]],
            "",
            ("head", "query", "key"),
        ),
    )
    trace = scratch.Trace(steps, ("a",), ("p", "q", "r", "s"), 1.0, num_heads=2)
    got = trace.head_average("scores")[0]
    assert math.isnan(got[0]) and got[1] == 2.0 and got[2] == math.inf
    assert math.isnan(got[3])  # inf + -inf has no mean
    finite_huge = [[[1.5e308]], [[1.5e308]]]  # the exact sum passes float64's largest
    huge = scratch.Step("scores", "", finite_huge, "", ("head", "query", "key"))
    trace = scratch.Trace((huge,), ("a",), ("p",), 1.0, num_heads=2)
    assert trace.head_average("scores") == [[math.inf]]  # as numpy's float64 mean overflows


def test_a_step_without_a_head_axis_has_no_head_average():
    trace = scratch.trace_attention(x=[[1.0, 2.0], [0.5, -1.0]], num_heads=1)
    with pytest.raises(ValueError, match="step 'x' has no head axis"):
        trace.head_average("x")


@pytest.mark.parametrize("backend", ["numpy", "torch-cpu"])
@pytest.mark.parametrize("seed", range(10))
def test_a_backend_trace_averages_its_own_array_like_the_ground_truth(backend, seed):
    if backend not in backends.available():
        pytest.skip(f"{backend} is not installed")
    np = pytest.importorskip("numpy")
    kwargs = case(seed)
    trace = backends.get(backend).trace_attention(**kwargs, dtype="float64")
    truth = scratch.trace_attention(**kwargs)
    for step in ("scores", "weights"):
        got = trace.head_average(step)
        got = np.asarray(got.cpu() if hasattr(got, "cpu") else got, dtype=np.float64)
        want = np.asarray(truth.head_average(step))
        # float64 kernels that round differently: the bound of one float64 attention step
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=step)

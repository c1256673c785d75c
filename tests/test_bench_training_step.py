"""scratch.bench.backward_goal (issue 24 items 1, 2, 5): its rows and goal lines on tiny sizes.

No timing is asserted (speed goes to the benchmark); the judgement is checked on rows with
made-up times, at each goal's boundary.
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("torch")

from scratch.bench import Row, backward_goal, plugins  # noqa: E402


@pytest.mark.parametrize("causal", [False, True])
def test_the_rows_run_at_a_tiny_size_and_agree(causal):
    """L = 64: numpy's gradients equal torch's within float32 rounding; both forwards agree."""
    rivals = backward_goal.backward_rows(64, causal)
    assert [name for name, _, _ in rivals] == [
        backward_goal.NUMPY_ROW,
        backward_goal.TORCH_ROW,
        backward_goal.FORWARD_ROW,
        backward_goal.LSE_ROW,
        backward_goal.NOISE_ROW,
    ]
    ours, theirs, forward, with_lse, again = (fn() for _, fn, _ in rivals)
    for a, b in zip(ours, again):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # dQ's sum order may vary
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5)
    # bit for bit: one kernel, the same calls on the same shapes; the lse comes after, from its sums
    np.testing.assert_array_equal(forward.output, with_lse[0])


def test_measure_backward_gives_the_goal_lines_without_timing_them():
    goals = backward_goal.measure_backward((64,), memory_L=128, runs=1, load_wait_s=None)
    statuses = [status for _, status, _ in goals]
    assert len(goals) == 10 + 9 + 1  # no mask: the host's limit line too
    for at in (0, 10):
        assert [s in ("PASS", "FAIL") for s in statuses[at : at + 3]] == [True] * 3
        assert statuses[at + 3 : at + 9] == ["info"] * 6
        assert goals[at + 3][0].startswith("(noise floor, no goal) the numpy step against itself")
    assert goals[4][0].startswith("(host limit, no goal)") and statuses[4] == "info"
    assert "1.3x the speed of torch" in goals[0][0] and "causal" in goals[10][0]
    assert "L = 128 (causal): peak memory growth" in goals[-1][0]
    assert statuses[-1] in ("PASS", "FAIL") and goals[-1][2].endswith("B")


def rows(step: float, torch_t: float, forward: float, with_lse: float) -> list[Row]:
    def row(name, t):
        return Row(4096, name, t, 3, None, "n/a", times=[t * 2, t, t], load=0.5)

    return [
        row("n", step),
        row("t", torch_t),
        row("f", forward),
        row("l", with_lse),
        row("a", step),
    ]


def test_the_noise_floor_line_compares_the_step_with_itself():
    lines = backward_goal.judge(rows(0.4, 0.6, 0.1, 0.1), 4096, True)
    (noise,) = [line for line in lines if line[0].startswith("(noise floor")]
    assert noise[1] == "info" and noise[2].startswith("1.000x the time")
    slower = rows(0.4, 0.6, 0.1, 0.1)
    slower[4] = Row(4096, "a", 0.44, 3, None, "n/a", times=[0.88, 0.44, 0.44], load=0.5)
    (noise,) = [line for line in backward_goal.judge(slower, 4096, True) if "noise" in line[0]]
    assert noise[2].startswith("1.100x the time")


def test_the_goals_pass_and_fail_at_their_boundaries():
    """forward 0.1 s: the floor is 0.35 s, numpy may take 1.4 x 0.35 = 0.49 s and must be 1.3x
    torch's speed; forward_with_lse may take 1.05 x 0.1 s. A hair over each fails."""
    ok = backward_goal.judge(rows(0.49, 0.637, 0.1, 0.105), 4096, False)
    assert [s for _, s, _ in ok[:3]] == ["PASS", "PASS", "PASS"]
    bad = backward_goal.judge(rows(0.4901, 0.637, 0.1, 0.10501), 4096, False)
    assert [s for _, s, _ in bad[:3]] == ["FAIL", "FAIL", "FAIL"]


def test_the_host_limit_adds_seven_products_and_two_exps_per_score():
    """200 GFLOP/s and 0.3 ns per exp on 2 threads, L = 4096, E = 64: 7 x 2 x 4096^2 x 64 flops
    = 15.03 GFLOP in 75.16 ms, 2 x 4096^2 exps x 0.3 ns / 2 threads = 5.03 ms."""
    limit = backward_goal.HostLimit(200.0, 2048, 0.3, 2)
    assert limit.seconds(4096) == pytest.approx(0.0801951, rel=1e-6)
    lines = backward_goal.judge(rows(0.1, 0.117, 0.025, 0.025), 4096, False, limit)
    (line,) = [line for line in lines if line[0].startswith("(host limit")]
    assert line[1] == "info"
    # torch's 10th percentile 0.117 s (rows: times 2t, t, t) / 1.3 = 90 ms = 1.122x the limit
    assert line[2].startswith("80.2 ms: 7 x 2 L^2 E flops at 200 GFLOP/s")
    assert "at most torch's 10th percentile / 1.3 = 90.0 ms, 1.122x that limit" in line[2]
    assert line[2].endswith("the numpy step's 10th percentile is 100.0 ms, 1.247x it")
    causal = backward_goal.judge(rows(0.1, 0.117, 0.025, 0.025), 4096, True, limit)
    assert not [line for line in causal if line[0].startswith("(host limit")]


def test_the_host_limit_is_measured_from_a_matmul_and_an_exp2():
    limit = backward_goal.measure_host_limit(n=128)
    assert limit.n == 128 and limit.gflops > 0 and limit.exp_ns > 0 and limit.threads >= 1
    # 128^3 float32 in under a second, an exp2 in under a microsecond: on any host
    assert 2 * 128**3 / 1e9 < limit.gflops < 1e5 and 0.001 < limit.exp_ns < 1000  # GFLOP/s, ns
    with pytest.raises(ValueError, match="n: expected a positive matrix size"):
        backward_goal.measure_host_limit(n=0)


def test_the_goals_are_a_plugin_never_in_the_default_table():
    (goal_set,) = plugins.load("scratch.bench.backward_goal")
    assert goal_set.name == "backward" and "16384" in goal_set.what
    line = plugins.goal_lines((goal_set,), full=False)[0]
    assert line[1] == "not measured"

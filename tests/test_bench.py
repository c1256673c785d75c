"""scratch.bench, the benchmark: its table, goals, pairing and plugins on tiny sizes (no timing)."""

from __future__ import annotations

import argparse

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("torch")  # the table has torch rows

from scratch import bench  # noqa: E402
from scratch.bench import cli, contenders, groups, plugins, timing  # noqa: E402
from scratch.bench.pure_backward import PYTHON_BACKWARD_PAIR  # noqa: E402
from scratch.bounds.tolerance import UNIT_ROUNDOFF  # noqa: E402

# ---------------------------------------------------------------- benchmark script


def test_bench_table_runs_on_a_tiny_size():
    """run_table + format_table on L = 8: every row present, goals not measured, no timing."""
    rows = bench.run_table((8,), repeats=1, progress=False, load_wait_s=None)
    names = [r.name for r in rows]
    assert names[:6] == [
        "ground truth (scratch)",
        "pure-Python kernel limit",
        "ground truth backward (scratch)",
        "pure-Python backward kernel limit",
        "numpy explicit",
        "numpy chunked",
    ]
    assert "torch SDPA (cpu)" in names and all(r.L == 8 and r.runs == 1 for r in rows)
    sdpa = next(r for r in rows if r.name == "torch SDPA (cpu)")
    assert all(r.ratio == sdpa.best / r.best for r in rows)  # throughput vs SDPA, best runs
    assert all(r.peak_bytes is None or r.peak_bytes >= 0 for r in rows)
    text = bench.format_table(rows, markdown=True, repeats=1)
    assert text.count("\n| 8 |") == len(rows)
    assert "No goal was measured" in text and "PASS" not in text and "FAIL" not in text
    # the footer tells the runs that were made (a --quick table once claimed "7 runs each")
    assert "1 timed runs per row" in text and f"{groups.PAIR_RUNS} rounds" not in text
    assert "7 rounds" not in text and "at least 3" not in text
    assert "Host: " in text and "CPU capability" in text and "SIMD baseline" in text


def test_bench_goals_pass_and_fail():
    """The goal checks compare the right rows at the right sizes, 10th percentile against 10th
    percentile, with each goal's exact boundary."""
    from scratch.bench import Row, goals
    from scratch.bench.memory import GIB

    def rows(gt, limit, numpy_t, big_numpy_t, fast, sdpa, mem, back_limit=0.85):
        def row(L, name, t):  # three rounds, two of them t: the 10th percentile is t exactly
            return Row(L, name, t, 3, None, "n/a", times=[t * 2, t, t], load=0.5)

        return [
            row(256, "ground truth (scratch)", gt),
            row(256, "pure-Python kernel limit", limit),
            row(256, "ground truth backward (scratch)", 1.0),
            row(256, "pure-Python backward kernel limit", back_limit),
            row(4096, "numpy chunked", numpy_t),
            row(4096, "torch backend fast (cpu)", fast),
            row(4096, "torch SDPA (cpu)", sdpa),
            row(16384, "numpy chunked", big_numpy_t),
            row(16384, "torch SDPA (cpu)", 1.0),
            Row(32768, "numpy chunked", 5.0, 3, mem, "tracemalloc"),
        ]

    good = goals(rows(1.0, 0.9, 1.0 / 0.95, 1.0, 1.05, 1.0, GIB - 1), avx512=True)
    bad = goals(rows(1.0, 0.89, 1.0 / 0.94, 1.01, 1.06, 1.0, GIB, 0.84), avx512=True)
    assert [g[1] for g in good] == ["PASS"] * 6 and [g[1] for g in bad] == ["FAIL"] * 6
    assert "ground truth backward >= 0.85x" in good[1][0]
    assert good[1][2].startswith("median of 3 interleaved rounds 0.850x")  # paired, like [0]
    assert good[0][2].startswith(  # the plain-Python pair: the median of its rounds first
        "median of 3 interleaved rounds 0.900x (range 0.90-0.90x); 0.900x at the 10th "
        "percentiles (best vs best 0.900x)"
    )
    assert "0.950x at the 10th percentiles (best vs best 0.950x); median of 3" in good[2][2]
    assert "other processes used 0.5 CPUs" in good[0][2]
    # without AVX-512 the NumPy goals are 0.75x at both sizes
    host = goals(rows(1.0, 0.9, 1.0 / 0.76, 1.0 / 0.76, 1.0, 1.0, 1), avx512=False)
    assert [g[1] for g in host] == ["PASS"] * 6 and "0.75x" in host[2][0]
    slow = goals(rows(1.0, 0.9, 1.0 / 0.74, 1.0, 1.0, 1.0, 1), avx512=False)
    assert [g[1] for g in slow] == ["PASS", "PASS", "FAIL", "PASS", "PASS", "PASS"]
    # a fixed run count (--repeats, --quick) shows the goals' numbers but judges none of them
    from scratch.bench.report import format_table

    fixed = format_table(rows(1.0, 0.9, 1.0 / 0.95, 1.0, 1.05, 1.0, GIB - 1), repeats=3)
    assert "PASS" not in fixed and "FAIL" not in fixed
    assert fixed.count("not judged (3 fixed runs per row): ") == 6
    assert "No round waited" in format_table(rows(1, 1, 1, 1, 1, 1, 1), repeats=3, waited=False)


def test_goals_are_judged_at_the_10th_percentile_not_by_one_lucky_run():
    """One lucky SDPA run must not fail NumPy, nor one lucky NumPy run pass it: of 11 rounds,
    the 10th percentile is the second fastest run."""
    from scratch.bench import Row, goals

    def verdict(numpy_times, sdpa_times):
        rows = [
            Row(4096, "numpy chunked", 1.0, 11, None, "n/a", times=numpy_times, load=0.0),
            Row(4096, "torch SDPA (cpu)", 1.0, 11, None, "n/a", times=sdpa_times, load=0.0),
        ]
        line = next(g for g in goals(rows, avx512=True) if "L = 4096" in g[0])
        return line[1], line[2]

    steady = [1.0 + i / 100 for i in range(11)]  # 1.00 ... 1.10, second fastest 1.01
    lucky_sdpa = [0.8] + steady[1:]  # one SDPA run 20% faster than all others
    status, text = verdict(steady, lucky_sdpa)
    assert status == "PASS" and "(best vs best 0.800x)" in text, text  # best would fail
    lucky_numpy = [0.8] + [1.1] * 10
    status, text = verdict(lucky_numpy, steady)
    assert status == "FAIL" and "0.918x at the 10th percentiles" in text, text  # 1.01 / 1.1
    status, _ = verdict([x / 0.95 for x in steady], steady)  # exactly at the goal
    assert status == "PASS"
    status, _ = verdict([x / 0.949 for x in steady], steady)
    assert status == "FAIL"


def test_plain_python_pair_is_judged_by_the_median_of_its_rounds():
    """Both rivals are one thread of plain Python: their goal takes the median of per-round
    ratios (drift within a round hits both), not the 10th percentiles, and says so first."""
    from scratch.bench import Row, goals

    def verdict(truth_times, limit_times):
        rows = [
            Row(256, "ground truth (scratch)", 1.0, 5, None, "n/a", times=truth_times),
            Row(256, "pure-Python kernel limit", 1.0, 5, None, "n/a", times=limit_times),
        ]
        return goals(rows, avx512=True)[0]

    # one fast phase in round 1 hit only the limit's call: the 10th percentiles say 0.86x,
    # every round's own ratio is 0.95x but that one
    goal, status, text = verdict([1.0, 1.0, 1.0, 1.0, 1.0], [0.8, 0.95, 0.95, 0.95, 0.95])
    assert status == "PASS" and text.startswith("median of 5 interleaved rounds 0.950x"), text
    assert "0.860x at the 10th percentiles" in text
    # the other way: fast quantiles, but most rounds below the goal
    _, status, _ = verdict([1.0, 1.0, 1.0, 1.0, 0.5], [0.85, 0.85, 0.85, 0.85, 0.5])
    assert status == "FAIL"


def test_low_quantile_is_numpys_default_10th_percentile():
    """row.low_quantile agrees with np.quantile (linear) over many sizes and seeds."""
    from scratch.bench.row import low_quantile

    for seed in range(20):
        rng = np.random.default_rng(seed)
        for n in (1, 2, 3, 7, 12, 30, 61):
            times = rng.exponential(size=n).tolist()
            assert low_quantile(times) == pytest.approx(np.quantile(times, 0.1), rel=1e-12)
    with pytest.raises(ValueError, match="times: expected at least one timed run"):
        low_quantile([])


def test_noise_floor_line_compares_the_numpy_call_with_itself():
    """At L = 4096 the NumPy call is timed again as another row of the goal group; its line
    is information (no goal), the same comparison as a goal's."""
    from scratch.bench import Row, goals
    from scratch.bench.contenders import NOISE_ROW

    rows = [
        Row(4096, "numpy chunked", 1.0, 3, None, "n/a", times=[1.0, 1.2, 1.4], load=0.0),
        Row(4096, NOISE_ROW, 1.0, 3, None, "n/a", times=[1.1, 1.2, 1.0], load=0.0),
    ]
    line = next(g for g in goals(rows, avx512=True) if "noise floor" in g[0])
    assert line[1] == "info"
    assert line[2].startswith("1.020x at the 10th percentiles (best vs best 1.000x)"), line
    assert "median of 3 interleaved rounds 1.00x (range 0.91-1.40x)" in line[2], line


def test_pair_ratio_pairs_runs_of_the_same_round():
    """Per-round ratios divide the two rows' runs of one round, not sorted or shuffled runs."""
    from scratch.bench import Row
    from scratch.bench.row import pair_ratio

    a = Row(8, "a", 2.0, 3, None, "n/a", times=[1.0, 2.0, 4.0], load=1.0)
    b = Row(8, "b", 2.0, 3, None, "n/a", times=[4.0, 2.0, 1.0], load=1.0)
    r = pair_ratio(a, b)
    assert (r.p10, r.best, r.median, r.low, r.high, r.rounds) == (1.0, 1.0, 1.0, 0.25, 4.0, 3)


def test_numpy_matmuls_alone_computes_the_two_products():
    """The reference row really multiplies (q @ k^T) @ v, in float32 like the kernels."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s, dtype=np.float32) for s in [(6, 4), (7, 4), (7, 3)])
    found = contenders.numpy_matmuls_alone(q, k, v)()
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    u = UNIT_ROUNDOFF["float32"]
    # float32 scores: |err| <= g(4)|q||k|^T; then scores @ v: g(7)|scores||v| + that through v
    s_bound = 4.1 * u * (np.abs(q64) @ np.abs(k64.T))
    bound = 7.1 * u * (np.abs(q64 @ k64.T) + s_bound) @ np.abs(v64) + s_bound @ np.abs(v64)
    assert np.all(np.abs(found.astype(np.float64) - (q64 @ k64.T) @ v64) <= bound)


def test_measure_alternating_takes_turns():
    """Rows of a group are called in turn, the same number of times, warm-up first."""
    calls: list[str] = []
    rivals = [(n, (lambda n=n: calls.append(n)), "n/a") for n in ("a", "b")]
    rows = timing.measure_alternating(3, rivals, runs=4, load_wait_s=None)
    assert calls == ["a", "b"] + ["a", "b", "b", "a"] * 2  # warm-ups, then 4 rounds
    assert [(r.name, r.runs, r.L, len(r.times)) for r in rows] == [("a", 4, 3, 4), ("b", 4, 3, 4)]
    calls.clear()
    three = [(n, (lambda n=n: calls.append(n)), "n/a") for n in ("a", "b", "c")]
    timing.measure_alternating(3, three, runs=3, load_wait_s=None)
    assert calls[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # each first once
    assert [r.runs for r in timing.measure_alternating(3, rivals, None, load_wait_s=None)] == [
        timing.MAX_REPEATS
    ] * 2  # instant calls never fill the time budget: capped
    calls.clear()
    four = [(n, (lambda n=n: calls.append(n)), "n/a") for n in "abcd"]
    timing.measure_alternating(3, four, runs=4, load_wait_s=None)
    orders = ["".join("abcd"[i] for i in order) for order in timing.balanced_orders(4)]
    assert "".join(calls[4:]) == "".join(orders) == "abdcbcadcdbadacb"  # not a rotation
    # stopping by the budget or the cap waits for the end of a cycle (6 orders for 3 rows)
    capped = timing.measure_alternating(
        3, three, None, load_wait_s=None, min_rounds=1, max_rounds=7
    )
    assert [r.runs for r in capped] == [12] * 3


@pytest.mark.parametrize("n", range(1, 9))
def test_balanced_orders_put_every_row_everywhere_and_after_every_other_row(n):
    """A Williams design: each row takes each place, and directly follows each other row,
    equally often over one cycle (a rotation fails the second for n = 4: C follows B 3 times)."""
    from collections import Counter

    orders = timing.balanced_orders(n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    places = Counter((place, row) for order in orders for place, row in enumerate(order))
    assert set(places.values()) == {len(orders) // n} and len(places) == n * n
    follows = Counter(pair for order in orders for pair in zip(order, order[1:]))
    if n > 1:
        assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1, follows


def test_bench_goal_pairs_are_timed_alternately(monkeypatch):
    """Each goal's rows form one interleaved group at its size (same rounds, same load)."""
    assert groups.goal_groups(4096, "cpu") == (
        ("numpy chunked", "torch SDPA (cpu)", "torch backend fast (cpu)", contenders.NOISE_ROW),
    )
    assert groups.goal_groups(16384, "cpu") == (("numpy chunked", "torch SDPA (cpu)"),)
    assert groups.goal_groups(256, "cpu") == (groups.PYTHON_PAIR, PYTHON_BACKWARD_PAIR)
    assert groups.goal_groups(8, "cpu") == ()
    at_16 = {16: (("numpy chunked", "torch SDPA (cpu)", "torch backend fast (cpu)"),)}
    monkeypatch.setattr(groups, "goal_groups", lambda L, device: at_16.get(L, ()))
    rows = bench.run_table((16,), repeats=2, progress=False, load_wait_s=None)
    by_name = {r.name: r for r in rows}
    group = [by_name[n] for n in at_16[16][0]]
    assert all(r.runs == 2 and len(r.times) == 2 for r in group)
    names = [r.name for r in rows]  # in the table's order, not the order measured
    assert names.index(contenders.FLOOR_ROW) == names.index("numpy chunked") + 1


def test_python_kernel_limit_computes_the_two_products():
    """The pure-Python row really does q @ k^T and weights @ v (fsum: correctly rounded)."""
    from scratch.bench.contenders import python_kernel_limit

    rng = np.random.default_rng(4)
    q, k, v, w = (rng.standard_normal(s) for s in [(3, 5), (4, 5), (4, 2), (3, 4)])
    scores, output = python_kernel_limit(q.tolist(), k.tolist(), v.tolist(), w.tolist())
    u = UNIT_ROUNDOFF["float64"]
    assert np.all(np.abs(np.array(scores) - q @ k.T) <= 7 * u * (np.abs(q) @ np.abs(k.T)))
    assert np.all(np.abs(np.array(output) - w @ v) <= 6 * u * (np.abs(w) @ np.abs(v)))


def test_a_size_given_twice_is_measured_once():
    """--sizes 16,8,16: L = 16 and 8, each once (the repeat was measured twice before)."""
    parser = argparse.ArgumentParser()
    args = argparse.Namespace(sizes="16,8,16", quick=False)
    assert cli._sizes(parser, args) == (16, 8)


def test_only_a_plugins_goals_refuses_sizes_and_quick(capsys):
    """--only NAME measures that plugin's goals alone: --sizes or --quick beside it is an
    error, said so; so is a name no loaded plugin has (here: no --plugin at all)."""
    for extra in (["--sizes", "8"], ["--quick"]):
        with pytest.raises(SystemExit, match="2"):
            bench.main(["--plugin", __name__, "--only", "test-goals", *extra])
        assert "--only test-goals: measures a test's goals; leave out" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        bench.main(["--only", "window"])
    err = capsys.readouterr().err
    assert "--only window: no plugin's goals of that name (loaded: none)" in err
    assert "--plugin gui.app.bench_window" in err


# ---------------------------------------------------------------- plugins

_MEASURED: list[str] = []


def _test_goals() -> list[plugins.Goal]:
    _MEASURED.append("test-goals")
    return [("a test's goal", "PASS", "1.00x")]


BENCH_GOALS = (plugins.GoalSet("test-goals", "a test's goals", _test_goals),)  # this module


def test_a_plugin_module_adds_its_goals_by_name(capsys):
    """--plugin MODULE reads MODULE.BENCH_GOALS; --only runs them alone, after the host line's
    parts; without --only they follow the table and are measured only in a full run."""
    _MEASURED.clear()
    assert cli.main(["--plugin", __name__, "--only", "test-goals", "--markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "- PASS: a test's goal (1.00x)" and out[1].startswith("Host: ")
    assert _MEASURED == ["test-goals"]
    lines = plugins.goal_lines(plugins.load(__name__), full=False)
    assert lines == [
        (
            "a test's goals",
            "not measured",
            "in a full run or with --only test-goals, not with --quick or --sizes",
        )
    ]
    assert _MEASURED == ["test-goals"]  # not measured again
    none = plugins.goal_lines((), full=True)
    assert none[0][1] == "not measured" and "--plugin gui.app.bench_window" in none[0][2]


def test_a_plugin_that_cannot_be_loaded_is_refused_by_name(capsys):
    """A module that cannot be imported, or has no BENCH_GOALS of GoalSets: a usage error
    naming --plugin and the module."""
    with pytest.raises(ValueError, match=r"--plugin no_such_module_here: cannot be imported"):
        plugins.load("no_such_module_here")
    with pytest.raises(ValueError, match=r"--plugin scratch.ops.softmax: expected BENCH_GOALS, a "):
        plugins.load("scratch.ops.softmax")
    with pytest.raises(SystemExit, match="2"):
        bench.main(["--plugin", "scratch.ops.softmax", "--quick"])
    assert "found NoneType" in capsys.readouterr().err


def test_the_windows_goals_are_a_plugin_of_the_app():
    """gui.app.bench_window declares the window's goals; `make bench` passes it (PyQt6 needed)."""
    pytest.importorskip("PyQt6")
    window, views = plugins.load("gui.app.bench_window")
    assert (window.name, window.what) == ("window", "the window's recompute at 4096 tokens")
    assert (
        views.name == "views"
    )  # the pipeline view's step change and hover (gui/views/bench_views.py)
    from pathlib import Path

    makefile = (Path(__file__).parent.parent / "Makefile").read_text()
    assert "-m scratch.bench --plugin gui.app.bench_window" in makefile


def test_a_ratio_that_rounds_onto_the_goal_shows_its_unrounded_value():
    """0.9496 prints as 0.950x at three places: the FAIL line says the number it judged."""
    from scratch.bench import Row, goals

    def row(name, t):
        return Row(4096, name, t, 3, None, "n/a", times=[t, t, t], load=0.0)

    found = goals([row("numpy chunked", 1.0 / 0.9496), row("torch SDPA (cpu)", 1.0)], True)
    line = next(g for g in found if g[0].startswith("numpy output-only >= 0.95x"))
    assert line[1] == "FAIL" and "0.950x at the 10th" in line[2]
    assert "unrounded 0.949600x" in line[2]

"""scratch.bench.flex_goal (issue 21 item 10): its rows, cell counts and goal lines on tiny sizes.

No timing is asserted (speed goes to the benchmark); the goal judgement is checked on rows with
made-up times, at each goal's boundary.
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("torch")

from scratch.bench import Row, flex_goal, plugins  # noqa: E402


def test_the_rows_run_at_a_tiny_size_and_agree():
    """L = 256, a window of 32 keys, torch eager: three rows that compute the same thing where
    they should (the window row equals torch's FlexAttention), cells counted."""
    rivals, cells, causal, why = flex_goal.flex_rows(256, 32, compile=False)
    names = [name for name, _, _ in rivals]
    assert names == [
        "numpy flex chunked, window 32",
        "numpy chunked, full causal",
        "torch FlexAttention eager (cpu)",
    ]
    assert why.startswith("eager")
    window, _, torch_row = (fn() for _, fn, _ in rivals)
    gap = np.abs(window - torch_row.numpy()).max()
    assert gap < 1e-5, gap  # float32, 32 keys per row
    # tiles of 128, window 32: block 0 sees key block 0, block 1 key blocks 0 and 1; one chunk
    # of 256 rows (not a band: the blocks see 1 and 2 key blocks) computes 256 x 256 cells,
    # and rows the fast pass hands to the safe pass again (a first row whose one score is < 0)
    computed, listed = cells
    assert listed == 3 * 128 * 128 and causal == 256 * 256
    assert listed <= computed <= 256 * 256 + 8 * 128


def test_measure_flex_gives_the_goal_lines_without_timing_them():
    goals = flex_goal.measure_flex(256, 32, compile=False, runs=1, load_wait_s=None)
    assert [status in ("PASS", "FAIL") for _, status, _ in goals[:2]] == [True, True]
    assert "fraction of its cells computed" in goals[0][0] and "1.5x" in goals[0][0]
    assert "1.25x the time of torch FlexAttention eager" in goals[1][0]
    assert [status for _, status, _ in goals[2:]] == ["info"] * 3


def rows(window_t: float, causal_t: float, torch_t: float) -> list[Row]:
    def row(name, t):
        return Row(16384, name, t, 3, None, "n/a", times=[t * 2, t, t], load=0.5)

    return [row("w", window_t), row("c", causal_t), row("torch FlexAttention compiled", torch_t)]


def test_the_goals_pass_and_fail_at_their_boundaries():
    """cells / causal = 0.1: the window row may take 1.5 x 0.1 x the causal time, and 1.25x
    torch's; a hair more fails."""
    judge = flex_goal.judge
    ok = judge(rows(0.15, 1.0, 0.12), (10, 9), 100, "why", 16384, 256)
    assert [s for _, s, _ in ok[:2]] == ["PASS", "PASS"]
    bad = judge(rows(0.1501, 1.0, 0.12), (10, 9), 100, "why", 16384, 256)
    assert [s for _, s, _ in bad[:2]] == ["FAIL", "FAIL"]


def test_the_goals_are_a_plugin_never_in_the_default_table():
    (goal_set,) = plugins.load("scratch.bench.flex_goal")
    assert goal_set.name == "flex" and "16384" in goal_set.what
    line = plugins.goal_lines((goal_set,), full=False)[0]
    assert line[1] == "not measured"


@pytest.mark.parametrize("L", [256, 700, 1024, 2048, 2500])
def test_causal_cells_are_the_cells_the_causal_kernel_computes(L, monkeypatch):
    """The goal's reference counts what numpy_chunked's fast pass really computes: every tile's
    scores are counted as the kernel asks for them (rows skipped above the diagonal included);
    rows the safe pass redoes (found: row 0, whose one score may be negative) add a cell or so."""
    from scratch.backends import get, numpy_chunked

    seen = []
    scores = numpy_chunked._Tiles.scores

    def counting(self, i0, i1, j0, j1):
        seen.append((i1 - i0) * (j1 - j0))
        return scores(self, i0, i1, j0, j1)

    monkeypatch.setattr(numpy_chunked._Tiles, "scores", counting)
    rng = np.random.default_rng(L)
    q, k, v = (rng.standard_normal((1, 1, L, 16), dtype=np.float32) for _ in range(3))
    get("numpy").scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=False)
    extra = sum(seen) - flex_goal.causal_cells(L)
    assert 0 <= extra <= 16, extra  # the safe pass redoes a top row or two (row 0: one cell)

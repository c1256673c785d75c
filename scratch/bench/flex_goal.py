"""The NumPy flex kernel on a sliding window of 256 keys at L = 16384: a bench plugin.

`python -m scratch.bench --plugin scratch.bench.flex_goal --only flex` (issue 21 item 10; the rows
and how cells are counted: docs/notes/bench.md). Goals: the window call <= 1.5x (the full causal
time x the fraction of the causal kernel's cells the window kernel computes), and <= 1.25x
torch's FlexAttention's time.
"""

from __future__ import annotations

import warnings

from scratch.bench.host import LOAD_WAIT_S
from scratch.bench.plugins import Goal, GoalSet
from scratch.bench.row import Row, pair_ratio, reference_lines, verdict

FLEX_L = 16384
WINDOW = 256  # keys each query sees: SlidingWindow(WINDOW - 1, 0)
E = 64
TILE_GOAL = 1.5
TORCH_GOAL = 1.25
WINDOW_ROW = "numpy flex chunked, window"
CAUSAL_ROW = "numpy chunked, full causal"


def causal_cells(L: int) -> int:
    """Score cells numpy_chunked's fast pass computes for L x L causal: chunk i0:i1 visits key
    blocks up to key i1 - 1; a block crossing the diagonal starts at its first row that sees
    one of its keys (row j0: the rows above see none of them)."""
    from scratch.backends.numpy_chunked import KEY_BLOCK, PARALLEL_MIN, QUERY_CHUNK
    from scratch.backends.numpy_threads import cores
    from scratch.variants import Causal

    chunk, block = min(QUERY_CHUNK, L), min(KEY_BLOCK, L)
    if cores() > 1 and L * L >= PARALLEL_MIN:  # the kernel's own rule: a task per core at least
        chunk = min(chunk, -(-L // cores()))
    causal, cells = Causal.aligned("top-left", L, L), 0
    for i0 in range(0, L, chunk):
        i1 = min(L, i0 + chunk)
        for j0 in range(0, causal.keys_seen(i0, i1, L), block):
            j1 = min(i1, j0 + block)
            whole = causal.sees_whole_tile(range(i0, i1), range(j0, j1))
            cells += (i1 - (i0 if whole else max(i0, causal.first_query(j0)))) * (j1 - j0)
    return cells


def torch_flex(q, k, v, variant, L: int, compile: bool):
    """(row name, call, why) for torch's FlexAttention on the variant's torch array form."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, q_idx, kv_idx):
        return variant.mask_mod_array(b, h, q_idx, kv_idx, torch)

    block_mask = create_block_mask(mask_mod, 1, 1, L, L, device="cpu")
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    why = "eager: compiling not asked"
    if compile:
        try:
            compiled = torch.compile(flex_attention)
            compiled(tq, tk, tv, block_mask=block_mask)  # compiles now, outside the timing
            return (
                "torch FlexAttention compiled (cpu)",
                (lambda: compiled(tq, tk, tv, block_mask=block_mask)),
                "torch.compile works here",
            )
        except Exception as exc:  # any failure to compile: measure eager, and say why
            why = f"eager: torch.compile failed ({type(exc).__name__}: {str(exc)[:120]})"

    def eager():
        with warnings.catch_warnings():  # "called without torch.compile()": known, and said
            warnings.simplefilter("ignore")
            return flex_attention(tq, tk, tv, block_mask=block_mask)

    return "torch FlexAttention eager (cpu)", eager, why


def flex_rows(L: int = FLEX_L, window: int = WINDOW, compile: bool = True):
    """(rivals for measure_alternating, window cells, causal cells, why torch runs as it does)."""
    import numpy as np

    from scratch.backends import get, numpy_flex
    from scratch.core.options import FlexOptions
    from scratch.variants import SlidingWindow

    rng = np.random.default_rng(L)
    q, k, v = (rng.standard_normal((1, 1, L, E), dtype=np.float32) for _ in range(3))
    variant = SlidingWindow(window - 1, 0)
    block_mask = numpy_flex.create_block_mask(variant.mask_mod, 1, 1, L, L)
    problem = numpy_flex.FlexProblem(q, k, v, FlexOptions(block_mask=block_mask))
    problem.plan.record = []
    numpy_flex.chunked(problem, None, numpy_flex.KEY_BLOCK)  # untimed: count the cells
    cells = sum((i1 - i0) * (j1 - j0) for *_, i0, i1, j0, j1 in problem.plan.record)
    bq, bk = block_mask.block_size
    listed = sum(  # the cells of the tiles the block mask lists (what the kernel must compute)
        (min(L, qb * bq + bq) - qb * bq) * (min(L, kb * bk + bk) - kb * bk)
        for qb, tiles in enumerate(block_mask.kv_blocks[0][0])
        for kb, _ in tiles
    )
    numpy_be = get("numpy")
    rivals = [
        (
            f"{WINDOW_ROW} {window}",
            lambda: numpy_flex.flex_attention(q, k, v, block_mask=block_mask),
            "n/a",
        ),
        (
            CAUSAL_ROW,
            lambda: numpy_be.scaled_dot_product_attention(
                q, k, v, is_causal=True, need_weights=False
            ),
            "n/a",
        ),
    ]
    name, call, why = torch_flex(q, k, v, variant, L, compile)
    rivals.append((name, call, "n/a"))
    return rivals, (cells, listed), causal_cells(L), why


def judge(rows: list[Row], cells, causal: int, why: str, L: int, window: int) -> list[Goal]:
    """The two goal lines from the three rows (window, causal, torch); cells = (computed by the
    window kernel, in the block mask's tiles: what it must compute)."""
    win, full, torch_row = rows
    cells, listed = cells
    fraction = cells / causal
    work = pair_ratio(full.scaled(fraction, "causal x fraction"), win)  # per round too
    tiles = (
        f"numpy flex chunked, window of {window} keys at L = {L}: <= {TILE_GOAL:g}x the full "
        f"causal chunked time x the fraction of its cells computed ({cells} / {causal} = "
        f"{fraction:.4f}; the block mask's tiles hold {listed} cells)"
    )
    vs = (
        f"numpy flex chunked, window of {window} keys at L = {L}: <= {TORCH_GOAL:g}x the time "
        f"of {torch_row.name} ({why})"
    )
    return [
        verdict(tiles, work, lambda r: r <= TILE_GOAL, "x the time"),
        verdict(vs, pair_ratio(torch_row, win), lambda r: r <= TORCH_GOAL, "x the time"),
        *reference_lines(rows, f" at L = {L}"),
    ]


def measure_flex(
    L: int = FLEX_L,
    window: int = WINDOW,
    compile: bool = True,
    runs: int | None = None,
    load_wait_s: float | None = LOAD_WAIT_S,
) -> list[Goal]:
    """Time the three rows interleaved and judge both goals."""
    from scratch.bench.timing import measure_alternating

    rivals, cells, causal, why = flex_rows(L, window, compile)
    rows = measure_alternating(
        L, rivals, runs, load_wait_s, budget_s=6.0, min_rounds=12, max_rounds=24
    )
    return judge(rows, cells, causal, why, L, window)


BENCH_GOALS = (
    GoalSet(
        "flex",
        f"numpy flex chunked on a window of {WINDOW} keys at L = {FLEX_L} (issue 21 item 10)",
        measure_flex,
    ),
)

__all__ = ["BENCH_GOALS", "causal_cells", "flex_rows", "judge", "measure_flex"]

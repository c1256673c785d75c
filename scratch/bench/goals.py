"""The project's speed and memory goals, judged from the table's rows."""

from __future__ import annotations

from scratch.bench.contenders import NOISE_L, NOISE_ROW
from scratch.bench.groups import PYTHON_PAIR
from scratch.bench.host import has_avx512
from scratch.bench.memory import GIB, format_bytes
from scratch.bench.pure_backward import GOAL as BACKWARD_GOAL
from scratch.bench.pure_backward import PYTHON_BACKWARD_PAIR
from scratch.bench.row import Row, pair_ratio


def _find(rows: list[Row], L: int, name: str) -> Row | None:
    """The row called `name` at size L, if it was measured."""
    return next((r for r in rows if r.L == L and r.name == name), None)


# Goals judged by the median of per-round ratios instead of the 10th percentiles: rivals that
# run alike (one thread of plain Python each: outside load or steal slows both the same way,
# unlike torch's OpenMP kernel beside NumPy's thread pool) and whose calls are long (0.4-0.6 s:
# this machine's speed drifts within seconds, and a round's two calls see the same drift).
# Seven idle runs of 21 rounds: 10th percentiles 0.87-1.13x, best vs best 0.85-1.25x, median
# of per-round ratios 0.92-1.01x.
PAIRED_MEDIAN_GOALS = (PYTHON_PAIR, PYTHON_BACKWARD_PAIR)


def numpy_goals(avx512: bool) -> dict[int, float]:
    """The NumPy output-only kernel's goals (x torch SDPA's speed) by L, for this kind of host."""
    return {4096: 0.95, 16384: 1.0} if avx512 else {4096: 0.75, 16384: 0.75}


def goals(rows: list[Row], avx512: bool | None = None) -> list[tuple[str, str, str]]:
    """(goal, PASS/FAIL/not measured, the measured numbers) for each goal of the project.

    Ratio goals compare the rows' 10th percentile times: the runs least disturbed by other
    processes (under load torch's OpenMP kernel slows far more than NumPy, so medians would
    flatter NumPy), yet not one lucky run (see stats.GOAL_QUANTILE); the plain-Python
    pair is judged by the median of its per-round ratios (see PAIRED_MEDIAN_GOALS)."""
    if avx512 is None:
        avx512 = has_avx512()
    out = []

    def ratio_goal(goal, L, a_name, b_name, passes, need, invert=False):
        a, b = _find(rows, L, a_name), _find(rows, L, b_name)
        if not (a and b):
            out.append((goal, "not measured", need))
            return
        r = pair_ratio(b, a) if invert else pair_ratio(a, b)
        unit = "x the time" if invert else "x"
        paired = (a_name, b_name) in PAIRED_MEDIAN_GOALS and r.median is not None
        judged = r.median if paired else r.p10
        detail = r.text(unit, paired)
        if passes(round(judged, 3)) != passes(judged):  # the 3 printed places meet the goal
            detail += f"; unrounded {judged:.6f}{unit}"  # the verdict's own number
        out.append((goal, "PASS" if passes(judged) else "FAIL", detail))

    ratio_goal(
        "ground truth >= 0.9x the pure-Python kernel limit at L = 256",
        256,
        *PYTHON_PAIR,
        lambda r: r >= 0.9,
        "needs L = 256",
    )
    ratio_goal(
        f"ground truth backward >= {BACKWARD_GOAL:g}x the pure-Python backward kernel limit at "
        f"L = 256",
        256,
        *PYTHON_BACKWARD_PAIR,
        lambda r: r >= BACKWARD_GOAL,
        "needs L = 256",
    )
    host = "AVX-512 host" if avx512 else "host without AVX-512"
    for L, target in numpy_goals(avx512).items():
        ratio_goal(
            f"numpy output-only >= {target:g}x fused torch SDPA (4-D input) at L = {L} ({host})",
            L,
            "numpy chunked",
            "torch SDPA (cpu)",
            lambda r, target=target: r >= target,
            f"needs L = {L} and torch",
        )
    plain, chunked = (
        _find(rows, 4096, "torch SDPA, 2-D input (cpu)"),
        _find(rows, 4096, "numpy chunked"),
    )
    if chunked and plain:
        out.append(
            (
                "(reference, no goal) numpy output-only vs torch SDPA on 2-D (L, E) input "
                "(torch's unfused path) at L = 4096",
                "info",
                f"{plain.best / chunked.best:.2f}x best vs best",
            )
        )
    noise, chunked = _find(rows, NOISE_L, NOISE_ROW), _find(rows, NOISE_L, "numpy chunked")
    if noise and chunked:
        out.append(
            (
                f"(reference, no goal) noise floor: the numpy chunked call against itself, timed "
                f"as another row of the group at L = {NOISE_L} (1.000x if timing were exact)",
                "info",
                pair_ratio(noise, chunked).text(),
            )
        )
    ratio_goal(
        "torch fast path within 1.05x of bare SDPA's time at L = 4096",
        4096,
        "torch backend fast (cpu)",
        "torch SDPA (cpu)",
        lambda r: r <= 1.05,
        "needs L = 4096 and torch",
        invert=True,
    )
    big = _find(rows, 32768, "numpy chunked")
    if big and big.peak_bytes is not None:
        out.append(
            (
                "numpy at L = 32768: peak memory growth < 1 GiB",
                "PASS" if big.peak_bytes < GIB else "FAIL",
                format_bytes(big.peak_bytes),
            )
        )
    else:
        out.append(
            ("numpy at L = 32768: peak memory growth < 1 GiB", "not measured", "needs L = 32768")
        )
    return out

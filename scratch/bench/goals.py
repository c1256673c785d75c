"""The project's speed and memory goals, judged from the table's rows."""

from __future__ import annotations

from scratch.bench.contenders import NOISE_L, NOISE_ROW
from scratch.bench.groups import PYTHON_PAIR
from scratch.bench.host import has_avx512
from scratch.bench.memory import GIB, format_bytes
from scratch.bench.pure_backward import GOAL as BACKWARD_GOAL
from scratch.bench.pure_backward import PYTHON_BACKWARD_PAIR
from scratch.bench.row import Goal, Row, pair_ratio, verdict

# judged by the median of per-round ratios, not the 10th percentiles: one thread of plain Python
# each, long calls (docs/notes/bench.md)
PAIRED_MEDIAN_GOALS = (PYTHON_PAIR, PYTHON_BACKWARD_PAIR)


def numpy_goals(avx512: bool) -> dict[int, float]:
    """The NumPy output-only kernel's goals (x torch SDPA's speed) by L, for this kind of host."""
    return {4096: 0.95, 16384: 1.0} if avx512 else {4096: 0.75, 16384: 0.75}


def goals(rows: list[Row], avx512: bool | None = None) -> list[Goal]:
    """(goal, PASS/FAIL/not measured, the measured numbers) for each goal of the project.

    Ratio goals compare the rows' 10th percentile times (row.GOAL_QUANTILE); the plain-Python
    pairs are judged by the median of their per-round ratios (PAIRED_MEDIAN_GOALS)."""
    if avx512 is None:
        avx512 = has_avx512()
    found = {(r.L, r.name): r for r in reversed(rows)}  # the first of a name and size
    out: list[Goal] = []

    def ratio_goal(goal, L, a_name, b_name, passes, need, invert=False):
        a, b = found.get((L, a_name)), found.get((L, b_name))
        if not (a and b):
            out.append((goal, "not measured", need))
            return
        ratio = pair_ratio(b, a) if invert else pair_ratio(a, b)
        paired = (a_name, b_name) in PAIRED_MEDIAN_GOALS
        out.append(verdict(goal, ratio, passes, "x the time" if invert else "x", paired))

    def info(goal, L, a_name, b_name, detail):
        a, b = found.get((L, a_name)), found.get((L, b_name))
        if a and b:
            out.append((f"(reference, no goal) {goal}", "info", detail(a, b)))

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
    info(
        "numpy output-only vs torch SDPA on 2-D (L, E) input (torch's unfused path) at L = 4096",
        4096,
        "numpy chunked",
        "torch SDPA, 2-D input (cpu)",
        lambda chunked, plain: f"{plain.best / chunked.best:.2f}x best vs best",
    )
    info(
        f"noise floor: the numpy chunked call against itself, timed as another row of the group "
        f"at L = {NOISE_L} (1.000x if timing were exact)",
        NOISE_L,
        NOISE_ROW,
        "numpy chunked",
        lambda noise, chunked: pair_ratio(noise, chunked).text(),
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
    big = found.get((32768, "numpy chunked"))
    memory = "numpy at L = 32768: peak memory growth < 1 GiB"
    if big and big.peak_bytes is not None:
        passed = "PASS" if big.peak_bytes < GIB else "FAIL"
        out.append((memory, passed, format_bytes(big.peak_bytes)))
    else:
        out.append((memory, "not measured", "needs L = 32768"))
    return out

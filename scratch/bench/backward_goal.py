"""A training step's attention (forward with lse + backward) in NumPy against torch: a bench plugin.

`python -m scratch.bench --plugin scratch.bench.backward_goal --only backward` (issue 24 items 1,
2, 5; the rows and goals: docs/notes/bench.md). Goals: numpy >= 1.3x torch's speed; within 1.4x
of the floor, 3.5x the chunked forward's time; forward_with_lse <= 1.05x the chunked forward's.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.bench import host
from scratch.bench.host import LOAD_WAIT_S
from scratch.bench.memory import format_bytes, peak_growth
from scratch.bench.plugins import Goal, GoalSet
from scratch.bench.row import Row, pair_ratio, reference_lines, verdict
from scratch.bench.timing import measure, measure_alternating

SIZES = (4096, 16384)
MEMORY_L = 32768
E = 64
TORCH_GOAL = 1.3  # numpy at least this many times torch's speed
FLOOR_FACTOR = 3.5  # forward + backward's floor in units of the forward's time
FLOOR_GOAL = 1.4  # numpy within this factor of the floor
LSE_GOAL = 1.05  # forward_with_lse's time over the chunked forward's
MEMORY_GOAL = 256 * 2**20  # bytes: an (L, S) bool keep mask alone would be 1 GiB at 32768
NUMPY_ROW = "numpy forward_with_lse + tiled backward"
TORCH_ROW = "torch fused SDPA + autograd backward (cpu)"
FORWARD_ROW = "numpy chunked forward (no lse)"
LSE_ROW = "numpy forward_with_lse"
NOISE_ROW = "numpy forward_with_lse + tiled backward, again (noise floor)"
PRODUCTS = 7  # forward q k^T, P v; backward q k^T again, dO v^T, P^T dO, dS k, dS^T q
EXPS = 2  # the forward's exp of every score and the backward's again


@dataclass
class HostLimit:
    """What this host can do at best: float32 GEMM on every core, exp2 on one."""

    gflops: float  # float32 matmul, all cores (OpenBLAS's own threads), n^3, best of 5
    n: int  # the square matmul's size
    exp_ns: float  # exp2 of one float32 score, one thread, best of 50 on a (512, 256) tile
    threads: int

    def seconds(self, L: int, E: int = E) -> float:
        """The step's products and exps at these rates, perfectly shared over the threads."""
        products = PRODUCTS * 2 * L * L * E / (self.gflops * 1e9)
        return products + EXPS * L * L * self.exp_ns * 1e-9 / self.threads


def measure_host_limit(n: int = 2048) -> HostLimit:
    """The host's float32 GEMM rate (n^3 on all cores) and exp2's time per score (one core)."""
    import numpy as np

    if n < 1:
        raise ValueError(f"n: expected a positive matrix size, found {n}")

    from scratch.backends.numpy_threads import cores

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    c = np.empty((n, n), np.float32)
    tile = rng.standard_normal((512, 256), dtype=np.float32)  # scores in exp2's range
    spare = np.empty_like(tile)

    gemm = min(measure(lambda: np.matmul(a, b, out=c), "n/a", 5)[0])  # after a warm-up call
    exp = min(measure(lambda: np.exp2(tile, out=spare), "n/a", 50)[0])
    return HostLimit(2 * n**3 / gemm / 1e9, n, exp / tile.size * 1e9, cores())


def limit_line(limit: HostLimit, step: Row, torch_row: Row, L: int) -> Goal:
    """The host's limit for the step at size L (no mask) against what the torch goal needs."""
    floor, need = limit.seconds(L), torch_row.p10 / TORCH_GOAL
    return (
        f"(host limit, no goal) the step's {PRODUCTS} products and {EXPS} exps per score at "
        f"this host's best rates, float32 (1, 1, {L}, {E}), no mask",
        "info",
        f"{floor * 1e3:.1f} ms: {PRODUCTS} x 2 L^2 E flops at {limit.gflops:.0f} GFLOP/s (float32 "
        f"matmul {limit.n}^3 with {limit.threads} cores, best of 5) and {EXPS} L^2 exp2 at "
        f"{limit.exp_ns:.3f} ns each on each core; the torch goal needs a step of at most "
        f"torch's 10th percentile / {TORCH_GOAL:g} = {need * 1e3:.1f} ms, "
        f"{need / floor:.3f}x that limit; the numpy step's 10th percentile is "
        f"{step.p10 * 1e3:.1f} ms, {step.p10 / floor:.3f}x it",
    )


def inputs(L: int):
    """Seeded float32 q, k, v, dO of shape (1, 1, L, E)."""
    import numpy as np

    rng = np.random.default_rng(L)
    return tuple(rng.standard_normal((1, 1, L, E), dtype=np.float32) for _ in range(4))


def numpy_step(q, k, v, g, causal: bool):
    """One training step's attention in NumPy: forward_with_lse, then the tiled backward."""
    from scratch.backends import numpy_backward as nb

    output, lse = nb.forward_with_lse(q, k, v, is_causal=causal)
    return nb.scaled_dot_product_attention_backward(
        q, k, v, g, is_causal=causal, kernel="tiled", output=output, lse=lse
    )


def backward_rows(L: int, causal: bool):
    """The five rivals for measure_alternating at size L."""
    import torch

    from scratch.backends import get
    from scratch.backends import numpy_backward as nb

    q, k, v, g = inputs(L)
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    tg = torch.from_numpy(g)
    forward = get("numpy").scaled_dot_product_attention

    def torch_step():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        return torch.autograd.grad(out, (tq, tk, tv), tg)

    return [
        (NUMPY_ROW, lambda: numpy_step(q, k, v, g, causal), "n/a"),
        (TORCH_ROW, torch_step, "n/a"),
        (FORWARD_ROW, lambda: forward(q, k, v, is_causal=causal, need_weights=False), "n/a"),
        (LSE_ROW, lambda: nb.forward_with_lse(q, k, v, is_causal=causal), "n/a"),
        (NOISE_ROW, lambda: numpy_step(q, k, v, g, causal), "n/a"),
    ]


def judge(rows: list[Row], L: int, causal: bool, limit: HostLimit | None = None) -> list[Goal]:
    """The goal lines from the five rows (numpy, torch, chunked forward, forward_with_lse, numpy
    again), and without a mask the host's limit when given."""
    step, torch_row, forward, with_lse, again = rows
    kind = "causal" if causal else "no mask"
    where = f"float32 (1, 1, {L}, {E}), {kind}"
    out = [
        verdict(
            f"numpy forward_with_lse + tiled backward >= {TORCH_GOAL:g}x the speed of torch's "
            f"fused SDPA + autograd backward, {where}",
            pair_ratio(step, torch_row),  # torch's time / numpy's: numpy's speed
            lambda r: r >= TORCH_GOAL,
        ),
        verdict(
            f"numpy forward_with_lse + tiled backward within {FLOOR_GOAL:g}x of the floor "
            f"({FLOOR_FACTOR:g}x the chunked forward's time), {where}",
            pair_ratio(forward.scaled(FLOOR_FACTOR, "floor"), step),  # numpy's time / the floor's
            lambda r: r <= FLOOR_GOAL,
            "x the floor's time",
        ),
        verdict(
            f"forward_with_lse <= {LSE_GOAL:g}x the chunked forward's time (the lse for free), "
            f"{where}",
            pair_ratio(forward, with_lse),
            lambda r: r <= LSE_GOAL,
            "x the time",
        ),
        (
            f"(noise floor, no goal) the numpy step against itself, {where}",
            "info",
            pair_ratio(step, again).text("x the time"),
        ),
    ]
    if limit is not None and not causal:
        out.append(limit_line(limit, step, torch_row, L))
    out += reference_lines(rows, f", {where}")
    return out


def memory_goal(L: int = MEMORY_L) -> Goal:
    """Peak memory growth of one causal forward_with_lse + tiled backward at size L."""
    q, k, v, g = inputs(L)
    peak = peak_growth(lambda: numpy_step(q, k, v, g, True), "tracemalloc")
    given = 4 * q.nbytes  # q, k, v, dO themselves
    return (
        f"numpy forward_with_lse + tiled backward at L = {L} (causal): peak memory growth "
        f"< {format_bytes(MEMORY_GOAL)} (no (L, S) array; the inputs are {format_bytes(given)})",
        "PASS" if peak < MEMORY_GOAL else "FAIL",
        format_bytes(peak),
    )


def measure_backward(
    sizes: tuple[int, ...] = SIZES,
    memory_L: int | None = MEMORY_L,
    runs: int | None = None,
    load_wait_s: float | None = LOAD_WAIT_S,
) -> list[Goal]:
    """Time the five rows interleaved at each size, causal or not, judge, then the memory."""
    out: list[Goal] = []
    if load_wait_s is not None:
        host.wait_for_idle(load_wait_s)
    limit = measure_host_limit()
    for L in sizes:
        for causal in (False, True):
            rows = measure_alternating(
                L,
                backward_rows(L, causal),
                runs,
                load_wait_s,
                budget_s=2.0,
                min_rounds=4,
                max_rounds=12,
            )
            out.extend(judge(rows, L, causal, limit))
    if memory_L is not None:
        out.append(memory_goal(memory_L))
    return out


BENCH_GOALS = (
    GoalSet(
        "backward",
        f"numpy forward with lse + tiled backward against torch and the floor at L = "
        f"{', '.join(map(str, SIZES))} (issue 24 items 1-2)",
        measure_backward,
    ),
)

__all__ = [
    "BENCH_GOALS",
    "HostLimit",
    "backward_rows",
    "judge",
    "measure_backward",
    "measure_host_limit",
    "memory_goal",
]

"""The checker's own speed: scratch.check(cases="large") and check_backward on NumPy kernels."""

from __future__ import annotations

import os

from scratch.bench.timing import best_of

LARGE_GOAL_S = 10.0  # check(numpy chunked kernel, cases="large"): three 4096-token cases
BACKWARD_GOAL_S = 5.0  # check_backward(numpy backend's backward), the standard cases


def _line(goal: str, limit: float | None, timed: tuple, runs: int) -> tuple[str, str, str]:
    """(goal, PASS/FAIL or info, the numbers): best wall time, its CPU time, load, verdict."""
    wall, cpu, report = timed
    status = "info" if limit is None else ("PASS" if wall < limit else "FAIL")
    verdict = getattr(report, "verdict", "no report")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        goal,
        status,
        f"{wall:.2f} s wall, {cpu:.2f} s CPU (all threads), best of {runs}; load average "
        f"{load:.1f}; the check said: {verdict}",
    )


def checker_timing(runs: int = 2, cases: str = "large") -> list[tuple[str, str, str]]:
    """Goal lines for the checker's speed; `cases` other than 'large' (a smoke test) gives info
    lines for that case set instead of the goal."""
    try:
        import scratch
        from scratch import backends

        numpy_be = backends.get("numpy")
    except (ImportError, KeyError, ValueError) as exc:
        return [("the checker's speed", "not measured", f"needs numpy ({exc})")]

    def kernel(q, k, v, **keywords):
        return numpy_be.scaled_dot_product_attention(q, k, v, need_weights=False, **keywords)

    backward = numpy_be.scaled_dot_product_attention_backward
    large = cases == "large"
    forward = best_of(lambda: scratch.check(kernel, cases=cases), runs)
    back = best_of(lambda: scratch.check_backward(backward), runs)
    return [
        _line(
            f"scratch.check(numpy chunked kernel, cases={cases!r}) < {LARGE_GOAL_S:g} s",
            LARGE_GOAL_S if large else None,
            forward,
            runs,
        ),
        _line(
            f"scratch.check_backward(numpy backend's backward), standard cases < "
            f"{BACKWARD_GOAL_S:g} s",
            BACKWARD_GOAL_S if large else None,
            back,
            runs,
        ),
    ]

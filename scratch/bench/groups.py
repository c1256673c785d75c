"""The rows timed together: each goal's rivals form a group, interleaved round by round."""

from __future__ import annotations

from scratch.bench.contenders import NOISE_L, NOISE_ROW
from scratch.bench.pure_backward import PYTHON_BACKWARD_PAIR

PYTHON_PAIR = ("ground truth (scratch)", "pure-Python kernel limit")
PYTHON_GROUPS = (PYTHON_PAIR, PYTHON_BACKWARD_PAIR)  # plain Python: PAIR_RUNS rounds each
# rounds per group (the measurements behind each number: docs/notes/bench.md)
PAIR_RUNS = 20  # rounds of the plain-Python pair (0.4-0.6 s a call; even: each first as often)
GOAL_MAX_ROUNDS = 60  # a goal's 10th percentile is then near the 7th fastest of 60 rounds
GOAL_MIN_ROUNDS = 20  # at least this many rounds for every other goal group
GOAL_BUDGET_S = 3.0  # ... and more until each row of the group has spent about this much


def goal_groups(L: int, device: str) -> tuple[tuple[str, ...], ...]:
    """Rows at size L whose ratios are goals: each group is timed interleaved, round by round."""
    numpy_sdpa = ("numpy chunked", f"torch SDPA ({device})")
    fast = (f"torch backend fast ({device})",)
    if device == "cuda":
        return ((*fast, "torch SDPA (cuda)"),) if L in (4096, 32768) else ()
    noise = (NOISE_ROW,) if L == NOISE_L else ()
    return {
        256: PYTHON_GROUPS,
        4096: ((*numpy_sdpa, *fast, *noise),),  # SDPA is in two goals: one group
        16384: (numpy_sdpa,),
    }.get(L, ())

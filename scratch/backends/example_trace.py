"""A backend's trace of one worked example: its own arrays, named and laid out by scratch.trace.

Each backend computes every step itself (numpy_backend, torch_backend); what they share is the
bookkeeping around the numbers: one example only, a variant's per-head extras joined by heads,
key_input and value_input kept only where the example gives them, then scratch.trace's layout.
"""

from __future__ import annotations

from collections.abc import Callable

from scratch.example import Example
from scratch.options import Options
from scratch.plan import HeadPlan
from scratch.trace import Trace, layout_trace


def check_one_example(x: object) -> None:
    """x must be (L, d_model): a trace is one worked example (ValueError naming x otherwise)."""
    if x.ndim != 2:
        raise ValueError(
            f"x: a trace is one worked example, expected shape (L, d_model), found {x.ndim} dims"
        )


def example_trace(
    example: Example,
    options: Options,
    plan: HeadPlan,
    scale: float,
    values: dict[str, object],
    extras: dict[str, object],
    concat_heads: Callable,
    is_bool: bool | None,
    source: tuple[str, ...],
) -> Trace:
    """The trace of `example` from a backend's arrays.

    `values` maps x, key_input, value_input, w_q ... b_o, q, k, v, scores, scaled, masked,
    weights, head_outputs, concat and output to the backend's arrays; `extras` (a variant's
    q_rotated and k_rotated (H, n, d), sink_weights (H, L)) join them, the per-head ones as
    (n, H * d) by the backend's `concat_heads`."""
    for name, per_head in extras.items():  # q_rotated (H, L, d) -> (L, H * d)
        values[name] = per_head if name == "sink_weights" else concat_heads(per_head)
    if example.key is None:  # self-attention: no key_input step
        del values["key_input"]
    if example.value is None:
        del values["value_input"]
    return layout_trace(
        values, plan, options, scale, is_bool=is_bool, tokens=example.tokens,
        key_tokens=example.key_tokens, source=source,
    )  # fmt: skip


__all__ = ["check_one_example", "example_trace"]

"""Where one number of a trace came from, written out with the actual numbers.

`explain(trace, "scores", (0, 1)).text` reads
`scores[0][1] = q_0 . k_1 = 2*4 + 2*4 + 2*0 = 16`, and `.sources` names the rows and columns of
the earlier steps that fed it, as (step, axis, index) with axis 0 = row, 1 = column. The window
shows these texts; it never does the arithmetic itself. Each step's explanation is the one its
entry in `scratch.trace.steps` names (functions in `scratch.trace.step_explain`). A NumPy or torch
step is
read a row at a time (`Step.rows`): one cell of a 4096-token trace reads a few rows.
"""

from __future__ import annotations

from scratch.trace.forward import Trace
from scratch.trace.step_explain import MAX_TERMS, Cell, Explanation
from scratch.trace.steps import call_of, spec_for

__all__ = ["MAX_TERMS", "Explanation", "explain"]


def explain(trace: Trace, step: str, index: tuple[int, ...]) -> Explanation:
    """Explain the entry `trace[step].value[index]` with the numbers that produced it.

    Args:
        trace: a Trace (trace_attention makes one).
        step: a step's name, e.g. "scores" or "weights".
        index: the entry's index in the step's value, e.g. (i, j) or (h, i, j).

    Returns:
        The Explanation: its arithmetic in words and the input cells it reads.

    Examples:
        >>> import scratch
        >>> trace = scratch.trace_attention([[1.0, 0.0], [0.0, 1.0]], is_causal=True)
        >>> print(scratch.explain(trace, "weights", (1, 0)).text)  # doctest: +ELLIPSIS
        weights[1][0] = exp(masked[1][0] - max_row) / ... = exp(-0.7071) / 1.493 = 0.3302
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace: expected a scratch.Trace, found {type(trace).__name__}")
    names = trace.names()
    if not isinstance(step, str) or step not in names:
        raise ValueError(f"step: expected one of {', '.join(names)}, found {step!r}")
    st = trace[step]
    if not isinstance(index, tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in index
    ):
        raise TypeError(f"index: expected a tuple of ints, found {index!r}")
    if len(index) != len(st.axes):
        raise ValueError(f"index: expected {len(st.axes)} indices for step {step!r}, found {index}")
    cell = st.rows()  # an array's rows are read as they are asked: one cell reads a few rows
    for n, i in zip(st.shape, index):
        if not 0 <= i < n:
            raise ValueError(f"index: {index} is outside step {step!r} of shape {st.shape}")
        cell = cell[i]
    call = call_of(trace)
    spec = spec_for(call, step)
    heads = st.axes[0] == "head"
    rest = index[1:] if heads else index  # (i, j), or (i,) for a step with one such axis
    return spec.explain(
        Cell(
            trace,
            step,
            cell,
            index[0] if heads else 0,
            rest[0],
            rest[-1] if len(rest) > 1 else 0,
            heads,
            spec.reads(call),
            spec.biased if spec.biased in call.given else "",
            index,
        )
    )

"""Controller: turns a Session into a trace via the chosen backend, plus the checked reference.

This is the only place in the window that asks for traces. No Qt here: the worker runs
`run()` in a thread.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import scratch
from gui.state import backward_check, interrupt, sampled_check, truth_process, variant_session
from gui.state.session import Session
from scratch import backends


@dataclass(frozen=True)
class Outcome:
    """What one computation produced: the backend's trace, the ground truth and the checks."""

    session: Session
    trace: object
    reference: object
    checks: list  # StepChecks: scratch.compare_traces, or the sampled check at large sizes
    backend: str
    dtype: str
    kernel: str
    seconds: float
    sampled: str = ""  # how the check sampled rows ("" when it checked every step in full)


class Cancelled(Exception):
    """The user pressed Cancel; the result is thrown away."""


def example_and_options(s: Session) -> tuple[scratch.Example, scratch.Options]:
    """What every backend's trace_example reads for this session: what it computes on (an
    Example) and how (an Options), built once and passed on as they are."""
    # step 1: inputs; scratch's x is the query table (q itself in qkv mode: no w_q)
    rows = {name: [list(r) for r in s.matrix(name)] for name in s.matrices_in_use()}
    example = scratch.Example(
        rows.pop("query"),
        rows.pop("key", None),
        rows.pop("value", None),
        rows,  # w_q, w_k, w_v in mode 'project'
        list(s.tokens),
        list(s.key_tokens) if s.key is not None else None,
        s.num_heads,
        s.num_kv_heads,
    )
    # step 2: scale: None means 1/sqrt(d_k) inside scratch
    scale = {"sqrt": None, "none": 1.0, "custom": s.scale_value}[s.scale_mode]
    # step 3: the variant, the one mask (none, causal, window, ..., a drawn grid) with the
    # score changes, sinks and RoPE, for the call's sizes: at decode step n the call is one
    # query (token n-1) against the n cached tokens
    if s.decode:
        example = scratch.decode_example(example, s.decode)
    options = scratch.Options(
        variant=variant_session.variant_of(s), scale=scale, masked_rows=s.masked_rows
    )
    return example, options


def backward_example_and_options(s: Session) -> tuple[scratch.Example, scratch.Options]:
    """example_and_options for the backward paths, which take SDPA's masks: a causal or drawn
    mask goes in as is_causal or attn_mask (another variant stays, and is refused there)."""
    example, options = example_and_options(s)
    return example, scratch.as_sdpa(options, *variant_session.call_sizes(s))


def step_names(s: Session) -> list[str]:
    """The step names the session's trace will have (asks the ground truth once)."""
    return scratch.trace_example(*example_and_options(s)).names()


def run(
    s: Session,
    progress: Callable[[int, int, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Outcome:
    """Backend trace, ground-truth trace, step-by-step comparison; raises Cancelled."""
    report = progress or (lambda done, total, what: None)
    stop = cancelled or (lambda: False)
    example, options = example_and_options(s)
    start = time.perf_counter()
    sampled = sampled_check.wanted(s.backend, len(s.tokens))
    # step 1: the backend the user chose, in the dtype the user chose (never a silent fallback);
    # at large sizes the sampled rows' ground truth starts in a second process as soon as the
    # backend has q, k and v, and runs while the backend attends
    report(0, 3, f"{s.backend} ({s.dtype}) trace")
    started: list = []  # (q, k, v, RowProblem, Pending) from the hook

    def start_truth(q, k, v, scale: float) -> None:
        problem = sampled_check.row_problem(q, k, v, scale, (s.num_heads, s.num_kv_heads), options)
        pending = truth_process.start(problem.arguments(), problem.options)
        started.append((q, k, v, problem, pending))

    hook = start_truth if sampled else None  # called once q, k, v exist, before attention
    backend = backends.get(s.backend)  # the ground truth for 'scratch'
    with truth_process.sharing_cores() if sampled else contextlib.nullcontext():
        with _stoppable(stop) if s.backend == "scratch" else contextlib.nullcontext():
            trace = backend.trace_example(example, options, dtype=s.dtype, on_projected=hook)
    if stop():
        raise Cancelled  # a started ground truth is left to finish; nobody reads it
    if sampled:
        # steps 2-3 at large sizes: the ground truth for a seeded sample of query rows only;
        # the backend's trace is its own reference for the hover arithmetic
        report(1, 3, "ground truth for sampled rows")
        reference, note = trace, sampled_check.describe(len(s.tokens))
        checks = _sampled_checks(trace, options, str(s.dtype), started)
        report(3, 3, "done")
        return _outcome(s, trace, reference, checks, start, note)
    # step 2: the exact ground truth (the same object when the backend is scratch itself)
    report(1, 3, "ground truth trace")
    with _stoppable(stop):
        reference = trace if s.backend == "scratch" else scratch.trace_example(example, options)
    if stop():
        raise Cancelled
    # step 3: compare them step by step
    report(2, 3, "checking every step")
    checks = scratch.compare_traces(trace, reference)
    report(3, 3, "done")
    return _outcome(s, trace, reference, checks, start, "")


def _stoppable(stop: Callable[[], bool]):
    """The pure-Python ground truth inside raises Cancelled within milliseconds of a Cancel
    (or a newer request): it stops, and its frames and lists are freed (gui.state.interrupt)."""
    return interrupt.stoppable(stop, Cancelled)


def _sampled_checks(trace, options: scratch.Options, dtype: str, started: list) -> list:
    """The sampled check from the ground truth started by the hook, when it read the very q, k
    and v the trace holds; else (a backend without the hook, or other arrays) computed here."""
    if len(started) == 1:
        q, k, v, problem, pending = started[0]
        if all(trace[n].value is x for n, x in zip("qkv", (q, k, v))):
            return sampled_check.checks_against(trace, problem, pending.result(), dtype)
    return sampled_check.sampled_checks(trace, options, dtype)


def _outcome(s: Session, trace, reference, checks, start: float, sampled: str) -> Outcome:
    """The Outcome of one run, naming what the backend says it ran."""
    source = trace.source
    return Outcome(
        session=s,
        trace=variant_session.in_positions(trace, s),  # decode: the rule as the window counts
        reference=variant_session.in_positions(reference, s),
        checks=checks,
        backend=source.backend,
        dtype=source.dtype,
        kernel=source.kernel,
        seconds=time.perf_counter() - start,
        sampled=sampled,
    )


@dataclass(frozen=True)
class BackwardOutcome:
    """The backward view's computation: the ground truth's backward trace and the gradient check."""

    session: Session
    trace: object  # scratch.trace_attention(..., grad_output=dO); None when refused
    checks: list  # StepChecks of the backend's dQ, dK, dV ([] when not checked)
    compared: str  # what the gradient check compared, or why it did not run
    refused: str  # why the backward was not computed ("" when it was)
    seconds: float


def run_backward(
    s: Session,
    progress: Callable[[int, int, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> BackwardOutcome:
    """The ground truth's backward trace for the session's dO, then the backend's gradients
    checked against it; raises Cancelled."""
    report = progress or (lambda done, total, what: None)
    stop = cancelled or (lambda: False)
    start = time.perf_counter()
    refused = backward_check.too_large(s)
    if refused:
        return BackwardOutcome(s, None, [], "", refused, time.perf_counter() - start)
    example, options = backward_example_and_options(s)
    # step 1: the exact backward trace (the forward steps, then dO -> dV, dP, D, dS -> dQ, dK)
    report(0, 2, "ground truth backward")
    with _stoppable(stop):
        trace = scratch.trace_example(
            example, options, grad_output=backward_check.grad_output_for(s)
        )
    if stop():
        raise Cancelled
    # step 2: the chosen backend's gradients against it (small enough sizes only)
    compared = backward_check.check_skipped(s)
    checks: list = []
    if not compared:
        report(1, 2, f"{s.backend} ({s.dtype}) gradients")
        checks, compared = backward_check.gradient_checks(trace, options, s.backend, s.dtype)
    report(2, 2, "done")
    return BackwardOutcome(s, trace, checks, compared, "", time.perf_counter() - start)

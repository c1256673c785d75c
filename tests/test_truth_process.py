"""The sampled check's ground truth in a second process: same answers, failures handled, the
backends' on_projected hook, and the child joined.

Which process computes a result is made certain, never left to the clock: a test that needs
the child's answer waits for it (PATIENT_S guards against a hang only: the child starts in
seconds even on a loaded machine), a test that needs the child not to answer stops it
(SIGSTOP) first, and "returns at once" means "returns while the child is stopped"."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from gui.state import controller, sampled_check, truth_process
from gui.state.session import random_session
from scratch import backends
from tests.journey_sessions import with_mask

L_SAMPLED = sampled_check.SAMPLE_FROM_TOKENS + 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PATIENT_S = 120.0  # the patience here: the child is waited for until it answers (a hang guard)
HANG_S = 60.0  # a call that must not wait (for a stopped or dead child) fails if blocked this
# long; less than PATIENT_S, so a call that spends the patience on a dead child fails


@pytest.fixture(autouse=True)
def _child_stopped(monkeypatch):
    """Each test starts without a child, waits for the child's answers (a loaded machine may
    take longer than the window's patience to start it), and leaves none running."""
    truth_process.shutdown()
    monkeypatch.setattr(truth_process, "MIN_PATIENCE_S", PATIENT_S)
    monkeypatch.setattr(truth_process, "STARTUP_S", PATIENT_S)
    yield
    truth_process.shutdown()
    assert truth_process.child_pid() is None


MASKED_STEPS = ["scores", "scaled", "masked", "weights", "head_outputs", "output"]  # a variant's


def _session(seed: int, mask_mode: str = "none", **changes):
    s = random_session(seed, num_tokens=L_SAMPLED, num_heads=2, num_kv_heads=changes.pop("kv", 2))
    s = with_mask(s, mask_mode)
    return dataclasses.replace(s, backend="numpy", dtype="float32", **changes)


def _numbers(checks) -> list[tuple]:
    return [(c.name, c.ok, c.max_abs_diff, c.bound, c.ratio) for c in checks]


def _wait_until_dead(pid: int) -> None:
    """Until the killed child is a zombie or gone (os.kill returns before it has died)."""
    deadline = time.perf_counter() + HANG_S
    while time.perf_counter() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith(("Z", "X")):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still alive {HANG_S} s after SIGKILL")


def _returns(call, *args):
    """call(*args)'s value, from a thread; fails if it has not returned in HANG_S (it would
    block for ever: the child it might wait for is stopped)."""
    box: list = []

    def run() -> None:
        try:
            box.append(("ok", call(*args)))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            box.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), f"{call.__name__} still blocked after {HANG_S} s"
    if box[0][0] == "error":
        raise box[0][1]
    return box[0][1]


def _stopped_child() -> int:
    """Start a child, let it answer once, then stop it (SIGSTOP): it reads and answers
    nothing until SIGCONT or SIGKILL. Its process id."""
    problem = _problem(10)
    truth_process.start(problem.arguments(), problem.options).result()
    pid = truth_process.child_pid()
    assert pid is not None  # (PATIENT_S: the child answered)
    os.kill(pid, signal.SIGSTOP)
    return pid


def _problem(seed: int = 1, **changes):
    s = _session(seed, **changes)
    example, options = controller.example_and_options(s)
    trace = backends.get("numpy").trace_example(example, options, dtype="float32")
    heads = (s.num_heads, s.num_kv_heads)
    values = (trace["q"].value, trace["k"].value, trace["v"].value)
    return sampled_check.row_problem(*values, trace.scale, heads, options)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mask_mode", ["none", "causal-top-left", "causal-bottom-right"])
def test_the_window_gets_the_same_checks_as_computing_them_in_its_own_thread(seed, mask_mode):
    """controller.run takes the rows' ground truth from the child; every number equals the
    check computed in this thread from the finished trace."""
    s = _session(seed, mask_mode=mask_mode)
    before = truth_process.child_cpu_seconds()
    outcome = controller.run(s)
    assert truth_process.child_pid() is not None  # the child answered this run
    assert truth_process.child_cpu_seconds() > before
    here = sampled_check.sampled_checks(
        outcome.trace, controller.example_and_options(s)[1], "float32"
    )
    steps = ["head_outputs", "weights"] if mask_mode == "none" else MASKED_STEPS
    assert [c.name.split(" ")[0] for c in outcome.checks] == steps
    assert _numbers(outcome.checks) == _numbers(here)
    assert all(c.ok for c in outcome.checks)


def _numpy_traces_with(monkeypatch, trace_example) -> None:
    """The numpy backend (the sessions' here) traces with `trace_example` meanwhile."""
    fake = dataclasses.replace(backends.get("numpy"), trace_example=trace_example)
    real_get = backends.get
    monkeypatch.setattr(backends, "get", lambda name: fake if name == "numpy" else real_get(name))


@pytest.mark.parametrize("step,index", [("head_outputs", 0), ("weights", 1)])
def test_a_wrong_value_fails_the_check_computed_beside_the_trace(monkeypatch, step, index):
    """A backend whose trace is off by 1e-3 in one sampled row fails through the concurrent
    path (the child computed the truth from the hook's q, k, v)."""
    real = backends.get("numpy").trace_example
    row = sampled_check.checked_rows(L_SAMPLED)[4]

    def wrong(example, options, dtype=None, on_projected=None):
        trace = real(example, options, dtype=dtype, on_projected=on_projected)
        trace[step].value[1, row, 0] += 1e-3
        return trace

    _numpy_traces_with(monkeypatch, wrong)
    checks = controller.run(_session(2)).checks
    assert truth_process.child_pid() is not None
    assert [c.ok for c in checks] == [index != 0, index != 1]
    assert checks[index].max_abs_diff == pytest.approx(1e-3, rel=1e-2)


def test_a_hook_given_other_arrays_than_the_trace_holds_is_not_trusted(monkeypatch):
    """If the hook saw copies (not the trace's own q, k, v), the check is computed again from
    the trace: a mistake in the trace's q is then still seen."""
    real = backends.get("numpy").trace_example
    seen = []

    def copies(example, options, dtype=None, on_projected=None):
        def hook(q, k, v, scale):
            seen.append(1)
            on_projected(q.copy(), k.copy(), v.copy(), scale)

        trace = real(example, options, dtype=dtype, on_projected=hook)
        trace["q"].value[...] *= 2  # the trace's q no longer made its weights
        return trace

    _numpy_traces_with(monkeypatch, copies)
    checks = controller.run(_session(3)).checks
    assert seen == [1]
    assert not checks[1].ok  # the weights do not follow from the trace's (doubled) q


def test_a_dead_child_is_replaced_and_the_answer_still_comes():
    """Killed while idle: the next run gets the same answer from a new child. Killed during a
    request: that request is computed in the calling thread, with the same answer."""
    s = _session(4)
    first = _numbers(controller.run(s).checks)
    pid = truth_process.child_pid()
    os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pid)
    assert _numbers(controller.run(s).checks) == first
    new_pid = truth_process.child_pid()
    assert new_pid not in (None, pid)
    problem = _problem(4)
    os.kill(new_pid, signal.SIGSTOP)  # it cannot answer before it is killed
    pending = truth_process.start(problem.arguments(), problem.options)
    os.kill(new_pid, signal.SIGKILL)
    truth = _returns(pending.result)  # not the patience's PATIENT_S: its answers ended
    assert not pending.in_second_process
    assert truth == truth_process.exact_rows(problem.arguments(), problem.options)


def test_a_slow_child_is_not_waited_for_and_answers_stay_in_order(monkeypatch):
    """With no patience the calling thread computes the rows itself and the slow child is
    stopped; the next request gets a new child and its own answer, not the late one."""
    a, b = _problem(5), _problem(6, mask_mode="causal-top-left")
    monkeypatch.setattr(truth_process, "MIN_PATIENCE_S", 0.0)
    monkeypatch.setattr(truth_process, "STARTUP_S", 0.0)
    pending = truth_process.start(a.arguments(), a.options)
    pid = truth_process.child_pid()
    os.kill(pid, signal.SIGSTOP)  # slow for certain: it answers nothing
    pending.sent_at += 1e9  # as if sent just now and waited for already: no patience left
    assert _returns(pending.result) == truth_process.exact_rows(a.arguments(), a.options)
    assert not pending.in_second_process and truth_process.child_pid() is None
    monkeypatch.setattr(truth_process, "MIN_PATIENCE_S", PATIENT_S)
    later = truth_process.start(b.arguments(), b.options)
    assert later.result() == truth_process.exact_rows(b.arguments(), b.options)
    assert later.in_second_process and truth_process.child_pid() not in (None, pid)


def test_a_stuck_child_holds_up_nobody(monkeypatch):
    """A child that is alive but does not read (stopped) costs one wait of the patience: the
    request, 0.65 MB at 4096 tokens, is written by a thread, never by the caller."""
    problem = _problem(10)
    pid = _stopped_child()
    try:
        monkeypatch.setattr(truth_process, "MIN_PATIENCE_S", 0.3)
        q, k, v, rows = problem.arguments()
        big = (q, [h * 40 for h in k], [h * 40 for h in v], rows)  # 40 x the keys (no mask)
        # larger than the pipe holds: written by the caller, it would block for ever
        pending = _returns(truth_process.start, big, problem.options)
        assert truth_process.child_pid() == pid
        truth = _returns(pending.result)  # computed here once the patience is spent
        assert not pending.in_second_process
        assert truth == truth_process.exact_rows(big, problem.options)
        assert truth_process.child_pid() is None  # the stuck child was stopped
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_new_request_does_not_wait_behind_one_nobody_reads():
    """A superseded recompute's request still in the child: the next request stops that
    child and a new one answers (at once, not after the abandoned ground truth)."""
    a, b = _problem(11), _problem(12)
    first = _stopped_child()  # it will not answer the abandoned request
    abandoned = truth_process.start(a.arguments(), a.options)  # nobody calls result()
    assert truth_process.child_pid() == first
    fresh = truth_process.start(b.arguments(), b.options)
    assert truth_process.child_pid() not in (None, first)
    assert fresh.result() == truth_process.exact_rows(b.arguments(), b.options)
    assert fresh.in_second_process
    assert abandoned.done.is_set() and abandoned.answer is None  # told: no answer coming


class _HeldInbox:
    """A child's inbox that holds its writer just after it takes the request `held` (as a
    busy machine may), until that child is no longer the current one."""

    def __init__(self, held: tuple):
        self.queue, self.held = queue.SimpleQueue(), held
        self.taken = threading.Event()  # set once the writer has taken `held`

    def put(self, item) -> None:
        self.queue.put(item)

    def empty(self) -> bool:
        return self.queue.empty()

    def get(self):
        item = self.queue.get()
        if item is not None and item.request[0] is self.held:
            self.taken.set()
            deadline = time.perf_counter() + HANG_S
            while truth_process._child is item.child and time.perf_counter() < deadline:
                time.sleep(0.001)  # a state is awaited: the child replaced (or a hang guard)
        return item


def test_a_request_taken_but_not_yet_written_keeps_the_child_busy(monkeypatch):
    """Taken from the inbox, not yet recorded as written: the next request still gets a new
    child and does not queue behind the superseded one."""
    a, b = _problem(15), _problem(16)
    big = (*a.arguments()[:3], a.arguments()[3] * 40)  # 40 x the rows (repeats allowed)
    inbox = _HeldInbox(big)
    with monkeypatch.context() as m:
        m.setattr(truth_process.queue, "SimpleQueue", lambda: inbox)
        truth_process.start(a.arguments(), a.options).result()  # a warm child, this inbox
    first = truth_process.child_pid()
    abandoned = truth_process.start(big, a.options)  # the writer takes it and is held
    assert inbox.taken.wait(HANG_S)
    fresh = truth_process.start(b.arguments(), b.options)
    assert truth_process.child_pid() not in (None, first)
    assert fresh.result() == truth_process.exact_rows(b.arguments(), b.options)
    assert fresh.in_second_process
    assert abandoned.done.is_set() and abandoned.answer is None


def test_shutdown_does_not_wait_for_a_busy_child():
    """A child with work it will not finish (stopped) is killed, not waited for."""
    a = _problem(13)
    pid = _stopped_child()
    truth_process.start(a.arguments(), a.options)
    _returns(truth_process.shutdown)
    assert truth_process.child_pid() is None
    _wait_until_dead(pid)


def test_a_bfloat16_torch_trace_is_checked_on_its_sampled_rows():
    """NumPy cannot read bfloat16 tensors: the rows are turned to float64 by torch first."""
    if "torch-cpu" not in backends.available():
        pytest.skip("torch is not installed here")
    s = dataclasses.replace(_session(14), backend="torch-cpu", dtype="bfloat16")
    checks = controller.run(s).checks
    assert [c.name.split(" ")[0] for c in checks] == ["head_outputs", "weights"]
    assert all(c.ok for c in checks), checks


def test_an_error_of_the_ground_truth_is_raised_in_the_window():
    problem = _problem(7)
    wrong = dataclasses.replace(problem.options, attn_mask=[[True, False]])  # (1, 2): no rows
    pending = truth_process.start(problem.arguments(), wrong)
    with pytest.raises(ValueError, match="attn_mask"):
        pending.result()
    assert pending.in_second_process


def test_the_child_never_runs_the_callers_script_again(tmp_path):
    """A script without a main guard (multiprocessing's spawn would import it again in the
    child) runs once, and its check comes from the child."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import dataclasses
            from gui.state import controller, truth_process
            from gui.state.session import random_session
            print("script body ran")
            truth_process.MIN_PATIENCE_S = truth_process.STARTUP_S = {PATIENT_S}
            s = random_session(0, num_tokens={L_SAMPLED})
            s = dataclasses.replace(s, backend="numpy", dtype="float32")
            outcome = controller.run(s)
            print("child", truth_process.child_pid() is not None, all(c.ok for c in outcome.checks))
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("script body ran") == 1
    assert "child True True" in done.stdout


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_on_projected_sees_the_arrays_the_trace_holds_before_attention(name):
    """Called once, with the very q, k, v objects of the finished trace and its scale."""
    if name not in backends.available():
        pytest.skip(f"{name} is not installed here")
    example, options = controller.example_and_options(_session(8, kv=1))
    calls = []
    trace = backends.get(name).trace_example(
        example, options, dtype="float32", on_projected=lambda *a: calls.append(a)
    )
    assert len(calls) == 1
    q, k, v, scale = calls[0]
    assert q is trace["q"].value and k is trace["k"].value and v is trace["v"].value
    assert scale == trace.scale
    assert np.asarray(k).shape == (L_SAMPLED, 2)  # one kv head of width 2


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_on_projected_must_be_a_function(name):
    if name not in backends.available():
        pytest.skip(f"{name} is not installed here")
    with pytest.raises(TypeError, match="on_projected: expected None or a function, found int"):
        backends.get(name).trace_attention([[1.0, 2.0]], on_projected=3)


def test_shutdown_waits_for_the_child():
    problem = _problem(9)
    truth_process.start(problem.arguments(), problem.options).result()
    pid = truth_process.child_pid()
    truth_process.shutdown()
    assert truth_process.child_pid() is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: it ended and was waited for

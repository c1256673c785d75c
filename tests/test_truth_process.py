"""The sampled check's ground truth in a second process: same answers, failures handled, the
backends' on_projected hook, and the child joined."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gui import controller, core_api, sampled_check, truth_process
from gui.session import random_session
from scratch import backends

L_SAMPLED = sampled_check.SAMPLE_FROM_TOKENS + 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _child_stopped():
    """Each test starts without a child and leaves none running."""
    truth_process.shutdown()
    yield
    truth_process.shutdown()
    assert truth_process.child_pid() is None


def _session(seed: int, **changes):
    s = random_session(seed, num_tokens=L_SAMPLED, num_heads=2, num_kv_heads=changes.pop("kv", 2))
    return dataclasses.replace(s, backend="numpy", dtype="float32", **changes)


def _numbers(checks) -> list[tuple]:
    return [(c.name, c.ok, c.max_abs_diff, c.bound, c.ratio) for c in checks]


def _problem(seed: int = 1, **changes):
    s = _session(seed, **changes)
    kwargs = controller.trace_kwargs(s)
    trace = core_api.trace_with_backend("numpy", "float32", **kwargs)
    heads = (s.num_heads, s.num_kv_heads)
    values = (trace["q"].value, trace["k"].value, trace["v"].value)
    return sampled_check.row_problem(*values, trace.scale, heads, kwargs)


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
    here = sampled_check.sampled_checks(outcome.trace, controller.trace_kwargs(s), "float32")
    assert _numbers(outcome.checks) == _numbers(here)
    assert all(c.ok for c in outcome.checks)


@pytest.mark.parametrize("step,index", [("head_outputs", 0), ("weights", 1)])
def test_a_wrong_value_fails_the_check_computed_beside_the_trace(monkeypatch, step, index):
    """A backend whose trace is off by 1e-3 in one sampled row fails through the concurrent
    path (the child computed the truth from the hook's q, k, v)."""
    real = core_api.trace_with_backend
    row = sampled_check.checked_rows(L_SAMPLED)[4]

    def wrong(name, dtype, on_projected=None, **kwargs):
        trace = real(name, dtype, on_projected=on_projected, **kwargs)
        trace[step].value[1, row, 0] += 1e-3
        return trace

    monkeypatch.setattr(core_api, "trace_with_backend", wrong)
    checks = controller.run(_session(2)).checks
    assert truth_process.child_pid() is not None
    assert [c.ok for c in checks] == [index != 0, index != 1]
    assert checks[index].max_abs_diff == pytest.approx(1e-3, rel=1e-2)


def test_a_hook_given_other_arrays_than_the_trace_holds_is_not_trusted(monkeypatch):
    """If the hook saw copies (not the trace's own q, k, v), the check is computed again from
    the trace: a mistake in the trace's q is then still seen."""
    real = core_api.trace_with_backend
    seen = []

    def copies(name, dtype, on_projected=None, **kwargs):
        def hook(q, k, v, scale):
            seen.append(1)
            on_projected(q.copy(), k.copy(), v.copy(), scale)

        trace = real(name, dtype, on_projected=hook, **kwargs)
        trace["q"].value[...] *= 2  # the trace's q no longer made its weights
        return trace

    monkeypatch.setattr(core_api, "trace_with_backend", copies)
    checks = controller.run(_session(3)).checks
    assert seen == [1]
    assert not checks[1].ok  # the weights do not follow from the trace's (doubled) q


def test_a_dead_child_is_replaced_and_the_answer_still_comes(monkeypatch):
    """Killed while idle: the next runs get the same answer (computed here while the death is
    found out) and a new child takes over. Killed during a request: that request is computed
    in the calling thread, with the same answer."""
    s = _session(4)
    first = _numbers(controller.run(s).checks)
    pid = truth_process.child_pid()
    os.kill(pid, 9)
    assert _numbers(controller.run(s).checks) == first
    assert _numbers(controller.run(s).checks) == first
    new_pid = truth_process.child_pid()
    assert new_pid not in (None, pid)
    problem = _problem(4)
    pending = truth_process.start(problem.arguments(), problem.options)
    os.kill(new_pid, 9)
    truth = pending.result()
    assert not pending.in_second_process
    assert truth == truth_process.exact_rows(problem.arguments(), problem.options)


def test_a_slow_child_is_not_waited_for_and_answers_stay_in_order(monkeypatch):
    """With no patience the calling thread computes the rows itself; the child's late answer
    is dropped and the next request gets its own answer, not the late one."""
    a, b = _problem(5), _problem(6, mask_mode="causal-top-left")
    monkeypatch.setattr(truth_process, "MIN_PATIENCE_S", 0.0)
    pending = truth_process.start(a.arguments(), a.options)
    pending.sent_at += 1e9  # as if sent just now and waited for already: no patience left
    assert pending.result() == truth_process.exact_rows(a.arguments(), a.options)
    assert not pending.in_second_process
    monkeypatch.setattr(truth_process, "MIN_PATIENCE_S", 60.0)
    later = truth_process.start(b.arguments(), b.options)
    assert later.result() == truth_process.exact_rows(b.arguments(), b.options)
    assert later.in_second_process


def test_an_error_of_the_ground_truth_is_raised_in_the_window():
    problem = _problem(7)
    pending = truth_process.start(problem.arguments(), {**problem.options, "masked_rows": "x"})
    with pytest.raises(ValueError, match="masked_rows"):
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
            from gui import controller, truth_process
            from gui.session import random_session
            print("script body ran")
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
    kwargs = controller.trace_kwargs(_session(8, kv=1))
    calls = []
    trace = core_api.trace_with_backend(
        name, "float32", on_projected=lambda *a: calls.append(a), **kwargs
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

"""gui.work.jobs.Worker, the base of the window's three workers: only the newest request reports, a
request superseded while queued never starts, each worker says its failures in its own words,
and Python's collector stays paused while any job is queued or running."""

from __future__ import annotations

import gc
import threading

import pytest

pytest.importorskip("PyQt6")

import scratch  # noqa: E402
from gui.state import controller  # noqa: E402
from gui.views.kernel_check import KernelCheckWorker  # noqa: E402
from gui.work.jobs import collector_pause  # noqa: E402
from gui.work.model_worker import ModelWorker  # noqa: E402
from gui.work.worker import TraceWorker  # noqa: E402

pytestmark = pytest.mark.gui


class _BlockedModel:
    """A model whose run waits for the test's release; the texts it ran, in order."""

    def __init__(self, release: threading.Event, ran: list[str]) -> None:
        self.release, self.ran = release, ran

    def run(self, text: str) -> str:
        self.ran.append(text)  # list.append is atomic: safe from the pool's thread
        assert self.release.wait(10), "the test never released the job"
        return f"run of {text}"


def test_a_request_superseded_while_queued_never_starts(qtbot, monkeypatch):
    from scratch import models

    release, ran = threading.Event(), []
    monkeypatch.setattr(models, "load", lambda path: _BlockedModel(release, ran))
    worker = ModelWorker()  # one thread: "a" runs, "b" and "c" queue behind it
    shown: list[object] = []
    worker.finished.connect(shown.append)
    try:
        worker.submit("default", "a")
        qtbot.waitUntil(lambda: ran == ["a"], timeout=60_000)
        worker.submit("default", "b")
        worker.submit("default", "c")
        assert worker.busy and collector_pause().jobs() == 3 and not gc.isenabled()
        release.set()
        qtbot.waitUntil(lambda: not worker.busy, timeout=60_000)
    finally:
        release.set()
        assert worker.wait(5000)
    assert ran == ["a", "c"], f"a superseded queued request was run: {ran}"
    assert shown == ["run of c"], f"a superseded result was delivered: {shown}"
    assert collector_pause().jobs() == 0


def _failure(qtbot, worker, submit) -> str:
    """The message `worker` reports after submit() (no result may arrive)."""
    results: list[object] = []
    worker.finished.connect(results.append)
    with qtbot.waitSignal(worker.failed, timeout=60_000) as blocker:
        submit()
    assert worker.wait(5000) and results == [] and not worker.busy
    return blocker.args[0]


def _raises(exc: Exception):
    def fail(*args, **kwargs):
        raise exc

    return fail


def test_the_model_worker_says_what_is_missing_or_wrong(qtbot, monkeypatch):
    from scratch import models

    worker = ModelWorker()
    missing = ImportError("No module named 'safetensors'", name="safetensors")
    monkeypatch.setattr(models, "load", _raises(missing))
    message = _failure(qtbot, worker, lambda: worker.submit("default", "a text"))
    assert message == "real models need safetensors: run make run"
    monkeypatch.setattr(models, "load", _raises(OSError("model directory: no such")))
    message = _failure(qtbot, worker, lambda: worker.submit("/nowhere", "a text"))
    assert message == "model directory: no such"


def test_the_kernel_check_worker_reports_progress_then_the_report_or_the_error(qtbot, monkeypatch):
    def check(fn, progress, **options):
        for n in (1, 2):
            progress(n, 2, f"case {n}")
        return ("report", fn(), options)

    monkeypatch.setattr(scratch, "check", check)
    worker = KernelCheckWorker()
    steps: list[tuple] = []
    worker.progress.connect(lambda *args: steps.append(args))
    with qtbot.waitSignal(worker.finished, timeout=60_000) as blocker:
        worker.submit(lambda: "ran", dtype="float32")
    assert worker.wait(5000)
    assert blocker.args == [("report", "ran", {"dtype": "float32"})]
    assert steps == [(1, 2, "case 1"), (2, 2, "case 2")]
    monkeypatch.setattr(scratch, "check", _raises(ValueError("array: expected numpy")))
    assert _failure(qtbot, worker, lambda: worker.submit(print)) == "array: expected numpy"


def boom(session, progress=None, cancelled=None):
    raise RuntimeError(f"boom in {session}")


def test_the_trace_worker_names_the_error_and_keeps_a_traceback_for_a_bug(qtbot):
    worker = TraceWorker(compute=_raises(ZeroDivisionError("float division by zero")))
    message = _failure(qtbot, worker, lambda: worker.submit("s"))
    assert message == "ZeroDivisionError: float division by zero"
    worker = TraceWorker(compute=boom)
    message = _failure(qtbot, worker, lambda: worker.submit("s"))
    assert message.startswith("unexpected RuntimeError: boom in s\n")
    assert "Traceback" in message and "in boom" in message


def test_a_cancelled_computation_reports_nothing(qtbot):
    worker = TraceWorker(compute=_raises(controller.Cancelled()))
    said: list[object] = []
    for signal in (worker.finished, worker.failed):
        signal.connect(said.append)
    worker.submit("s")
    assert worker.wait(5000)
    qtbot.wait(50)  # a late signal would arrive now
    assert said == [] and collector_pause().jobs() == 0

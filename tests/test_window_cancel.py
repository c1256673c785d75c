"""Cancel stops the pure-Python ground truth inside its loops and gives its memory back.

No timing: each test waits up to 10 s for the computation to stop (it would run for minutes
otherwise) and checks it did not finish its work."""

from __future__ import annotations

import dataclasses
import threading
import tracemalloc

import pytest

pytest.importorskip("PyQt6")

from gui.state import controller, interrupt  # noqa: E402
from gui.state.session import random_session  # noqa: E402
from gui.work.worker import TraceWorker  # noqa: E402


class _Stop(Exception):
    pass


def test_a_cancelled_python_loop_stops_and_a_finished_block_is_never_hit_later():
    flag = threading.Event()
    seen: dict = {}

    def loop() -> None:
        count = 0
        try:
            with interrupt.stoppable(flag.is_set, _Stop):
                while count < 10**10:  # hours of plain Python
                    count += 1
            seen["outcome"] = "finished"
        except _Stop:
            seen["outcome"] = "stopped"
        seen["count"] = count
        # after the block nothing is raised any more, however long this thread goes on
        with interrupt.stoppable(lambda: False, _Stop):
            pass
        total = sum(range(2 * 10**6))
        seen["after"] = total

    thread = threading.Thread(target=loop)
    thread.start()
    while interrupt.armed() == 0 and thread.is_alive():
        thread.join(0.01)
    flag.set()
    thread.join(10)
    assert not thread.is_alive(), "the loop still runs 10 s after it was cancelled"
    assert seen["outcome"] == "stopped" and seen["count"] < 10**10
    assert seen["after"] == sum(range(2 * 10**6)) and interrupt.armed() == 0


def test_a_block_left_normally_is_never_interrupted_afterwards():
    cancelled = [False]
    with interrupt.stoppable(lambda: cancelled[0], _Stop):
        pass
    cancelled[0] = True  # the watcher is gone: nothing is raised later
    total = 0
    for i in range(3 * 10**6):
        total += i
    assert total == sum(range(3 * 10**6)) and interrupt.armed() == 0


def test_cancel_stops_the_scratch_ground_truth_at_4096_tokens_and_frees_its_lists(qtbot):
    """The scratch backend at 4096 tokens computes for minutes; after Cancel its thread ends
    (within 10 s, in fact milliseconds), by Cancelled, unfinished, its lists freed."""
    session = random_session(0, num_tokens=4096, num_heads=1)
    session = dataclasses.replace(session, backend="scratch", dtype="float64")
    ended: list = []

    def compute(s, progress, cancelled):
        try:
            outcome = controller.run(s, progress, cancelled)
        except controller.Cancelled as exc:
            ended.append(exc)
            raise
        ended.append(outcome)
        return outcome

    worker = TraceWorker(compute=compute)
    finished: list = []
    worker.finished.connect(finished.append)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        worker.submit(session)
        qtbot.waitUntil(lambda: interrupt.armed() == 1, timeout=60_000)
        # the ground truth's lists grow: at least 20 MB of scores so far
        qtbot.waitUntil(lambda: tracemalloc.get_traced_memory()[0] > base + 20e6, timeout=60000)
        worker.cancel()
        assert worker.wait(10000), "the ground truth still runs 10 s after Cancel"
        qtbot.waitUntil(lambda: len(ended) == 1, timeout=60_000)
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
        worker.wait()
    assert isinstance(ended[0], controller.Cancelled) and finished == []
    assert interrupt.armed() == 0
    assert left < 5e6, f"{left / 1e6:.1f} MB still held after the cancelled ground truth"

"""Threads and Qt: garbage is collected in the GUI thread, windows join their computations."""

from __future__ import annotations

import gc
import threading
import time

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")


from gui.app.main_window import MainWindow  # noqa: E402
from gui.state import controller  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.work.jobs import collector_pause  # noqa: E402
from gui.work.worker import TraceWorker  # noqa: E402
from scratch.learn import presets
from tests.qt_garbage import Garbage  # noqa: E402

pytestmark = pytest.mark.gui
GUI_THREAD = threading.main_thread().name


@pytest.fixture
def collections_off_the_gui_thread():
    """Names of the threads, other than the GUI thread, in which a garbage collection started."""
    seen: list[str] = []

    def note(phase: str, info: dict) -> None:
        name = threading.current_thread().name
        if phase == "start" and name != GUI_THREAD:
            seen.append(name)

    gc.callbacks.append(note)
    yield seen
    gc.callbacks.remove(note)


def allocate_like_the_ground_truth() -> int:
    """Many small lists, as scratch's pure-Python ground truth builds: trips the collector."""
    rows = [[float(i)] for i in range(100_000)]
    return len(rows)


# ---------------------------------------------------------------- the collector's thread


def test_qt_garbage_is_destroyed_in_the_gui_thread_not_in_a_computation_thread(
    qtbot, monkeypatch, collections_off_the_gui_thread
):
    # a collection started by a worker's allocations would destroy garbage Qt objects (a closed
    # window's widgets) in that worker while the GUI thread paints: the crash in ImageItem.paint
    monkeypatch.setattr(controller, "run", lambda s, progress=None, cancelled=None: s())
    worker = TraceWorker()
    shown: list[object] = []
    worker.finished.connect(shown.append)
    died_in: list[str] = []
    gc.collect()  # nothing young is left: the next collection anywhere frees the garbage below
    Garbage(died_in)
    worker.submit(allocate_like_the_ground_truth)
    assert worker.wait(20000)  # the GUI thread waits inside Qt, allocating nothing meanwhile
    qtbot.waitUntil(lambda: shown == [100_000], timeout=60_000)
    qtbot.waitUntil(lambda: not collector_pause().paused(), timeout=60_000)  # the GUI thread's
    gc.collect()
    assert died_in == [GUI_THREAD], f"a Qt object was destroyed in thread {died_in}"
    assert collections_off_the_gui_thread == [], "the collector ran in a computation thread"


def test_collection_stays_paused_until_the_last_job_of_every_worker_ends(qtbot, monkeypatch):
    release = threading.Event()

    def blocked(session, progress=None, cancelled=None):
        assert release.wait(10), "the test never released the job"
        return session

    monkeypatch.setattr(controller, "run", blocked)
    first, second = TraceWorker(), TraceWorker()
    try:
        first.submit("a")
        second.submit("b")
        assert not gc.isenabled() and collector_pause().jobs() == 2
        release.set()
        assert first.wait(5000) and second.wait(5000)
        assert collector_pause().jobs() == 0
        qtbot.waitUntil(lambda: not collector_pause().paused(), timeout=60_000)
    finally:
        release.set()
        first.wait(5000)
        second.wait(5000)


# ---------------------------------------------------------------- the window


def test_closing_the_window_mid_computation_joins_it_and_drops_its_result(
    qtbot, settings, monkeypatch, errors, settle
):
    real_run = controller.run
    slow, started, close_returned = threading.Event(), threading.Event(), threading.Event()
    running_after_close: list[bool] = []

    def slow_run(session, progress=None, cancelled=None):
        if not slow.is_set():
            return real_run(session, progress, cancelled)
        started.set()
        while not cancelled():  # a long computation: it checks for Cancel between steps
            time.sleep(0.005)
        time.sleep(0.2)  # the rest of a step that cannot stop midway
        running_after_close.append(close_returned.is_set())
        return real_run(session, progress, cancelled)

    monkeypatch.setattr(controller, "run", slow_run)
    first = sm.random_session(0, 4, 4, 2, 2, 1)
    window = MainWindow(settings, first, dialogs=False)
    qtbot.addWidget(window)
    window.show()
    settle(window)
    slow.set()
    window.load_session(sm.random_session(1, 5, 4, 2, 2, 1))
    qtbot.waitUntil(started.is_set, timeout=60_000)
    window.close()
    close_returned.set()
    assert window.worker.wait(20000)
    assert running_after_close == [False], "close() returned while its computation still ran"
    qtbot.wait(50)  # any late signal would arrive now
    assert window.outcome.session == first, "a result reached the closed window"
    assert collector_pause().jobs() == 0 and not collector_pause().paused()


def test_switching_presets_quickly_while_computing_shows_the_last_one(
    qtbot, settings, monkeypatch, errors, collections_off_the_gui_thread, settle
):
    real_run = controller.run

    def heavy_run(session, progress=None, cancelled=None):
        allocate_like_the_ground_truth()
        return real_run(session, progress, cancelled)

    monkeypatch.setattr(controller, "run", heavy_run)
    window = MainWindow(settings, sm.random_session(0, 4, 4, 2, 2, 1), dialogs=False)
    qtbot.addWidget(window)
    window.show()
    settle(window)
    combo = window.inputs.preset
    names = [n for n in presets.names() if combo.findData(n) >= 0]
    assert len(names) >= 3, names
    for name in names * 2:  # each choice supersedes the one still computing
        combo.setCurrentIndex(combo.findData(name))
        combo.activated.emit(combo.currentIndex())
        qtbot.wait(1)
    settle(window)
    assert window.inputs.session.preset == names[-1]
    assert window.outcome.session == window.inputs.session, "an older preset's trace is shown"
    assert collections_off_the_gui_thread == [], "the collector ran in a computation thread"


def test_a_newer_submit_drops_queued_jobs_and_only_the_newest_is_shown(qtbot, monkeypatch):
    release = threading.Event()
    computed: list[str] = []

    def fake_run(session, progress=None, cancelled=None):
        computed.append(session)  # list.append is atomic: safe from the pool's threads
        assert release.wait(10), "the test never released the job"
        if cancelled():
            raise controller.Cancelled
        return f"outcome of {session}"

    monkeypatch.setattr(controller, "run", fake_run)
    worker = TraceWorker()
    shown: list[object] = []
    worker.finished.connect(shown.append)
    try:
        # step 1: two jobs take both of the pool's threads and block there
        for name in ("a", "b"):
            worker.submit(name)
            qtbot.waitUntil(lambda n=name: n in computed, timeout=60_000)
        # step 2: rapid edits queue three more; only the newest may ever be computed
        for name in ("c", "d", "e"):
            worker.submit(name)
        release.set()
        qtbot.waitUntil(lambda: not worker.busy, timeout=60_000)
    finally:
        release.set()
        assert worker.wait(5000)
    assert sorted(computed) == ["a", "b", "e"], f"stale queued jobs were computed: {computed}"
    assert shown == ["outcome of e"], f"a superseded result was delivered: {shown}"

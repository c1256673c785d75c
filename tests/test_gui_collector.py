"""While the app lives, Python's cyclic collector runs only from a timer in the GUI thread."""

from __future__ import annotations

import gc
import importlib.util
import threading
from pathlib import Path

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QThread  # noqa: E402

from gui.work import collector  # noqa: E402
from gui.work.jobs import collector_pause  # noqa: E402
from tests.qt_garbage import Garbage  # noqa: E402

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parent.parent


def test_the_app_s_collector_is_off_and_a_gui_thread_timer_collects(qtbot, qapp):
    owner = collector.own_collection(qapp)
    assert owner is collector.own_collection(qapp), "a second call made a second collector"
    assert collector.owned() and not gc.isenabled()
    assert owner.timer.isActive() and owner.thread() is qapp.thread() is QThread.currentThread()
    started: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    try:
        gc.collect()
        started.clear()
        died_in: list[str] = []
        Garbage(died_in)
        rows = [[float(i)] for i in range(50_000)]  # far past every threshold: gc would run
        assert started == [] and died_in == [], "a collection ran at an allocation"
        qtbot.waitUntil(lambda: died_in != [], timeout=60_000)
        assert len(rows) == 50_000  # alive until now: their count is what the timer looks at
    finally:
        gc.callbacks.remove(note)
    assert died_in == [threading.main_thread().name]


def test_a_job_s_pause_never_turns_automatic_collection_on_while_the_app_owns_it(
    qtbot, qapp, monkeypatch
):
    pause = collector_pause()
    collector.own_collection(qapp)
    # a job held while collection was on (before the app took it over), released after
    monkeypatch.setattr(pause, "app_owns", False)
    gc.enable()
    try:
        pause.hold()
        assert not gc.isenabled(), "a job runs with automatic collection on"
        pause.app_owns = True  # what own_collection() records
        pause.release()
        qtbot.waitUntil(lambda: not pause.paused(), timeout=60_000)
        assert not gc.isenabled(), "the job's pause turned automatic collection back on"
    finally:
        gc.disable()


def test_main_s_screenshot_start_up_hands_collection_to_the_app(qapp, tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("main_under_test", ROOT / "main.py")
    main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(main)
    apps: list[object] = []
    own = collector.own_collection
    monkeypatch.setattr(collector, "own_collection", lambda app: apps.append(app) or own(app))
    out = tmp_path / "view.png"
    args = ["--preset", "random", "--tokens", "3", "--screenshot", str(out), "--size", "600x400"]
    assert main.main(args) == 0
    assert out.exists() and apps == [qapp]
    assert collector.owned() and not gc.isenabled()

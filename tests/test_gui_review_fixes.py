"""Review fixes: stale queued jobs, saving through a symlink, hover labels, CLI ranges."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QSettings  # noqa: E402

import scratch  # noqa: E402
from gui import atomic, controller, core_api, view_model  # noqa: E402
from gui import session as sm  # noqa: E402
from gui.errors import ErrorHandler  # noqa: E402
from gui.inputs_panel import InputsPanel  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.worker import TraceWorker  # noqa: E402

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def errors():
    """Unexpected errors are recorded, never shown; every test ends with none."""
    handler = ErrorHandler(show_dialog=False).install()
    yield handler
    handler.uninstall()
    assert handler.errors == [], handler.errors[0]


@pytest.fixture
def settings(tmp_path):
    """A throwaway settings file: tests never touch the user's settings."""
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def settle(qtbot, window) -> None:
    """Wait until the worker has delivered the newest trace."""
    qtbot.waitUntil(lambda: not window.worker.busy and window.outcome is not None, timeout=20000)


def load_main():
    """main.py as a module (it is a script beside the packages, not an installed module)."""
    spec = importlib.util.spec_from_file_location("attention_main", ROOT / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- worker: stale jobs


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
            qtbot.waitUntil(lambda n=name: n in computed, timeout=5000)
        # step 2: rapid edits queue three more; only the newest may ever be computed
        for name in ("c", "d", "e"):
            worker.submit(name)
        release.set()
        qtbot.waitUntil(lambda: not worker.busy, timeout=5000)
    finally:
        release.set()
        assert worker.wait(5000)
    assert sorted(computed) == ["a", "b", "e"], f"stale queued jobs were computed: {computed}"
    assert shown == ["outcome of e"], f"a superseded result was delivered: {shown}"


# ---------------------------------------------------------------- atomic: symlinks


def test_saving_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    folder = tmp_path / "real"
    folder.mkdir()
    target = folder / "session.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    try:
        link.symlink_to(Path("real") / "session.json")  # relative, as `ln -s` makes them
    except OSError as exc:
        pytest.skip(f"no symlinks here: {exc}")
    atomic.write_text(link, "new")
    assert link.is_symlink(), "the link was replaced by a regular file"
    assert os.readlink(link) == os.path.join("real", "session.json")
    assert target.read_text() == "new", "the link's target still holds the old contents"
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real"]
    assert os.listdir(folder) == ["session.json"], "a temporary file was left behind"


# ---------------------------------------------------------------- hover: ground truth label


def test_hover_labels_the_ground_truth_and_states_the_backends_own_value(qtbot, settings, errors):
    if "float16" not in core_api.backend_dtypes().get("torch-cpu", ()):
        pytest.skip("needs the torch-cpu backend in float16")
    s = sm.random_session(3, 6, 8, 4, 4, 1)
    big_x = tuple(tuple(v * 40 for v in row) for row in s.query)  # large sums: float16 rounds them
    s = dataclasses.replace(s, query=big_x, backend="torch-cpu", dtype="float16")
    window = MainWindow(settings, s, dialogs=False)
    qtbot.addWidget(window)
    window.resize(1200, 800)
    window.show()
    settle(qtbot, window)
    p = window.pipeline
    p.set_step("scores")
    p.hover_cell(0, 0)
    shown = float(view_model.step_array(window.outcome.trace["scores"])[0, 0])  # one head: (L, S)
    truth = float(view_model.step_array(window.outcome.reference["scores"])[0, 0])
    assert f"{shown:.4g}" != f"{truth:.4g}", "the example must make float16 differ"
    want = scratch.explain(window.outcome.reference, "scores", (0, 0)).text
    text = p.explanation.text()
    assert text.startswith(f"ground truth (float64): {want}"), text
    assert text.endswith(f"torch-cpu float16 shows {shown:.4g}"), text
    assert p.heatmaps[0].toolTip() == text


# ---------------------------------------------------------------- command line: ranges


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--tokens", "0", f"1 to {sm.MAX_TOKENS}"),
        ("--tokens", str(sm.MAX_TOKENS + 1), f"1 to {sm.MAX_TOKENS}"),
        ("--seed", "3000000000", "0 to 2147483647"),
        ("--seed", "-1", "0 to 2147483647"),
        ("--heads", "0", "1 to 16"),
        ("--heads", "17", "1 to 16"),
    ],
)
def test_out_of_range_numbers_are_usage_errors(capsys, option, value, allowed):
    main = load_main()
    with pytest.raises(SystemExit) as exit_info:
        main.parse_args(["--preset", "random", option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected {allowed}, found {value}" in err, err


def test_the_command_line_limits_are_the_spin_box_limits(qtbot):
    main = load_main()
    top = [str(sm.MAX_SEED), str(sm.MAX_TOKENS), str(sm.MAX_HEADS)]
    args = main.parse_args(["--preset", "random", "--seed", top[0], "--tokens", top[1]])
    assert (args.seed, args.tokens) == (sm.MAX_SEED, sm.MAX_TOKENS)
    assert main.parse_args(["--heads", top[2]]).heads == sm.MAX_HEADS
    panel = InputsPanel(sm.random_session(0, 4, 4, 2, 2, 1))
    qtbot.addWidget(panel)
    assert panel.seed.maximum() == sm.MAX_SEED
    assert panel.num_tokens.maximum() == sm.MAX_TOKENS
    assert panel.heads.maximum() == sm.MAX_HEADS

"""Shared test set-up: offscreen Qt, a fixed hypothesis profile, seeded randomness."""

import gc
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

from scratch.checker import prepare
from tests import font_sets

# Qt renders offscreen in every test run; no display or system packages needed.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# SCRATCH_TEST_FONTS=dejavu|noto|liberation: the run sees only that font set (set before Qt
# starts); a host without its files skips every test, saying so, rather than test other fonts
FONTS_LACKING = font_sets.activate(os.environ.get(font_sets.ENV, ""))


def pytest_report_header(config):
    """The fonts the window's tests run with."""
    chosen = os.environ.get(font_sets.ENV) or "the host's own"
    return f"fonts: {chosen}" + (f" (unavailable: {FONTS_LACKING})" if FONTS_LACKING else "")


def pytest_collection_modifyitems(config, items):
    """A font set this host lacks: every test is skipped with the reason."""
    if FONTS_LACKING:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=FONTS_LACKING))


# One fixed, derandomized profile so the suite never flakes and stays fast.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The checker keeps its 64 latest prepared cases (seeded inputs, pure-Python ground truth and
# bound; about 0.5 MB each). One check in one dtype prepares about 25, so the suite's checks of
# many kernels in three dtypes evicted each other's and computed the same truths again and
# again; the suite keeps 1024 (forward and backward cases: same results, about half the checker
# tests' CPU).
prepare._CACHE_SIZE = 1024


@pytest.fixture(autouse=True)
def _qt_leaves_nothing_behind(request):
    """A Qt test runs as the app does (collection only in the GUI thread, between events); after
    it: every computation joined, automatic collection still off, no window left behind."""
    if not {"qtbot", "qapp"} & set(request.fixturenames):
        yield
        collector = sys.modules.get("gui.work.collector")
        if collector is not None and collector.owned():
            collector.collect_due()  # between tests the GUI thread is idle: a safe point
        return
    from gui.work.collector import own_collection

    own_collection(request.getfixturevalue("qapp"))
    assert not gc.isenabled(), "automatic garbage collection is on while the app owns it"
    yield
    from PyQt6 import sip
    from PyQt6.QtCore import QEvent
    from PyQt6.QtWidgets import QApplication, QMenu

    from gui.work.jobs import collector_pause

    # pytest-qt has closed the test's widgets (closing a window joins its worker)
    assert collector_pause().jobs() == 0, "a TraceWorker job outlived its test: join it"
    app = QApplication.instance()
    app.processEvents()  # the GUI thread ends the jobs' pause (collection stays the app's)
    assert not collector_pause().paused(), "the jobs' collector pause was never released"
    assert not gc.isenabled(), "automatic garbage collection was turned on behind the app's back"
    # delete the closed widgets and collect their garbage now, here in the GUI thread, not in
    # whichever thread (a later test's worker) happens to allocate next
    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    # what survives is the session's (modules, torch, loaded models): frozen, so the next test's
    # collection scans only what that test made (a full collection took 88 ms over torch's and
    # Qt's 189,000 objects, about 1000 times per suite); freezing never frees anything more,
    # so a leaked window is still found
    gc.freeze()
    # hidden "Plot Options" menus of pyqtgraph's plot items stay alive after their window (a leak
    # inside pyqtgraph, never shown); any other surviving top-level widget is a test's leak
    left = [
        w
        for w in app.topLevelWidgets()
        if not sip.isdeleted(w) and not (isinstance(w, QMenu) and not w.isVisible())
    ]
    assert not left, f"top-level widgets outlived the test: {[type(w).__name__ for w in left]}"


# ---------------------------------------------------------------- the window's tests (Qt imports
# stay inside the fixtures: the rest of the suite runs without PyQt6)


@pytest.fixture
def errors():
    """Unexpected errors are recorded, never shown; every test ends with none."""
    from gui.widgets.errors import ErrorHandler

    handler = ErrorHandler(show_dialog=False).install()
    yield handler
    handler.uninstall()
    assert handler.errors == [], handler.errors[0]


@pytest.fixture
def settings(tmp_path):
    """A throwaway settings file: tests never touch the user's settings."""
    from PyQt6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def settle(qtbot):
    """settle(window): wait until the window's worker has delivered the newest trace."""

    def wait(window) -> None:
        qtbot.waitUntil(
            lambda: not window.worker.busy and window.outcome is not None, timeout=60_000
        )

    return wait


@pytest.fixture
def open_window(qtbot, settings, errors, settle):
    """open_window(session, size): a MainWindow shown at `size`, its first trace delivered."""
    from gui.app.main_window import MainWindow

    def make(session, size=(1200, 800)) -> MainWindow:
        w = MainWindow(settings, session, dialogs=False)
        qtbot.addWidget(w)
        w.resize(*size)
        w.show()
        settle(w)
        return w

    return make


@pytest.fixture(scope="session", autouse=True)
def _check_process_joined():
    """The window's second process (the sampled check's ground truth) ends with the run."""
    yield
    import sys

    if "gui.state.truth_process" in sys.modules:
        sys.modules["gui.state.truth_process"].shutdown()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct, loaded once per test session (dequantizing takes seconds); the
    tests that need it are skipped, saying why, where make has not installed it."""
    pytest.importorskip("numpy")
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from scratch import models

    try:
        return models.load("smollm2")
    except models.ModelError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")

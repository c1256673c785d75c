"""The window's "Check a kernel" tab: load a kernel from a .py file, check it, show the report."""

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")


from gui.state import session as sm  # noqa: E402
from gui.views.kernel_check import KernelCheckPanel, load_kernel  # noqa: E402

pytestmark = pytest.mark.gui

KERNEL = '''
import numpy as np


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Scales by 1/d instead of 1/sqrt(d)."""
    scores = q @ np.swapaxes(k, -1, -2) * (1.0 / q.shape[-1] if scale is None else scale)
    L, S = scores.shape[-2:]
    if is_causal:
        attn_mask = np.tril(np.ones((L, S), dtype=bool))
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
'''


@pytest.fixture
def window(open_window):
    """The window at 1024 x 700, closed (its workers joined) before errors are counted."""
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    yield w
    w.close()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the user's kernel: exp(-inf - -inf)
def test_a_kernel_file_is_checked_in_the_worker_and_its_report_shown(window, qtbot, tmp_path):
    path = tmp_path / "my_kernel.py"
    path.write_text(KERNEL)
    panel = window.kernel_check
    window.tabs.setCurrentWidget(panel)
    panel.source.setText(str(path))
    panel.function.setText("attention")
    seen = []
    panel.worker.progress.connect(lambda done, total, name: seen.append((done, total)))
    with qtbot.waitSignal(panel.worker.finished, timeout=120000):
        assert panel.start()
    report = panel.report
    assert not report and report.diagnosis.startswith("scale 1/d instead of 1/sqrt(d)")
    assert seen and seen[-1] == (len(report.cases), len(report.cases))  # progress per case
    assert panel.table.rowCount() == len(report.cases)
    assert "FAIL: " in panel.header.text() and "scale 1/d" in panel.header.text()
    assert panel.table.item(0, 6).text() == "FAIL"
    assert panel.diff_map.isVisible()  # the first failing case's |output - truth|
    panel.table.setCurrentCell(report.cases.index(report.failed[-1]), 0)
    assert panel.diff_map.isVisible()
    if "H8_SCREENSHOT" in __import__("os").environ:
        window.grab().save(__import__("os").environ["H8_SCREENSHOT"])


def test_bad_sources_are_said_in_the_header(qtbot, tmp_path):
    panel = KernelCheckPanel()
    qtbot.addWidget(panel)
    broken = tmp_path / "broken.py"
    broken.write_text("def attention(q, k, v:\n")
    for source, function, words in (
        (str(tmp_path / "missing.py"), "attention", "no such file"),
        (str(broken), "attention", "loading broken.py raised SyntaxError"),
        (str(broken.with_name("ok.py")), "", "no such file"),
        ("no_such_module_here:f", "", "cannot import module"),
    ):
        panel.source.setText(source)
        panel.function.setText(function)
        assert not panel.start()
        assert words in panel.header.text(), panel.header.text()
    assert panel.run_button.isEnabled()


def test_load_kernel_needs_a_function_name_for_a_file(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    assert callable(load_kernel(str(path), "attention"))
    with pytest.raises(ValueError, match="function: name the function"):
        load_kernel(str(path), "")
    with pytest.raises(ValueError, match="function: k.py has no function 'nope'"):
        load_kernel(str(path), "nope")


def test_a_passing_cases_map_is_scaled_to_its_own_errors(qtbot):
    """Errors far below the bound still show where they sit (scaled to the bound, the map was
    one flat colour); the title gives the largest error and the bound."""
    from scratch.checker.report import CaseResult, CheckReport

    panel = KernelCheckPanel()
    qtbot.addWidget(panel)
    case = CaseResult(
        "plain", "2x2", "-", "float32", "pass", max_error=4e-8, bound=1e-5, ratio=4e-3
    )
    case.diff = [[1e-8, 2e-8], [0.0, 4e-8]]
    panel.report = CheckReport("t", "s", [case])
    panel.show_case(0)
    shown = panel.diff_map.panel
    assert shown.levels == (0.0, pytest.approx(4e-8, rel=1e-6))  # the image is float32
    assert shown.title == "|output - truth|, plain: largest 4e-08, bound 1e-05"

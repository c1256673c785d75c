"""The "Check a kernel" tab: the CLI's options, a Browse button, results labelled with the kernel
and the time they belong to (cleared on a new load), and nothing cut off at 1024 x 700."""

import os

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QRect  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.views.kernel_check import KernelCheckPanel  # noqa: E402

pytestmark = pytest.mark.gui

TESTS = os.path.dirname(os.path.abspath(__file__))
# a correct forward with no mask support, and a backward with dK and dV swapped
KERNELS = f'''
import sys

import numpy as np

sys.path.insert(0, {TESTS!r})
from backward_kernels import numpy_backward  # noqa: E402

backward = numpy_backward("swapped")


def attention(q, k, v, scale=None):
    """Right for every case it accepts; it takes no mask."""
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
'''


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "my_kernels.py"
    path.write_text(KERNELS)
    return path


def run_check(qtbot, panel: KernelCheckPanel) -> object:
    with qtbot.waitSignal(panel.worker.finished, timeout=240000):
        assert panel.start()
    return panel.report


def test_the_options_reach_the_checker(qtbot, errors, kernel_file):
    panel = KernelCheckPanel()
    qtbot.addWidget(panel)
    form = panel.form
    form.source.setText(str(kernel_file))
    form.function.setText("attention")
    form.masked_rows.setCurrentText("nan")
    form.seed.setValue(5)
    form.require.setText("scale")
    report = run_check(qtbot, panel)
    assert "seed=5" in report.settings and "masked_rows=nan" in report.settings
    assert "require=scale" in report.settings
    # without require, the mask cases the kernel refuses are 'unsupported', not failures
    assert report and {c.status for c in report.cases} >= {"pass", "unsupported"}
    form.require.setText("scale,mask")  # now a refused mask case is a failure
    report = run_check(qtbot, panel)
    assert not report and any(c.status == "fail" and "mask" in c.features for c in report.cases)


def test_a_backward_kernel_is_checked_and_its_mistake_named(qtbot, errors, kernel_file):
    panel = KernelCheckPanel()
    qtbot.addWidget(panel)
    panel.form.source.setText(str(kernel_file))
    panel.form.function.setText("backward")
    panel.form.direction.setCurrentIndex(panel.form.direction.findData("backward"))
    report = run_check(qtbot, panel)
    assert report.settings.startswith("backward")
    assert not report and "swapped" in report.diagnosis
    assert "swapped" in panel.header.text()
    assert panel.table.rowCount() == len(report.cases)


def test_results_say_whose_they_are_and_clear_on_a_new_load(qtbot, errors, kernel_file):
    panel = KernelCheckPanel()
    qtbot.addWidget(panel)
    panel.form.ask_file = lambda: str(kernel_file)  # what the file dialog would answer
    panel.form.browse_button.click()
    assert panel.source.text() == str(kernel_file)
    panel.function.setText("attention")
    run_check(qtbot, panel)
    said = panel.results_label.text()
    assert said.startswith("results of ") and "my_kernels.py (attention)" in said
    assert "forward" in said and "seed 0" in said and ", at " in said
    assert panel.table.rowCount() > 0
    panel.source.setText(str(kernel_file.with_name("missing.py")))
    assert not panel.start()
    assert "no such file" in panel.header.text()
    assert panel.table.rowCount() == 0 and panel.report is None  # the old table is gone
    assert not panel.diff_map.isVisible()
    assert panel.results_label.text().startswith("no results: ") and "missing.py" in (
        panel.results_label.text()
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nothing_is_cut_off_at_1024(open_window, qtbot, kernel_file):
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    panel = w.kernel_check
    w.tabs.setCurrentWidget(panel)
    panel.source.setText(str(kernel_file))
    panel.function.setText("attention")
    panel.form.require.setText("mask")
    run_check(qtbot, panel)
    qtbot.wait(30)
    assert panel.source.width() >= 300  # the path field has room for a path
    form = panel.form
    for widget in (form.source, form.browse_button, form.function, form.direction, form.seed):
        corner = widget.mapTo(panel, widget.rect().topLeft())
        assert panel.rect().contains(QRect(corner, widget.size())), widget
    table, header = panel.table, panel.table.horizontalHeader()
    verdict = table.columnCount() - 1
    assert header.visualIndex(verdict) == 0 and header.sectionViewportPosition(verdict) == 0
    assert panel.diff_map.isVisible()
    corner = panel.diff_map.mapTo(panel, panel.diff_map.rect().topLeft())
    assert panel.rect().contains(QRect(corner, panel.diff_map.size()))
    hm = panel.diff_map
    assert hm.bar.sceneBoundingRect().right() <= hm.view.width() + 1  # the colour bar whole
    if "LEARNER_SHOT" in os.environ:
        w.grab().save(os.environ["LEARNER_SHOT"])

"""Nothing cut off (issue 33, item 7), measured from the widgets' geometry under whichever fonts
the run has: the kernel check's table columns and diff map, the mistakes list, the Why bars'
legend."""

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

import numpy as np  # noqa: E402
from PyQt6.QtWidgets import QApplication  # noqa: E402

from gui.views.kernel_check import KernelCheckPanel  # noqa: E402

pytestmark = pytest.mark.gui


def report(seed: int):
    """A failing report of 24 cases with long shapes, each with a (5, 4) |difference|."""
    from scratch.checker.report import CaseResult, CheckReport

    rng = np.random.default_rng(seed)
    cases = []
    for n in range(24):
        case = CaseResult(
            ["plain", "batch-heads", "keys-257-late-max", "float-mask-square"][n % 4],
            "2x3x4x8 / 2x3x6x8 / 2x3x6x5",
            "-",
            "float32",
            "fail",
            max_error=float(rng.uniform(0.1, 2)),
            bound=float(rng.uniform(1e-6, 1e-5)),
            ratio=float(rng.uniform(1e4, 1e6)),
        )
        case.diff = rng.uniform(0, 0.75, (5, 4)).tolist()
        cases.append(case)
    return CheckReport("k", "s", cases, diagnosis="scale 1/d instead of 1/sqrt(d)")


def whole_map(panel: KernelCheckPanel) -> None:
    """The table's columns within its viewport; the map's cells, colour bar and title inside
    the map widget, its view range every column."""
    table = panel.table
    columns = sum(table.columnWidth(c) for c in range(table.columnCount()))
    assert columns <= table.viewport().width(), (columns, table.viewport().width())
    hm = panel.diff_map
    width = hm.view.width()
    for item in (hm.plot.getViewBox(), hm.bar, hm.bar.getAxis("right"), hm.plot.titleLabel):
        right = item.mapRectToScene(item.boundingRect()).right()
        assert right <= width + 1, (type(item).__name__, right, width)
    left, right = hm.plot.getViewBox().viewRange()[0]
    assert left <= -0.5 and right >= hm.panel.shape[1] - 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_kernel_checks_table_and_map_are_whole_side_by_side_and_after_a_resize(qtbot, seed):
    """The Check a kernel tab's width at 1400 x 900 (about 1000 pixels): with Noto the bound
    and err/bound columns, the map's last column, its title and colour bar were cut; after a
    narrow window (table above the map) and back, the colour bar's labels were."""
    panel = KernelCheckPanel()
    qtbot.addWidget(panel)
    panel.resize(1000, 780)
    panel.show()
    panel.show_report(report(seed))
    assert panel.split.orientation().name == "Horizontal"
    qtbot.waitUntil(lambda: whole_map(panel) is None, timeout=60_000)
    panel.resize(640, 780)  # stacked
    QApplication.processEvents()
    panel.resize(1000, 780)
    qtbot.waitUntil(lambda: whole_map(panel) is None, timeout=60_000)


@pytest.mark.parametrize("width", [420, 560, 700, 900])
def test_the_mistakes_list_shows_every_mistake_without_a_scroll_bar(qtbot, width):
    """Three rows of fixed height hid two mistakes behind a scroll bar (Noto, 1024 x 700)."""
    from gui.views.mistakes_view import MistakesView

    view = MistakesView()
    qtbot.addWidget(view)
    view.resize(width, 600)
    view.show()
    names = view.names

    def all_shown() -> None:
        room = names.viewport().rect()
        for i in range(names.count()):
            rect = names.visualItemRect(names.item(i))
            assert room.contains(rect), (names.item(i).text(), rect, room)
        assert names.verticalScrollBar().maximum() == 0

    qtbot.waitUntil(all_shown, timeout=60_000)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_why_legend_covers_no_bar(qtbot, seed):
    """The Mask page's legend sat over the plot's top right and covered the bars there."""
    from gui.views.why_view import Bars

    bars = Bars()
    qtbot.addWidget(bars)
    bars.resize(620, 240)
    bars.show()
    rng = np.random.default_rng(seed)
    keys = ["Your", "journey", "starts", "with", "one", "step"]
    heights = rng.uniform(0.05, 0.3, (3, len(keys)))
    heights[:, -2:] = 0.35  # the tallest bars under the legend's old corner
    names = ["-inf before softmax", "0 after softmax", "score 0, not -inf"]
    bars.show_series([(n, list(h)) for n, h in zip(names, heights)], keys)

    def apart() -> None:
        legend = bars.legend.mapRectToScene(bars.legend.boundingRect())
        assert legend.height() > 0
        for item in bars.items:
            box = item.mapRectToScene(item.boundingRect())
            assert not box.intersects(legend), (box, legend)

    qtbot.waitUntil(apart, timeout=60_000)

"""The Overview at 1024x700: every tile's title fits its tile, and no tile leaves the tab."""

import dataclasses

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from gui.state import session as sm  # noqa: E402
from scratch.variants import VariantChoice

pytestmark = pytest.mark.gui


@pytest.mark.parametrize("tokens", [6, 13])
def test_long_step_names_fit_their_tiles_at_1024(qtbot, open_window, tokens):
    sinks = VariantChoice(sinks=(0.5, -0.3))  # adds the 'sink_weights' step
    s = dataclasses.replace(sm.random_session(0, tokens, 4, 2, 2, 2), variant=sinks)
    window = open_window(s, size=(1024, 700))
    overview = window.overview
    window.tabs.setCurrentWidget(overview)
    qtbot.waitUntil(lambda: "sink_weights" in overview.heatmaps and overview.isVisible())
    qtbot.wait(50)  # the layout settles
    for name, tile in overview.heatmaps.items():
        title = tile.plot.titleLabel
        text = title.item.toPlainText()
        assert text.startswith(name), (name, text)
        view = title.scene().views()[0]  # the tile's own view: what lies outside it is cut
        box = view.mapFromScene(title.item.sceneBoundingRect()).boundingRect()
        shown = view.viewport().rect()
        assert shown.left() <= box.left() and box.right() <= shown.right() + 1, (
            f"{name}: title at x {box.left()}..{box.right()}, the tile shows 0..{shown.right()}"
        )
        right = tile.mapTo(overview, tile.rect().topRight()).x()
        assert tile.isVisible() and right <= overview.width(), f"{name} ends at {right}"

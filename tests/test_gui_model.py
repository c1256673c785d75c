"""The window's Model tab: run a real model, the model view, the head view, open a head."""

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from PyQt6.QtCore import QPointF, Qt  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.state import session_file  # noqa: E402
from gui.state.model_session import head_session  # noqa: E402
from scratch import models  # noqa: E402

pytestmark = pytest.mark.gui
TEXT = "Your journey starts with one step"


@pytest.fixture(scope="module")
def run():
    try:
        return models.load().run(TEXT)
    except models.ModelError as exc:
        pytest.skip(f"default model not installed: {exc}")


@pytest.fixture
def window(open_window):
    """A small random example, its first trace shown."""
    return open_window(sm.random_session(0, 4, 4, 2, 2, 1))


def test_the_model_runs_in_the_worker_and_fills_both_views(qtbot, window, run):
    panel = window.model
    panel.text.setText(TEXT)
    with qtbot.waitSignal(panel.worker.finished, timeout=60000):
        panel.run_button.click()
    assert panel.run.tokens == run.tokens
    assert np.array_equal(panel.grid.attentions, panel.run.attentions)
    assert len(panel.grid.images) == 6 and len(panel.grid.images[0]) == 12
    # the head view shows layer 0, all heads, as the layer/head pickers say
    assert panel.lines.heads == list(range(12))
    assert np.array_equal(panel.lines.weights, panel.run.attentions[0])
    panel.layer.setValue(4)
    panel.head.setCurrentIndex(panel.head.findData(5))
    assert panel.lines.heads == [5] and np.array_equal(panel.lines.weights, run.attentions[4])
    assert "[CLS]" in panel.sinks.text() and "sink" in panel.sinks.text()


def test_clicking_a_head_in_the_grid_opens_it_in_the_pipeline(qtbot, window, run):
    panel = window.model
    panel.show_run(run)
    window.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(panel.grid)
    rect = panel.grid.cell_rect(3, 7)
    qtbot.mouseClick(panel.grid, Qt.MouseButton.LeftButton, pos=rect.center().toPoint())
    qtbot.waitUntil(
        lambda: not window.worker.busy and window.outcome.session.preset.endswith("layer 3:head 7"),
        timeout=60_000,
    )
    assert window.tabs.currentWidget() is window.pipeline
    assert panel.grid.selected == (3, 7)
    weights = np.asarray(window.outcome.trace["weights"].value)
    assert np.abs(weights - run.attentions[3, 7]).max() <= 1e-12
    assert window.outcome.checks and all(c.ok for c in window.outcome.checks)


def test_the_grid_maps_points_to_heads(qtbot, window, run):
    grid = window.model.grid
    grid.set_attentions(run.attentions)
    grid.resize(800, 500)
    for layer, head in [(0, 0), (5, 11), (2, 6)]:
        assert grid.head_at(grid.cell_rect(layer, head).center()) == (layer, head)
    assert grid.head_at(QPointF(1.0, 1.0)) is None  # the label margin is no head


def test_a_head_session_reproduces_the_model_with_biases_in_the_weights(run):
    s = head_session(run, 2, 4)
    assert len(s.query[0]) == 385 and all(row[-1] == 1.0 for row in s.query)  # the bias column
    assert len(s.w_q) == 385 and len(s.w_q[0]) == 32
    assert session_file.validate(s.to_dict()) == s  # a session that saves and loads back
    from gui.state import controller

    out = controller.run(s)
    assert np.abs(np.asarray(out.trace["weights"].value) - run.attentions[2, 4]).max() <= 1e-12


def test_a_head_of_a_text_with_commas_saves_reopens_and_edits(run, tmp_path):
    """A "," token becomes the label '‚' (U+201A): the session file reopens (it refused ','
    before) and the label line, read back unchanged, gives the same labels."""
    comma_run = models.load().run("Hello, world")
    assert "," in comma_run.tokens
    s = head_session(comma_run, 0, 0)
    assert "\u201a" in s.tokens and not any("," in t for t in s.tokens)
    session_file.save(tmp_path / "comma.json", s)
    assert session_file.load(tmp_path / "comma.json") == s
    assert sm.with_labels(s, ", ".join(s.tokens), "") == s  # the unchanged line: no refusal


def test_a_bad_model_directory_is_refused_and_the_last_run_stays(qtbot, window, run, tmp_path):
    panel = window.model
    panel.show_run(run)
    panel.model_path.setText(str(tmp_path / "nowhere"))
    with qtbot.waitSignal(panel.worker.failed, timeout=60_000):
        panel.run_button.click()
    assert panel.status.text().startswith(f"refused: {tmp_path / 'nowhere'}: not found (expected")
    assert "last run stays" in panel.status.text()
    assert panel.run is run and panel.run_button.isEnabled()
    panel.model_path.setText("default")
    panel.text.setText("   ")
    with qtbot.waitSignal(panel.worker.failed, timeout=60_000):
        panel.run_button.click()
    assert "text: empty" in panel.status.text() and panel.run is run
    assert "text: empty" in window.statusBar().currentMessage()
    panel.show_result(run)  # a later run replaces the refusal in the status bar
    assert window.statusBar().currentMessage() == f"{run.model.name}: {len(run.tokens)} tokens run"


def test_the_views_render_pixels(qtbot, window, run):
    panel = window.model
    panel.show_run(run)
    window.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(panel)
    for widget in (panel.grid, panel.lines):
        image = widget.grab().toImage()
        colours = {
            image.pixel(x, y)
            for x in range(0, image.width(), 7)
            for y in range(0, image.height(), 7)
        }
        assert len(colours) > 20, f"{type(widget).__name__} looks flat"


def test_the_model_and_head_views_export_without_the_text_controls(qtbot, window, run, tmp_path):
    from PyQt6.QtGui import QImage

    panel = window.model
    panel.show_run(run)
    window.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(panel)
    assert window.view() is panel.content
    assert not panel.content.isAncestorOf(panel.text) and panel.content.isAncestorOf(panel.grid)
    png, svg = tmp_path / "model.png", tmp_path / "model.svg"
    assert window.files.export_png(str(png)) and window.files.export_svg(str(svg))
    image = QImage(str(png))
    assert (image.width(), image.height()) == (panel.content.width(), panel.content.height())
    assert b"<svg" in svg.read_bytes()[:400]

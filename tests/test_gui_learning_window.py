"""Issue 13 part 2 in the window: colour, big matrices, examples, presets, flow, keys, export."""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QPoint, QPointF, Qt  # noqa: E402
from PyQt6.QtGui import QFontMetrics, QImage, QWheelEvent  # noqa: E402
from PyQt6.QtWidgets import QApplication  # noqa: E402

import scratch  # noqa: E402
from gui import core_api, view_model  # noqa: E402
from gui import session as sm  # noqa: E402
from gui.heatmap import CRISP_PIXELS, Heatmap  # noqa: E402
from gui.pipeline_view import SOURCE_SIZE  # noqa: E402

pytestmark = pytest.mark.gui


def journey(**changes) -> sm.Session:
    return dataclasses.replace(sm.from_preset(core_api.get_preset("journey")), **changes)


def big_trace(rows: int, cols: int) -> object:
    """A hand-made trace with one (rows, cols) matrix, labels t0, t1, ..."""
    values = np.arange(rows * cols, dtype=float).reshape(rows, cols) / (rows * cols)
    step = scratch.Step("x", "x", values.tolist(), "n", ("query", "model"))
    labels = tuple(f"t{i}" for i in range(rows))
    return scratch.Trace((step,), labels, labels, 1.0)


# ---------------------------------------------------------------- (a) colour


def test_colour_ranges_change_the_image_and_say_which_is_on(qtbot, errors, open_window):
    w = open_window(journey(step="weights"))
    p = w.pipeline
    hm = p.heatmaps[0]
    weights = np.asarray(w.outcome.trace["weights"].tolist())
    assert p.colour_box.currentData() == p.colour == "auto"
    lo, hi = hm.image_item.getLevels()
    assert lo == pytest.approx(weights.min(), abs=1e-6) and hi < 0.3  # 0.10..0.24, not 0..1
    p.colour_box.setCurrentIndex(p.colour_box.findData("row"))
    p.colour_box.activated.emit(p.colour_box.currentIndex())
    assert p.colour == "row" and hm.panel.colour_note.endswith(view_model.COLOUR_RANGES["row"])
    np.testing.assert_allclose(hm.image_item.image.max(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        hm.image_item.image, weights / weights.max(axis=1, keepdims=True), rtol=1e-6
    )
    assert hm.panel.raw.tolist() == weights.tolist()  # hover and numbers: the real weights
    p.set_colour("fixed")
    assert tuple(hm.image_item.getLevels()) == (0.0, 1.0)
    np.testing.assert_array_equal(hm.image_item.image, weights.astype(np.float32))
    with pytest.raises(ValueError, match="colour: expected one of fixed, row, auto"):
        p.set_colour("plasma")


def test_masked_weights_are_greyed_out_not_coloured_as_zero(qtbot, errors, open_window):
    w = open_window(journey(step="weights", mask_mode="causal-top-left"))
    image = w.pipeline.heatmaps[0].image_item.image
    upper = np.triu(np.ones((6, 6), bool), k=1)
    assert np.isnan(image[upper]).all() and np.isfinite(image[~upper]).all()
    grey = w.pipeline.heatmaps[0].grab().toImage()  # the backdrop shows through NaN cells
    assert grey.width() > 0


# ---------------------------------------------------------------- (b) big matrices


def test_ticks_on_a_512_token_axis_never_overlap_and_follow_the_zoom(qtbot, errors):
    hm = Heatmap()
    qtbot.addWidget(hm)
    hm.resize(700, 600)
    hm.show()
    hm.show_panel(view_model.panels(big_trace(512, 512), "x")[0])
    qtbot.wait(10)
    axis = hm.plot.getAxis("bottom")
    metrics = QFontMetrics(axis.style["tickFont"])

    def shown() -> list[float]:
        lo, hi = hm.plot.getViewBox().viewRange()[0]
        return [v for _, vs in axis.tickValues(lo, hi, axis.width()) for v in vs]

    def gaps_fit(values: list[float]) -> bool:
        widest = max(metrics.horizontalAdvance(axis.labels[int(v)]) for v in values)
        widest = metrics.height() if axis.rotated else widest  # upright labels: their height
        px = [hm.plot.getViewBox().mapViewToScene(QPointF(v, 0)).x() for v in values]
        return all(b - a >= widest for a, b in zip(px, px[1:]))

    whole = shown()
    assert 3 <= len(whole) <= 30 and gaps_fit(whole)
    # a mouse-wheel turn over the matrix zooms in: a narrower range, denser labels
    centre = hm.view.mapFromScene(hm.plot.getViewBox().sceneBoundingRect().center())
    for _ in range(6):
        wheel = QWheelEvent(
            QPointF(centre),
            QPointF(hm.view.mapToGlobal(centre)),
            QPoint(0, 0),
            QPoint(0, 120),
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(hm.view.viewport(), wheel)
    lo, hi = hm.plot.getViewBox().viewRange()[0]
    assert hi - lo < 511 / 2, (lo, hi)
    zoomed = shown()
    assert gaps_fit(zoomed) and (zoomed[1] - zoomed[0]) < (whole[1] - whole[0])
    hm.reset_zoom()
    lo, hi = hm.plot.getViewBox().viewRange()[0]
    assert lo <= -0.5 + 1e-6 and hi >= 511.5 - 1e-6


def test_a_tall_thin_matrix_gets_readable_cells(qtbot, errors):
    hm = Heatmap()
    qtbot.addWidget(hm)
    hm.resize(600, 600)
    hm.show()
    hm.show_panel(view_model.panels(big_trace(512, 3), "x")[0])
    qtbot.wait(10)
    width = hm.image_item.sceneBoundingRect().width()
    assert width / 3 >= 40, width  # square cells would make it about 3 pixels wide
    hm.show_panel(view_model.panels(big_trace(4, 3), "x")[0])  # near square: square cells
    qtbot.wait(10)
    rect = hm.image_item.sceneBoundingRect()
    assert rect.width() / 3 == pytest.approx(rect.height() / 4, rel=0.02)


def test_the_side_panel_inputs_are_large_enough_to_read(qtbot, errors, open_window):
    w = open_window(sm.random_session(0, 64, 8, 4, 4, 1), size=(1024, 700))
    w.pipeline.set_step("v")
    qtbot.wait(10)
    shown = [hm for hm in w.pipeline.sources if hm.isVisible()]
    assert len(shown) == 2  # x and w_v feed v
    for hm in shown:
        assert hm.width() >= SOURCE_SIZE and hm.height() >= 140
        image, box = hm.image_item.sceneBoundingRect(), hm.plot.getViewBox().sceneBoundingRect()
        # the matrix fills its tile along its long side (no small picture in a big frame)
        assert max(image.width() / box.width(), image.height() / box.height()) >= 0.95


# ---------------------------------------------------------------- (c) random example


def test_changing_sizes_of_a_random_example_draws_it_again(qtbot, errors, settle, open_window):
    w = open_window(sm.random_session(0, 6, 8, 4, 4, 1))
    w.inputs.num_tokens.setValue(64)
    settle(w)
    s = w.inputs.session
    assert s.preset == "random" and w.inputs.preset.currentData() == "random"
    assert all(any(row) for row in s.query) and len(s.query) == 64
    assert w.outcome.trace["x"].shape == (64, 8)
    w.inputs.heads.setValue(16)
    w.inputs.d_k.setValue(sm.MAX_DIM // 8)
    message = f"heads x d_k = {2 * sm.MAX_DIM} exceeds {sm.MAX_DIM}"
    assert message in w.statusBar().currentMessage()
    assert w.inputs.d_k.value() == 4 and w.inputs.session.d_k == 4  # the work is kept


# ---------------------------------------------------------------- (d) presets


def test_presets_show_titles_and_the_notebook_notes(qtbot, errors, settle, open_window):
    w = open_window(journey())
    box = w.inputs.preset
    for name in core_api.preset_names():
        i = box.findData(name)
        assert box.itemText(i) == core_api.preset_title(name) != name
    i = box.findData("seed001-example2b")
    box.setCurrentIndex(i)
    box.activated.emit(i)
    settle(w)
    notes = w.inputs.preset_notes
    assert notes.isVisible()
    for note in core_api.preset_notes("seed001-example2b"):
        assert re.sub(r"\s+", " ", note)[:40] in notes.text().replace("&#x27;", "'")
    assert any(n.startswith("Slip") for n in core_api.preset_notes("seed001-example2b"))
    w.load_session(sm.random_session(0))
    assert not notes.isVisible()


# ---------------------------------------------------------------- (e) overview


def test_the_overview_draws_the_flow_with_an_arrow_between_stages(qtbot, errors, open_window):
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 2), size=(1024, 700))
    w.tabs.setCurrentWidget(w.overview)
    qtbot.wait(10)
    ov = w.overview
    stages = ov.stages
    assert [n for s in stages for n in s.names] == w.outcome.trace.names()
    assert len(ov.arrows) == len(stages) - 1
    for arrow, before, after in zip(ov.arrows, ov.columns, ov.columns[1:]):
        a, b, c = arrow.geometry(), before.geometry(), after.geometry()
        if b.top() == c.top():  # same row: the arrow sits between the two stages
            assert b.right() <= a.left() and a.right() <= c.left()
        else:  # a new row: the arrow leads into its first stage
            assert a.right() <= c.left() and a.top() >= b.top()
    for name, hm in ov.heatmaps.items():  # each tile is that step, whole, with its shape
        assert hm.panel.step == name and hm.isVisible()
        assert hm.image_item.image.shape == hm.panel.raw.shape


# ---------------------------------------------------------------- (g) layout and keys


def test_at_1024_by_700_nothing_is_clipped(qtbot, errors, open_window):
    w = open_window(journey(backend="torch-cpu", dtype="bfloat16"))
    w.resize(1024, 700)
    qtbot.wait(20)
    assert w.width() == 1024  # the window's minimum fits
    scroll = w.dock.widget()
    assert not scroll.horizontalScrollBar().isVisible()
    assert w.inputs.width() >= w.inputs.minimumSizeHint().width()
    assert w.pipeline.slider.width() >= 250
    dtype = w.inputs.dtype
    assert dtype.currentText() == "bfloat16"
    text = dtype.fontMetrics().horizontalAdvance("bfloat16")
    assert dtype.width() >= text + 20  # room for the text and the arrow


def test_arrow_keys_step_anywhere_but_in_an_editor(qtbot, errors, open_window):
    w = open_window(journey(step="weights"))
    p = w.pipeline
    start = p.slider.value()
    w.tabs.setFocus()
    qtbot.keyClick(w.tabs, Qt.Key.Key_Left)
    assert p.slider.value() == start - 1
    qtbot.keyClick(w.tabs, Qt.Key.Key_End)
    assert p.slider.value() == p.slider.maximum()
    qtbot.keyClick(w.tabs, Qt.Key.Key_Home)
    assert p.slider.value() == 0
    editor = w.inputs.tokens
    editor.setFocus()
    editor.setCursorPosition(3)
    qtbot.keyClick(editor, Qt.Key.Key_Right)
    qtbot.keyClick(editor, Qt.Key.Key_End)
    assert p.slider.value() == 0 and editor.cursorPosition() == len(editor.text())
    spin = w.inputs.num_tokens
    spin.setFocus()
    qtbot.keyClick(spin, Qt.Key.Key_Home)
    qtbot.keyClick(spin, Qt.Key.Key_Right)
    assert p.slider.value() == 0 and spin.value() == 6
    table = w.inputs.tables["query"]
    table.setFocus()
    table.setCurrentIndex(table.model().index(0, 0))
    qtbot.keyClick(table, Qt.Key.Key_Right)
    assert p.slider.value() == 0 and table.currentIndex().column() == 1


def test_check_tab_numbers_fit_their_cells_and_the_colour_bar_is_labelled(qtbot, errors):
    hm = Heatmap()
    qtbot.addWidget(hm)
    hm.resize(420, 500)
    hm.show()
    diff = np.array([[3.6e-4, 8.6e-4, 1.2e-4], [5.0e-5, 2.75e-3, 6.7e-4]])
    panel = view_model.Panel(
        "|output - ground truth|",
        diff.astype(np.float32),
        ["a", "b"],
        ["0", "1", "2"],
        "query",
        "feature",
        "weights",
        (0.0, 3e-3),
        "output",
        None,
        diff,
    )
    hm.show_panel(panel)
    qtbot.wait(10)
    cell = hm.image_item.sceneBoundingRect().width() / 3
    assert len(hm._texts) == 6
    assert len({t.toPlainText() for t in hm._texts}) == 6  # six values, six readings
    for item in hm._texts:
        assert item.isVisible(), item.toPlainText()
        assert item.sceneBoundingRect().width() <= cell, (item.toPlainText(), cell)
    axis = hm.bar.axis
    metrics = QFontMetrics(axis.style.get("tickFont") or axis.font())
    labels = [t for sp, vs in axis.tickValues(0.0, 3e-3, 400) for t in axis.tickStrings(vs, 1, sp)]
    assert len(labels) >= 3
    assert axis.width() >= max(metrics.horizontalAdvance(t) for t in labels) + 5


# ---------------------------------------------------------------- (h) export


def test_png_export_leaves_the_controls_out(qtbot, errors, tmp_path, open_window):
    w = open_window(journey(step="weights"))
    assert w.files.export_png(str(tmp_path / "v.png"))
    image = QImage(str(tmp_path / "v.png"))
    content = w.pipeline.content
    assert (image.width(), image.height()) == (content.width(), content.height())
    assert image.height() <= w.pipeline.height() - w.pipeline.controls.height()


def test_svg_export_keeps_heatmap_cells_sharp(qtbot, errors, tmp_path, open_window):
    w = open_window(journey(step="weights"))
    assert w.files.export_svg(str(tmp_path / "v.svg"))
    root = ET.parse(tmp_path / "v.svg").getroot()
    images = [e for e in root.iter() if e.tag.endswith("image")]
    assert images
    sizes = []
    for e in images:
        assert "image-rendering:pixelated" in e.get("style", "")
        href = next(v for k, v in e.attrib.items() if k.endswith("href"))
        data = base64.b64decode(href.split(",", 1)[1])
        picture = QImage.fromData(data)
        sizes.append((picture.width(), picture.height()))
    assert max(sizes) >= (CRISP_PIXELS // 6 * 6, CRISP_PIXELS // 6 * 6)  # 6x6 upsampled
    assert w.pipeline.heatmaps[0].image_item.image.shape == (6, 6)  # the view is restored


def test_file_dialogs_open_in_documents_then_in_the_last_folder(
    qtbot, errors, tmp_path, open_window
):
    w = open_window(journey())
    first = w.files.start_folder()
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert os.path.isdir(first) and os.path.abspath(first) != checkout
    folder = tmp_path / "exports"
    folder.mkdir()
    assert w.files.export_png(str(folder / "v.png"))
    assert w.files.start_folder() == str(folder)


def test_several_heads_at_1024_get_the_side_panels_room(qtbot, errors, open_window):
    session = dataclasses.replace(sm.random_session(0, 6, 8, 4, 4, 2), mask_mode="causal-top-left")
    w = open_window(session, size=(1024, 700))
    p = w.pipeline
    p.set_head("all")
    qtbot.wait(20)
    shown = [hm for hm in p.heatmaps if hm.isVisible()]
    assert len(shown) == 2 and not p.source_area.isVisible()
    for hm in shown:  # each heatmap's whole layout (axes, colour bar) fits: nothing cut off
        least = hm.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        assert least <= hm.view.width(), (least, hm.view.width())
        assert hm.bar.sceneBoundingRect().right() <= hm.view.width() + 1
        cell = hm.image_item.sceneBoundingRect().width() / 6
        for item in hm._texts:  # a number shows only where its cell holds it
            assert not item.isVisible() or item.sceneBoundingRect().width() <= cell
    p.set_head("0")
    qtbot.wait(20)
    assert p.source_area.isVisible()  # one heatmap: the inputs of the step are back


def test_the_pipeline_writes_each_step_s_kind_of_sentence(qtbot, errors):
    """The sentence under a step is the kind its registry entry names (none for q, concat, a
    gradient), for one head and for several heads with w_o."""
    from gui.pipeline_view import PipelineView

    rng = np.random.default_rng(11)
    x = rng.normal(size=(4, 4)).round(3).tolist()
    w = {n: rng.normal(size=(4, 4)).round(3).tolist() for n in ("w_q", "w_k", "w_v", "w_o")}
    dO = rng.normal(size=(4, 4)).round(3).tolist()
    one = scratch.trace_attention(x, is_causal=True, grad_output=dO)
    heads = scratch.trace_attention(x, **w, num_heads=2, attn_mask=[[True] * 4] * 4)
    view = PipelineView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    said = {}
    for label, trace in (("one", one), ("heads", heads)):
        view.set_trace(trace)
        for name in ("q", "scores", "scaled", "masked", "weights", "head_outputs", "concat",
                     "output", "grad_scores"):  # fmt: skip
            if name in trace:
                view.set_step(name, force=True)
                said[label, name] = view.sentence.text()
    verbs = {
        n: re.findall(r"^'[^']*' (\w+)", said["one", n]) for n in ("scores", "scaled", "weights")
    }
    assert verbs == {"scores": ["matches"], "scaled": ["matches"], "weights": ["attends"]}, said
    assert re.fullmatch(r"\d+ of 16 positions are masked \(-inf\); .*", said["one", "masked"])
    assert " takes its output " in said["one", "output"]
    assert said["heads", "masked"] == "Nothing is masked: every query may attend every key."
    assert " takes its output " in said["heads", "head_outputs"]
    assert said["heads", "output"] == (
        "Each query's output row is the 2 heads' outputs side by side (step head_outputs), "
        "then @ W_o."
    )
    silent = [k for k in said if k[1] in ("q", "concat", "grad_scores")]
    assert len(silent) == 4 and all(said[k] == "" for k in silent), said

"""The desktop app offscreen: every preset and step on screen, edits, files, exports, monkey."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QPointF, Qt  # noqa: E402
from PyQt6.QtWidgets import QApplication  # noqa: E402

import scratch  # noqa: E402
from gui.app.main_window import MainWindow, remembered_session  # noqa: E402
from gui.present import view_model
from gui.state import session as sm  # noqa: E402
from gui.state import session_file
from gui.state.app_state import backend_dtypes  # noqa: E402
from gui.views.check_panel import CheckPanel  # noqa: E402
from gui.widgets.errors import ErrorHandler  # noqa: E402
from gui.widgets.heatmap import Heatmap  # noqa: E402
from gui.widgets.matrix_table import BAD_CELL  # noqa: E402
from scratch.learn import presets

pytestmark = pytest.mark.gui


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def window(open_window):
    """A small random example with one head, its first trace shown."""
    return open_window(sm.random_session(0, 4, 4, 2, 2, 1))


def choose(combo, data) -> None:
    """Pick a combo entry by its data the way a user does (activated is emitted)."""
    i = combo.findData(data)
    assert i >= 0, f"{data!r} not offered"
    combo.setCurrentIndex(i)
    combo.activated.emit(i)


def choose_mask(window, mask: str, align: str | None = None) -> None:
    """Pick the one mask (and its alignment) in the Variant box the way a user does."""
    panel = window.inputs.variant
    if align is not None:
        choose(panel.align, align)
    choose(panel.mask, mask)


def expected(trace, name: str, head: int | None = 0) -> np.ndarray:
    """The step values straight from the trace (one head for head steps), -inf -> NaN."""
    values = np.asarray(trace[name].tolist(), dtype=np.float64)
    if trace[name].axes[0] == "head":
        values = values[head]
    if values.ndim == 1:
        values = values[None, :]
    return np.where(np.isneginf(values), np.nan, values)


def assert_image(heatmap: Heatmap, want: np.ndarray, what: str) -> None:
    """ImageItem.image holds exactly the float32 values (NaN where masked)."""
    image = heatmap.image_item.image
    assert image.shape == want.shape, f"{what}: image shape {image.shape} != {want.shape}"
    assert image.dtype == np.float32 and image.flags["C_CONTIGUOUS"], what
    assert heatmap.image_item.axisOrder == "row-major", what
    same = np.array_equal(image, want.astype(np.float32), equal_nan=True)
    worst = np.nanmax(np.abs(image - want.astype(np.float32))) if image.size else 0
    assert same, f"{what}: image differs from the trace by up to {worst:.3g}"


# ---------------------------------------------------------------- views fed known values


def _hand_trace():
    inf = math.inf
    steps = (
        scratch.Step("masked", "m", [[1.0, -inf], [0.5, -2.0]], "n", ("query", "key")),
        scratch.Step("weights", "w", [[1.0, 0.0], [0.25, 0.75]], "n", ("query", "key")),
    )
    return scratch.Trace(steps, ("a", "b"), ("x", "y"), 1.0)


def test_heatmap_shows_a_hand_made_matrix(qtbot, errors):
    hm = Heatmap()
    qtbot.addWidget(hm)
    panel = view_model.panels(_hand_trace(), "masked")[0]
    hm.show_panel(panel)
    assert_image(hm, np.array([[1.0, np.nan], [0.5, -2.0]]), "masked")
    assert hm.image_item.getLevels().tolist() == [-2.0, 2.0]  # fixed, symmetric, no autolevel
    assert len(hm._texts) == 4  # small matrix: numbers in the cells
    tile = Heatmap(compact=True)  # no colour bar that could reset the levels
    qtbot.addWidget(tile)
    tile.show_panel(panel)
    assert tile.image_item.getLevels().tolist() == [-2.0, 2.0] and tile._texts == []
    big = scratch.Trace(
        (scratch.Step("weights", "w", [[0.5] * 17] * 17, "n", ("query", "key")),),
        tuple(f"t{i}" for i in range(17)),
        tuple(f"t{i}" for i in range(17)),
        1.0,
    )
    hm.show_panel(view_model.panels(big, "weights")[0])
    cell = hm.image_item.sceneBoundingRect().width() / 17  # numbers only while they fit
    assert all(t.sceneBoundingRect().width() <= cell for t in hm._texts)
    assert hm.image_item.getLevels().tolist() == [0.0, 1.0]


def assert_whole_matrix_in_view(hm: Heatmap) -> None:
    """Every cell inside the view: [-0.5, cols - 0.5] x [-0.5, rows - 0.5] at least."""
    rows, cols = hm.panel.image.shape
    (x0, x1), (y0, y1) = hm.plot.getViewBox().viewRange()
    eps = 1e-6
    assert x0 <= -0.5 + eps and x1 >= cols - 0.5 - eps, ((x0, x1), cols)
    assert y0 <= -0.5 + eps and y1 >= rows - 0.5 - eps, ((y0, y1), rows)


def test_wide_and_tall_matrices_are_shown_whole(qtbot, window, settle):
    """Square cells must not cost columns: x (4, 8), w_q (8, 2) and all heads side by side."""
    window.load_session(sm.random_session(0, 4, 8, 2, 2, 2, 2))
    settle(window)
    p = window.pipeline
    for step in ("x", "q", "scores", "output"):
        p.set_step(step)
        for head in ("0", "all"):
            p.set_head(head)
            qtbot.wait(1)
            for hm in (h for h in p.heatmaps if h.isVisible()):
                assert_whole_matrix_in_view(hm)


def test_check_panel_puts_the_map_under_the_table_when_narrow(qtbot):
    """At 1024 pixels the tab is ~620 wide: side by side, the map's colour bar labels were cut."""
    from gui.views.check_panel import SIDE_BY_SIDE_WIDTH

    panel = CheckPanel()
    qtbot.addWidget(panel)
    panel.show()
    for width, orientation in (
        (SIDE_BY_SIDE_WIDTH - 280, Qt.Orientation.Vertical),
        (SIDE_BY_SIDE_WIDTH + 200, Qt.Orientation.Horizontal),
        (SIDE_BY_SIDE_WIDTH - 1, Qt.Orientation.Vertical),
    ):
        panel.resize(width, 600)
        qtbot.waitUntil(lambda w=width: panel.width() == w)
        assert panel.split.orientation() == orientation


def test_check_panel_lists_each_step_and_marks_failures(qtbot, errors):
    trace = _hand_trace()
    rows = [
        scratch.StepCheck(name, diff, bound, diff <= bound, [[diff, 0.0], [0.0, diff / 2]])
        for name, diff, bound in (("masked", 1e-9, 1e-6), ("weights", 0.5, 1e-6))
    ]
    outcome = type(
        "O",
        (),
        dict(
            trace=trace,
            checks=rows,
            backend="numpy",
            dtype="float32",
            kernel="explicit",
            seconds=0.001,
        ),
    )()
    panel = CheckPanel()
    qtbot.addWidget(panel)
    panel.set_outcome(outcome)
    marks = [panel.table.item(r, 4).text() for r in range(panel.table.rowCount())]
    assert marks == ["pass", "FAIL"]
    assert "numpy" in panel.header.text() and "float32" in panel.header.text()
    assert "weights" in panel.header.text()  # named as outside its bound
    assert_image(panel.diff_map, np.array([[0.5, 0.0], [0.0, 0.25]]), "diff of weights")


# ---------------------------------------------------------------- the whole window


def test_every_preset_every_step_shows_the_trace_values(qtbot, window, settle):
    names = presets.names()
    assert names, "scratch.learn.presets offers no presets"
    for name in names:
        choose(window.inputs.preset, name)
        settle(window)
        trace = window.outcome.trace
        assert window.inputs.session.preset == name
        window.pipeline.go(0)
        for n, step in enumerate(trace.names()):
            assert window.pipeline.step_name == step
            assert_image(window.pipeline.heatmaps[0], expected(trace, step), f"{name}/{step}")
            if n + 1 < len(trace):
                qtbot.mouseClick(window.pipeline.next_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(window.pipeline.prev_button, Qt.MouseButton.LeftButton)
        assert window.pipeline.step_name == trace.names()[-2]


def test_keyboard_and_play_move_through_the_steps(qtbot, window):
    p = window.pipeline
    last = len(p.names()) - 1
    p.setFocus()
    qtbot.keyClick(p, Qt.Key.Key_Home)
    assert p.slider.value() == 0
    qtbot.keyClick(p, Qt.Key.Key_Right)
    qtbot.keyClick(p, Qt.Key.Key_Right)
    qtbot.keyClick(p, Qt.Key.Key_Left)
    assert p.step_name == p.names()[1]
    qtbot.keyClick(p, Qt.Key.Key_End)
    assert p.slider.value() == last
    qtbot.keyClick(p, Qt.Key.Key_Home)
    p.speed.setValue(10.0)
    qtbot.keyClick(p, Qt.Key.Key_Space)
    assert p.play_button.isChecked()
    qtbot.waitUntil(lambda: not p.play_button.isChecked(), timeout=60_000)
    assert p.slider.value() == last


def test_hover_explains_the_cell_and_highlights_its_sources(qtbot, window):
    p = window.pipeline
    p.set_step("scores")
    hm = p.heatmaps[0]
    scene = hm.plot.getViewBox().mapViewToScene(QPointF(2, 1))  # column 2, row 1
    hm.view.scene().sigMouseMoved.emit(scene)
    want = scratch.explain(window.outcome.reference, "scores", (1, 2))
    assert p.explanation.text() == want.text
    lit = {s.panel.step: [m.rect() for m in s._marks] for s in p.sources if s.isVisible()}
    assert set(lit) == {"q", "k"}
    cols = window.outcome.trace["q"].shape[1]
    assert [(r.y() + 0.5, r.width()) for r in lit["q"]] == [(1, cols)]  # row 1 of q
    assert [(r.y() + 0.5, r.width()) for r in lit["k"]] == [(2, cols)]  # row 2 of k


def test_cell_edits_valid_and_invalid(qtbot, window, settle):
    model = window.inputs.tables["query"].matrix_model
    index = model.index(1, 2)
    assert model.setData(index, " 0.5 ")
    settle(window)
    assert window.inputs.session.query[1][2] == 0.5
    window.pipeline.set_step("x")
    assert window.pipeline.heatmaps[0].image_item.image[1, 2] == np.float32(0.5)
    for bad in ("abc", "nan", "inf", "-1e400", ""):
        assert not model.setData(index, bad)
        assert model.data(index, Qt.ItemDataRole.BackgroundRole) == BAD_CELL
        assert "X[1][2]" in window.statusBar().currentMessage()  # the tab's title
        assert model.values[1][2] == 0.5 and window.inputs.session.query[1][2] == 0.5
    assert model.setData(index, "-2")
    assert model.data(index, Qt.ItemDataRole.BackgroundRole) is None  # mark cleared
    assert "refused" not in window.statusBar().currentMessage()  # the old refusal is gone


def test_a_refusal_is_signalled_and_only_a_refusal_is_cleared_by_an_accepted_edit(
    qtbot, window, settle
):
    """The status bar knows a refusal by the panel's refused signal, never by its wording."""
    panel, bar = window.inputs, window.statusBar()
    refused, news = [], []
    panel.refused.connect(refused.append)
    panel.message.connect(news.append)
    before = panel.session
    panel.kv_heads.setMaximum(4)  # as if heads were 4 a moment ago
    panel.kv_heads.setValue(3)  # 3 kv heads for 1 head: refused
    assert panel.session is before and news == []
    assert len(refused) == 1 and "num_kv_heads" in refused[0]
    assert bar.currentMessage() == refused[0]
    panel.num_tokens.setValue(5)  # accepted: the refusal no longer applies
    settle(window)
    assert bar.currentMessage() == ""
    # news worded like a refusal is not one: an accepted edit leaves it
    window.say("refused nothing: 3 files exported")
    panel.num_tokens.setValue(6)
    settle(window)
    assert bar.currentMessage() == "refused nothing: 3 files exported"
    # a refusal in other words is still one: the next accepted edit clears it
    panel.refused.emit("that cell holds no number; it stays 0.5")
    assert bar.currentMessage() == "that cell holds no number; it stays 0.5"
    panel.num_tokens.setValue(4)
    settle(window)
    assert bar.currentMessage() == ""


def test_sizes_keep_the_values_that_fit(qtbot, window, settle):
    before = window.inputs.session.query
    window.inputs.num_tokens.setValue(6)
    settle(window)
    s = window.inputs.session
    assert s.query[:4] == before and s.num_tokens == 6
    assert window.outcome.trace["x"].shape == (6, 4)


def test_mask_cells_toggle_and_mask_the_trace(qtbot, window, settle):
    choose_mask(window, "drawn")
    grid = window.inputs.mask_grid
    for i, j in ((0, 1), (2, 3), (2, 3), (3, 0)):
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=grid.cell_center(i, j).toPoint())
    settle(window)
    trace = window.outcome.trace
    allowed = [[(i, j) not in ((0, 1), (3, 0)) for j in range(4)] for i in range(4)]
    assert [list(r) for r in window.inputs.session.variant.drawn] == allowed
    window.pipeline.set_step("masked")
    image = window.pipeline.heatmaps[0].image_item.image
    assert np.isnan(image).tolist() == [[not a for a in r] for r in allowed]
    assert trace["weights"].tolist()[0][1] == 0.0


def test_causal_grid_then_click_makes_a_drawn_mask(qtbot, window, settle):
    choose_mask(window, "causal", "top-left")
    settle(window)
    grid = window.inputs.mask_grid
    assert grid.grid == [[j <= i for j in range(4)] for i in range(4)]
    qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=grid.cell_center(0, 3).toPoint())
    settle(window)
    s = window.inputs.session
    assert s.variant.mask == "drawn" and s.variant.drawn[0] == (True, False, False, True)
    assert window.inputs.variant.mask.currentData() == "drawn"  # the one control says so


def test_a_big_causal_mask_is_drawn_sampled_and_not_clickable(qtbot, window, settle):
    choose_mask(window, "causal", "top-left")
    window.inputs.num_tokens.setValue(100)
    settle(window)
    grid = window.inputs.mask_grid
    picked = [round(k * 99 / 63) for k in range(64)]  # 64 evenly spaced of 100 tokens
    assert grid.grid == [[b <= a for b in picked] for a in picked]  # a triangle, not one colour
    assert "100 x 100 mask drawn at 64 x 64" in grid.toolTip()
    qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=grid.cell_center(0, 40).toPoint())
    settle(window)
    assert window.inputs.session.variant.mask == "causal"


def test_heads_all_average_and_backend(qtbot, window, settle):
    window.inputs.heads.setValue(2)
    settle(window)
    trace = window.outcome.trace
    assert trace.num_heads == 2
    p = window.pipeline
    p.set_step("weights")
    p.set_head("all")
    shown = [hm for hm in p.heatmaps if hm.isVisible()]
    assert len(shown) == 2
    for h, hm in enumerate(shown):
        assert_image(hm, expected(trace, "weights", h), f"weights head {h}")
    p.set_head("average")
    per_head = np.asarray(trace["weights"].tolist())
    assert_image(p.heatmaps[0], per_head.mean(axis=0), "average of heads")
    for backend in backend_dtypes():
        if backend == "scratch":
            continue
        choose(window.inputs.backend, backend)
        choose(window.inputs.dtype, "float32")
        settle(window)
        o = window.outcome
        assert (o.backend, o.dtype) == (backend, "float32")
        assert backend in window.backend_label.text() and "float32" in window.backend_label.text()
        p.set_head("1")
        assert_image(p.heatmaps[0], expected(o.trace, "weights", 1), f"{backend} weights")


def test_session_save_and_open_round_trip(qtbot, window, tmp_path, settle):
    window.inputs.tables["query"].matrix_model.setData(
        window.inputs.tables["query"].matrix_model.index(0, 0), "3.25"
    )
    settle(window)
    window.pipeline.set_step("scores")
    path = tmp_path / "mine.json"
    assert window.files.save_session(str(path))
    saved = window.files.current_session()
    choose(window.inputs.preset, "random")
    window.inputs.seed.setValue(9)
    settle(window)
    assert window.inputs.session != saved
    assert window.files.open_session(str(path))
    settle(window)
    assert window.inputs.session == saved
    assert (
        window.pipeline.step_name == "scores" and window.outcome.trace["x"].tolist()[0][0] == 3.25
    )


@pytest.mark.parametrize(
    "text",
    ['{"version": 1, "x": [[1, 2]', '{"version": 3}', "[]", '{"version": 1, "mode": "self"}'],
)
def test_malformed_session_shows_a_message_and_keeps_the_session(qtbot, window, tmp_path, text):
    before = window.inputs.session
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert not window.files.open_session(str(path))
    assert window.inputs.session == before
    assert "bad.json" in window.warnings[-1] and "kept" in window.warnings[-1]


def test_hand_edited_session_with_a_nan_cell_is_refused(qtbot, window, tmp_path):
    data = window.files.current_session().to_dict()
    data["query"][1][1] = "NaN"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    before = window.inputs.session
    assert not window.files.open_session(str(path))
    assert "query[1][1]" in window.warnings[-1] and window.inputs.session == before


def test_exports_write_valid_files(qtbot, window, tmp_path, settle):
    choose_mask(window, "causal", "top-left")
    settle(window)
    trace = window.outcome.trace
    f = window.files
    assert f.export_png(str(tmp_path / "v.png"))
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f.export_svg(str(tmp_path / "v.svg"))
    assert ET.parse(tmp_path / "v.svg").getroot().tag.endswith("svg")
    assert f.export_trace_json(str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    assert [s["name"] for s in data["steps"]] == trace.names()
    masked = data["steps"][trace.names().index("masked")]["value"]
    assert masked[0][1] == "-inf" and masked[0][0] == trace["masked"].tolist()[0][0]
    assert f.export_csv(str(tmp_path / "csv"))
    files = sorted((tmp_path / "csv").iterdir())
    assert len(files) == len(trace)
    weights_csv = next(p for p in files if p.name.endswith("_weights.csv"))
    rows = list(csv.reader(weights_csv.open()))
    assert rows[0][1:] == list(trace.key_tokens)
    values = [[float(v) for v in r[1:]] for r in rows[1:]]
    assert values == trace["weights"].tolist()


def test_exports_refuse_a_trace_from_earlier_inputs(qtbot, window, tmp_path, settle):
    """After a failed computation the window shows the last good trace; exporting it as if it
    belonged to the new inputs would mislabel the file, so the export is refused."""
    choose(window.inputs.backend, "numpy")
    choose(window.inputs.dtype, "float32")
    settle(window)
    model = window.inputs.tables["query"].matrix_model
    model.setData(model.index(0, 0), "1e45")  # a float64 number, inf in float32: refused
    qtbot.waitUntil(lambda: "not computed" in window.backend_label.text(), timeout=60_000)
    assert not window.files.export_trace_json(str(tmp_path / "t.json"))
    assert not window.files.export_csv(str(tmp_path / "csv"))
    assert "earlier inputs" in window.warnings[-1]
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "csv").exists()
    model.setData(model.index(0, 0), "0.5")
    settle(window)
    qtbot.waitUntil(lambda: "not computed" not in window.backend_label.text(), timeout=60_000)
    assert window.files.export_trace_json(str(tmp_path / "t.json"))


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_copy_as_code_puts_a_running_snippet_on_the_clipboard(qtbot, window, library, settle):
    pytest.importorskip(library)
    choose_mask(window, "causal", "bottom-right")
    settle(window)
    window.files.copy_code(library)
    namespace: dict = {}
    exec(QApplication.clipboard().text(), namespace)  # noqa: S102
    got = np.asarray(namespace["output"], dtype=np.float64)
    want = np.asarray(window.outcome.trace["output"].tolist())
    # float64 rounding: at most a few ulps per summed term (d_model + S terms, values below 4)
    bound = 16 * (4 + 4) * np.finfo(np.float64).eps * 16
    assert got.shape == want.shape and np.max(np.abs(got - want)) <= bound


def test_settings_remember_geometry_and_last_session(qtbot, settings, errors, settle):
    first = MainWindow(settings, sm.random_session(4, 3, 4, 2, 2, 1), dialogs=False)
    qtbot.addWidget(first)
    first.resize(1300, 850)
    first.show()
    settle(first)
    remembered, size = first.files.current_session(), first.size()
    assert (size.width(), size.height()) != (1400, 900)  # differs from the default size
    first.close()
    again = MainWindow(settings, dialogs=False)
    qtbot.addWidget(again)
    settle(again)
    assert again.inputs.session == remembered
    assert again.size() == size


def test_overview_click_opens_the_step(qtbot, window):
    window.tabs.setCurrentWidget(window.overview)
    tiles = window.overview.heatmaps
    assert list(tiles) == window.outcome.trace.names()
    for name in ("scores", "x"):
        tile = tiles[name]
        assert_image(tile, expected(window.outcome.trace, name), f"overview {name}")
        view = tile.view
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.rect().center())
        assert window.tabs.currentWidget() is window.pipeline
        assert window.pipeline.step_name == name
        window.tabs.setCurrentWidget(window.overview)


def test_sizes_that_do_not_fit_are_refused_and_the_work_kept(
    qtbot, window, settings, tmp_path, settle
):
    """heads or kv that do not split the widths: refused with the field named, values kept;
    what is saved or remembered always loads back."""
    window.inputs.tables["query"].matrix_model.setData(
        window.inputs.tables["query"].matrix_model.index(0, 0), "42"
    )
    settle(window)
    window.inputs.heads.setValue(2)  # fits: W_q's columns are resized to 2 heads
    settle(window)
    before, shown = window.inputs.session, window.outcome
    assert before.num_heads == 2 and before.query[0][0] == 42.0
    window.inputs.kv_heads.setMaximum(4)  # as if heads were 4 a moment ago
    window.inputs.kv_heads.setValue(3)  # 3 kv heads do not divide 2 heads
    assert window.inputs.session is before
    assert window.inputs.kv_heads.value() == before.num_kv_heads
    assert window.outcome is shown and not window.worker.busy  # nothing recomputed
    assert "refused" in window.statusBar().currentMessage()
    assert "num_kv_heads" in window.statusBar().currentMessage()
    choose(window.inputs.mode, "self")
    settle(window)
    before = window.inputs.session
    window.inputs.heads.setValue(3)  # 4 columns do not split into 3 heads
    assert window.inputs.session is before and window.inputs.heads.value() == before.num_heads
    # the message of scratch.ops.plan, as the backends say it, naming the session's field
    said = window.statusBar().currentMessage()
    assert "'query': query: width 4 does not split into 3 heads" in said
    assert not window.inputs.kv_heads.isEnabled()  # self-attention: kv heads = heads
    assert window.files.save_session(str(tmp_path / "s.json"))
    assert session_file.load(tmp_path / "s.json") == before
    window.close()
    assert remembered_session(settings) == before  # the edited x[0][0] = 42 survives


def test_large_input_runs_in_the_worker_with_numbers_off(qtbot, window, settle):
    big = sm.random_session(1, 40, 4, 2, 2, 1)
    window.load_session(big)
    assert window.cancel_button.isVisibleTo(window) and window.progress.isVisibleTo(window)
    settle(window)
    window.pipeline.set_step("weights")
    assert window.pipeline.heatmaps[0].image_item.image.shape == (40, 40)
    assert window.pipeline.heatmaps[0]._texts == []
    window.load_session(sm.random_session(2, 64, 4, 2, 2, 1))
    window.cancel_button.click()
    assert not window.worker.busy and "cancelled" in window.statusBar().currentMessage()
    qtbot.wait(50)
    assert window.outcome.trace["x"].shape == (40, 4)  # the cancelled result never shows
    window.worker.wait()


def test_monkey_a_few_hundred_random_actions(qtbot, window):
    rng = random.Random(20240611)
    w, p, i = window, window.pipeline, window.inputs
    buttons = [p.first_button, p.prev_button, p.next_button, p.last_button]
    keys = [Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Home, Qt.Key.Key_End, Qt.Key.Key_A]
    texts = ["1", "-0.5", "abc", "1e308", "1e999", "", " 2 ", "nan", "0x10", "3,5"]

    def edit_cell():
        table = i.tables[rng.choice(i.session.matrices_in_use())].matrix_model
        if table.rowCount() and table.columnCount():
            idx = table.index(rng.randrange(table.rowCount()), rng.randrange(table.columnCount()))
            table.setData(idx, rng.choice(texts))

    def hover():
        hm = p.heatmaps[0]
        hm.view.scene().sigMouseMoved.emit(
            hm.plot.getViewBox().mapViewToScene(QPointF(rng.uniform(-2, 8), rng.uniform(-2, 8)))
        )

    def combo():
        box = rng.choice(
            [
                i.preset,
                i.mode,
                i.scale_mode,
                i.variant.mask,
                i.masked_rows,
                i.backend,
                i.dtype,
                p.head_box,
            ]
        )
        if box.count():
            n = rng.randrange(box.count())
            box.setCurrentIndex(n)
            box.activated.emit(n)

    def spin():
        box = rng.choice(
            [i.num_tokens, i.num_keys, i.d_model, i.d_k, i.d_v, i.heads, i.kv_heads, i.seed]
        )
        box.setValue(rng.randint(1, 6))

    def tokens():
        i.tokens.setText(rng.choice(["a, b", "a,b,c,d", "", "x, y, z, w, v, u"]))
        i.tokens.editingFinished.emit()

    def grid_click():
        g = i.mask_grid
        qtbot.mouseClick(
            g,
            Qt.MouseButton.LeftButton,
            pos=g.cell_center(rng.randrange(6), rng.randrange(6)).toPoint(),
        )

    actions = [
        lambda: qtbot.mouseClick(rng.choice(buttons), Qt.MouseButton.LeftButton),
        lambda: qtbot.keyClick(p, rng.choice(keys)),
        lambda: w.tabs.setCurrentIndex(rng.randrange(3)),
        lambda: p.set_playing(rng.random() < 0.5),
        edit_cell,
        hover,
        combo,
        spin,
        tokens,
        grid_click,
        lambda: w.cancel_button.click(),
    ]
    for _ in range(300):
        rng.choice(actions)()
        if rng.random() < 0.2:
            qtbot.wait(1)
    w.worker.wait()
    qtbot.wait(20)
    assert w.isVisible() and w.pipeline.names()  # still alive and showing a trace


def test_an_unexpected_error_in_a_slot_is_logged_and_the_window_survives(
    qtbot, settings, caplog, settle
):
    handler = ErrorHandler(show_dialog=False).install()
    try:
        w = MainWindow(settings, sm.random_session(0, 3, 4, 2, 2, 1), dialogs=False)
        qtbot.addWidget(w)
        settle(w)

        def broken() -> None:
            raise RuntimeError("planted failure in a slot")

        w.pipeline.stepChanged.connect(broken)
        with caplog.at_level("ERROR", logger="gui"):
            w.pipeline.go(0)
        assert len(handler.errors) == 1 and "planted failure" in handler.errors[0]
        assert "planted failure" in caplog.text
        w.pipeline.stepChanged.disconnect(broken)
        w.pipeline.go(2)  # still working
        assert w.pipeline.step_name == w.pipeline.names()[2]
    finally:
        handler.uninstall()


def test_check_tab_shows_every_step_of_the_comparison(qtbot, window, settle):
    backends = [b for b in backend_dtypes() if b != "scratch"]
    if not backends:
        pytest.skip("only the scratch backend is available")
    choose(window.inputs.backend, backends[0])
    choose(window.inputs.dtype, "float32")
    settle(window)
    checks = window.outcome.checks
    assert checks is not None, "scratch.compare_traces is missing"
    window.tabs.setCurrentWidget(window.checks)
    table = window.checks.table
    assert [table.item(r, 0).text() for r in range(table.rowCount())] == [c.name for c in checks]
    marks = [table.item(r, 4).text() for r in range(table.rowCount())]
    assert marks == ["pass" if c.ok else "FAIL" for c in checks]
    row = [c.name for c in checks].index("weights")
    table.setCurrentCell(row, 0)
    assert_image(window.checks.diff_map, np.abs(np.asarray(checks[row].diff)), "weights diff")
    assert "float32" in window.checks.header.text() and backends[0] in window.checks.header.text()


def test_size_boxes_always_show_the_session_sizes(qtbot, window, settle):
    """kv's maximum follows heads before kv's value is set, so kv is never clamped on screen."""
    choose(window.inputs.mode, "qkv")
    settle(window)
    for heads in (2, 4, 1, 2):
        window.inputs.heads.setValue(heads)
        settle(window)
        s = window.inputs.session
        assert s.num_heads == heads and window.inputs.heads.value() == heads
        assert window.inputs.kv_heads.value() == s.num_kv_heads, (heads, s.num_kv_heads)
    window.inputs.kv_heads.setValue(1)  # grouped-query: 2 heads share one kv head
    settle(window)
    assert window.inputs.session.num_kv_heads == 1 == window.outcome.trace.num_kv_heads


def test_a_new_seed_keeps_the_chosen_options(qtbot, window, settle):
    """Reseeding the random example changes the numbers, not the scale, mask or policy."""
    choose(window.inputs.preset, "random")
    settle(window)
    choose_mask(window, "causal", "bottom-right")
    choose(window.inputs.scale_mode, "none")
    choose(window.inputs.masked_rows, "nan")
    settle(window)
    before = window.inputs.session
    window.inputs.seed.setValue(7)
    settle(window)
    after = window.inputs.session
    assert after.seed == 7 and after.query != before.query
    assert (
        after.variant.mask + " " + after.variant.align,
        after.scale_mode,
        after.masked_rows,
    ) == (
        "causal bottom-right",
        "none",
        "nan",
    )


def test_check_tab_says_when_values_outgrow_the_dtype(qtbot, window, settle):
    """torch float16 with x = 300: scores past 65504 fail, and the header says why."""
    choose(window.inputs.backend, "torch-cpu")
    choose(window.inputs.dtype, "float16")
    settle(window)
    model = window.inputs.tables["query"].matrix_model
    for j in range(model.columnCount()):
        model.setData(model.index(0, j), "300")
    settle(window)
    qtbot.waitUntil(lambda: "CHECK FAILED" in window.backend_label.text(), timeout=60_000)
    assert "outgrew float16 (largest 65504)" in window.checks.header.text()


def test_hover_labels_the_ground_truth_and_states_the_backends_own_value(open_window):
    if "float16" not in backend_dtypes().get("torch-cpu", ()):
        pytest.skip("needs the torch-cpu backend in float16")
    s = sm.random_session(3, 6, 8, 4, 4, 1)
    big_x = tuple(tuple(v * 40 for v in row) for row in s.query)  # large sums: float16 rounds them
    s = dataclasses.replace(s, query=big_x, backend="torch-cpu", dtype="float16")
    window = open_window(s)
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

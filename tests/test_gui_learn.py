"""The Learn tab in the window: Why, the mistakes gallery and the tiles, read from what is drawn
(bar heights, heatmap images, the tile's rectangle, the curve's points), against NumPy."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from gui.present import learn_model  # noqa: E402
from gui.state import session as sm  # noqa: E402
from scratch.learn import mistakes, presets
from tests.journey_sessions import with_mask

pytestmark = pytest.mark.gui
SIZES = [(1024, 700), (1400, 900)]


def journey(mask: str = "causal-top-left") -> sm.Session:
    """The 6-token journey preset (q = k = v = x, scale 1) with a causal mask."""
    return with_mask(sm.from_preset(presets.get("journey")), mask)


def softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """NumPy softmax; an all -inf line gives zeros (masked_rows='zero')."""
    with np.errstate(all="ignore"):
        e = np.exp(s - np.max(s, axis=axis, keepdims=True))
        return np.nan_to_num(e / e.sum(axis=axis, keepdims=True), nan=0.0)


def step(window, name: str) -> np.ndarray:
    """A step of the trace on screen as float64 NumPy."""
    return np.asarray(window.outcome.reference[name].tolist(), dtype=np.float64)


def open_page(qtbot, window, page) -> None:
    """Open the Learn tab on `page` and wait for its workers."""
    window.tabs.setCurrentWidget(window.learn)
    window.learn.pages.setCurrentWidget(page)
    workers = [page.worker] if hasattr(page, "worker") else [page.plant_worker]
    qtbot.waitUntil(lambda: all(not w.busy for w in workers), timeout=60000)


@pytest.fixture
def window(open_window):
    """The window at 1024 x 700 on the causal journey, closed (workers joined) at the end."""
    w = open_window(journey(), size=(1024, 700))
    yield w
    w.close()


def test_why_bars_are_the_learners_weights(window, qtbot):
    why = window.learn.why
    open_page(qtbot, window, why)
    i = why.row.value()
    assert i == 3 and why.result is not None
    scores, scaled = step(window, "scores"), step(window, "scaled")
    causal = np.tril(np.ones((6, 6), dtype=bool))
    d_k = 3
    without, with_scale = (it.opts["height"] for it in why.scale_page.bars.items)
    masked_scores = np.where(causal[i], scores[i], -np.inf)
    np.testing.assert_allclose(without, softmax(masked_scores), rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(with_scale, softmax(masked_scores / np.sqrt(d_k)), rtol=1e-13)
    before, after, zero = (it.opts["height"] for it in why.mask_page.bars.items)
    np.testing.assert_allclose(before, softmax(np.where(causal[i], scaled[i], -np.inf)), rtol=1e-13)
    np.testing.assert_allclose(after, np.where(causal[i], softmax(scaled[i]), 0), rtol=1e-13)
    np.testing.assert_allclose(zero, softmax(np.where(causal[i], scaled[i], 0)), rtol=1e-13)
    # another row: the pages follow it
    why.row.setValue(5)
    qtbot.waitUntil(lambda: not why.worker.busy and why.result[0].row == 5, timeout=60_000)
    np.testing.assert_allclose(why.max_page.bars.items[0].opts["height"], softmax(scaled[5]))
    window.pipeline.set_step("masked")  # the pipeline's step opens its reason
    assert why.pages.currentWidget() is why.mask_page
    # new inputs while the page is open: it follows them (no mask now: the causal one is shown)
    window.load_session(journey("none"))
    qtbot.waitUntil(lambda: not window.worker.busy, timeout=60_000)
    qtbot.waitUntil(lambda: not why.worker.busy and why.result[2].assumed_causal, timeout=60_000)
    assert "has no mask" in why.mask_page.text.text()


def test_mistakes_gallery_draws_each_mistake_and_the_checkers_diagnosis(window, qtbot):
    gallery = window.learn.mistakes
    open_page(qtbot, window, gallery)
    qtbot.waitUntil(lambda: bool(gallery.diagnoses), timeout=120000)
    x = step(window, "x")  # q = k = v = x, scale 1
    causal = np.tril(np.ones((6, 6), dtype=bool))
    s = np.where(causal, x @ x.T, -np.inf)  # (L, E) @ (E, S) -> (L, S)
    want = {
        "softmax over the wrong axis": softmax(s, axis=0),
        "causal off by one": softmax(np.where(np.tril(causal, -1), x @ x.T, -np.inf)),
        "mask applied after softmax": np.where(causal, softmax(x @ x.T), 0.0),
    }
    words = {
        "softmax over the wrong axis": "wrong axis",
        "causal off by one": "causal mask off by one",
        "mask applied after softmax": "mask applied after the softmax",
    }
    for name, w in want.items():
        gallery.names.setCurrentRow(mistakes.NAMES.index(name))
        right = gallery.maps["right weights"].image_item.image
        wrong = gallery.maps["wrong weights"].image_item.image
        np.testing.assert_allclose(right, softmax(s), rtol=1e-6, err_msg=name)  # float32 images
        np.testing.assert_allclose(wrong, w, rtol=1e-6, atol=1e-7, err_msg=name)
        out = gallery.maps["wrong output"].image_item.image
        np.testing.assert_allclose(out, w @ x, rtol=1e-6, atol=1e-7, err_msg=name)
        assert words[name] in gallery.text.text()
    gallery.names.setCurrentRow(mistakes.NAMES.index("no transpose"))
    assert x.shape[1] != 6  # (6, 3) @ (6, 3) cannot run: the panel is empty and says why
    assert np.isnan(gallery.maps["wrong weights"].image_item.image).all()
    assert "does not run on this example" in gallery.text.text()


def test_tiles_step_through_the_online_softmax(window, qtbot):
    tiles = window.learn.tiles
    open_page(qtbot, window, tiles)
    assert tiles.block.value() == 2 and tiles.walk is not None
    x = step(window, "x")
    causal = np.tril(np.ones((6, 6), dtype=bool))
    s = np.where(causal, x @ x.T, -np.inf)
    exact = softmax(s) @ x
    curve = tiles.differences.listDataItems()[0].yData  # before the log axis
    for t in range(3):
        tiles.step.setValue(t)
        stop = 2 * (t + 1)
        rect = tiles.tile_mark.rect()
        assert (rect.left(), rect.width(), rect.height()) == (2 * t - 0.5, 2, 6)
        seen = softmax(s[:, :stop]) @ x[:stop]  # attention over the keys walked so far
        np.testing.assert_allclose(tiles.partial.image_item.image, seen, rtol=1e-6, atol=1e-7)
        want = np.max(np.abs(seen - exact))
        assert curve[t] == pytest.approx(max(want, 1e-17), rel=1e-6, abs=1e-15)
    tiles.dtype.setCurrentText("float16 tiles")
    qtbot.waitUntil(lambda: not tiles.worker.busy and tiles.walk.dtype == "float16", timeout=60_000)
    rounding = tiles.differences.listDataItems()[1].yData
    assert 1e-5 < rounding[-1] < 1e-2  # float16's error entered: about its unit roundoff
    tiles.block.setValue(4)
    qtbot.waitUntil(lambda: not tiles.worker.busy and tiles.walk.block == 4, timeout=60_000)
    assert tiles.step.maximum() == 1


@pytest.mark.parametrize("size", SIZES)
def test_every_page_fits_the_window(open_window, qtbot, size):
    """At both sizes nothing is cut: each heatmap's plot and colour bar lie inside the widget,
    every mistake's name is in view, the tile pickers fit their rows."""
    w = open_window(journey(), size=size)
    try:
        learn = w.learn
        for page in (learn.why, learn.mistakes, learn.tiles):
            open_page(qtbot, w, page)
        qtbot.waitUntil(lambda: bool(learn.mistakes.diagnoses), timeout=120000)
        for page in (learn.mistakes, learn.tiles):
            learn.pages.setCurrentWidget(page)
            qtbot.wait(50)
            maps = (
                list(page.maps.values()) if page is learn.mistakes else [page.scores, page.partial]
            )
            for heat in maps:
                assert heat.view.ci.geometry().width() <= heat.view.width() + 1, type(page).__name__
        names = learn.mistakes.names
        learn.pages.setCurrentWidget(learn.mistakes)
        for n in range(names.count()):
            rect = names.visualItemRect(names.item(n))
            assert names.viewport().rect().contains(rect), names.item(n).text()
        for row in (learn.tiles.layout().itemAt(0), learn.tiles.layout().itemAt(1)):
            assert row.sizeHint().width() <= learn.tiles.width(), size
    finally:
        w.close()


def test_long_examples_are_thinned_and_too_long_ones_refused(open_window, qtbot, monkeypatch):
    s = sm.random_session(0, 100, 4, 2, 2, 1)
    w = open_window(with_mask(s, "causal-top-left"), size=(1024, 700))
    try:
        tiles = w.learn.tiles
        open_page(qtbot, w, tiles)
        assert len(tiles.walk.exact) == learn_model.TILE_ROWS == 64
        assert tiles.rows[0] == 0 and tiles.rows[-1] == 99  # spread to the last row
        assert tiles.block.value() == 12 and "64 of 100 query rows" in tiles.status.text()
        monkeypatch.setattr(learn_model, "MAX_TOKENS", 50)
        w.learn.set_trace(w.outcome.reference)
        assert w.learn.message.isVisible() and not w.learn.pages.isVisible()  # no stale page
        assert "100" in w.learn.message.text()
        monkeypatch.setattr(learn_model, "MAX_TOKENS", 1024)
        w.learn.set_trace(w.outcome.reference)
        assert not w.learn.message.isVisible() and w.learn.pages.isVisible()
    finally:
        w.close()


def test_the_learn_tab_follows_the_pipelines_head(open_window, qtbot):
    w = open_window(sm.random_session(2, 5, 4, 2, 2, 2), size=(1024, 700))
    try:
        w.pipeline.set_head("1")
        why = w.learn.why
        open_page(qtbot, w, why)
        assert why.inputs.head == 1 and "head 1 of 2" in why.status.text()
        scores = np.asarray(w.outcome.reference["scores"].tolist())[1]  # (H, L, S): head 1
        i = why.row.value()
        np.testing.assert_allclose(why.scale_page.bars.items[0].opts["height"], softmax(scores[i]))
        w.pipeline.set_head("average")  # no single head: head 0
        qtbot.waitUntil(lambda: not why.worker.busy, timeout=60_000)
        assert why.inputs.head == 0
    finally:
        w.close()


def test_closing_stops_the_checks_between_two_kernels(open_window, qtbot, monkeypatch):
    """Closed while the gallery's seven checks run, the window waits for the running check only.

    The first check lasts until the close has cancelled the worker: the test does not race the
    worker thread (on a loaded host the checks after the first, their cases cached, ran two
    more before the test's thread closed the window)."""
    checked, worker = [], []
    real = mistakes.diagnose

    def diagnose(name):
        checked.append(name)
        deadline = time.monotonic() + 60
        while len(checked) == 1 and worker[0].busy and time.monotonic() < deadline:
            time.sleep(0.005)  # until close() cancels
        return real(name)

    monkeypatch.setattr(mistakes, "diagnose", diagnose)
    w = open_window(journey(), size=(1024, 700))
    gallery = w.learn.mistakes
    worker.append(gallery.check_worker)
    w.tabs.setCurrentWidget(w.learn)
    w.learn.pages.setCurrentWidget(gallery)
    qtbot.waitUntil(lambda: len(checked) >= 1, timeout=60_000)
    w.close()  # cancels, then joins
    assert gallery.check_worker.pool.activeThreadCount() == 0
    assert len(checked) == 1 and gallery.diagnoses == {}  # stopped; no stale result shown

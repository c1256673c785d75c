"""The Model tab's block view: the view model (no Qt) keeps the block's numbers, shows the chosen
head and colours signed steps symmetrically; the view draws them, reflows without clipping, is
computed off the GUI thread, and its attention and norm boxes open the head grid and pipeline."""

import threading

import pytest

from tests.model_dirs import TEXT, build  # noqa: E402 (skips without numpy, torch, transformers)

np = pytest.importorskip("numpy")

from gui.present import block_view_model as bvm  # noqa: E402
from scratch import models  # noqa: E402
from scratch.models import layer_block  # noqa: E402

GPT2 = ["Token embeddings", "Position embeddings", "Into layer 1", "LayerNorm", "Attention: head 2",
        "Attention output", "+ Residual", "LayerNorm", "MLP (GELU)", "MLP output",
        "+ Residual out", "Output vectors"]  # fmt: skip


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    """A tiny random GPT-2 (3 layers, 3 heads, d_model 12) run on the six-word text."""
    path = tmp_path_factory.mktemp("block_view") / "gpt2"
    build(path, "gpt2")
    return models.load(path).run(TEXT)


def _box(boxes, name):
    (found,) = [b for b in boxes if b.name == name]
    return found


def test_the_boxes_keep_the_blocks_numbers_in_order_with_their_shapes(gpt2_run):
    b = layer_block(gpt2_run, 1)
    boxes = bvm.boxes(b, 2)
    assert [x.title for x in boxes] == GPT2
    T = len(gpt2_run.ids)
    attention = _box(boxes, "attention")
    assert attention.shape == f"3 x {T} x {T} (heads x T x T)" and attention.click == "heads"
    assert np.array_equal(attention.image, b["attention"].value[2].astype(np.float32))
    assert attention.levels == (0.0, 1.0) and attention.kind == "weights"
    assert _box(boxes, "mlp").shape == f"{T} x 48 (T x d_inner)"
    assert _box(boxes, "norm").click == "pipeline"  # x: what the heads read
    for x in boxes:
        assert x.image.dtype == np.float32 and x.image.flags.c_contiguous
        if x.kind == "signed":
            lo, hi = x.levels
            assert lo == -hi and hi == pytest.approx(np.percentile(np.abs(x.image), 99), rel=1e-6)
    # the residual box is the input box plus the attention output box (float32 of the sums)
    want = (b["input"].value + b["attention output"].value).astype(np.float32)
    assert np.array_equal(_box(boxes, "residual").image, want)
    with pytest.raises(ValueError, match="head: expected 0 to 2, found 3"):
        bvm.boxes(b, 3)


def test_a_decoder_box_names_its_norm_its_mlp_and_its_next_tokens(smollm2):
    run = smollm2.run("The capital of France is")
    b = layer_block(run, 0)
    boxes = bvm.boxes(b, 4)
    titles = [x.title for x in boxes]
    assert titles[:3] == ["Token embeddings", "Into layer 0", "RMSNorm"]
    assert "MLP (SwiGLU)" in titles and titles[-1] == "Next-token logits"
    out = boxes[-1]
    assert out.kind == "logits" and out.shape == "5 x 16 (T x top tokens)"
    logits = b["output"].value  # (T, 16): float64 as the run has them
    assert out.levels == (float(logits.min()), float(logits.max()))
    assert np.array_equal(_box(boxes, "attention").image, run.attentions[0, 4].astype(np.float32))


# ---------------------------------------------------------------- the view (pytest-qt)


@pytest.mark.gui
def test_the_view_draws_each_box_and_reflows_without_clipping(qtbot, gpt2_run):
    pytest.importorskip("PyQt6")
    from gui.views.model_block import BOX_W, ModelBlock, box_image

    view = ModelBlock()
    qtbot.addWidget(view)
    view.resize(1024, 600)
    view.show()
    qtbot.waitExposed(view)
    view.show_block(layer_block(gpt2_run, 1))
    boxes = view.boxes
    assert len(boxes) == len(GPT2)
    for w in boxes:  # the picture is the box's matrix, cell for cell, at its levels
        rows, cols = w.box.image.shape
        assert (w.image.width(), w.image.height()) == (cols, rows)
    attention = [w for w in boxes if w.box.name == "attention"][0]
    weights = attention.box.image  # (T, T)
    i, j = np.unravel_index(np.argmax(weights), weights.shape)
    brightest = attention.image.pixelColor(int(j), int(i))
    assert brightest == box_image(attention.box).pixelColor(int(j), int(i))
    assert brightest.green() > 200  # viridis's top end is yellow
    for width in (1024, 560):
        view.resize(width, 600)
        qtbot.waitUntil(lambda: boxes[-1].isVisible(), timeout=60_000)
        view._reflow()
        qtbot.wait(50)
        right = max(w.geometry().right() for w in boxes)
        assert right <= view.scroll.viewport().width(), f"{width}: a box is cut off at the right"
        assert view.columns() >= 2
        assert {w.width() for w in boxes} == {round(BOX_W * view.layout_now()[1])}
        assert not view.scroll.horizontalScrollBar().isVisible()
    view.worker.wait()


@pytest.mark.gui
@pytest.mark.parametrize("size", [(1400, 800), (1024, 560), (700, 400)])
def test_the_boxes_grow_to_fill_a_large_view_and_stay_whole(qtbot, gpt2_run, size):
    """Where every box fits without scrolling at a larger scale, the boxes take it (a large
    window is not mostly empty); nothing is cut off at any size."""
    pytest.importorskip("PyQt6")
    from gui.views.model_block import BOX_W, IMAGE_W, ModelBlock

    view = ModelBlock()
    qtbot.addWidget(view)
    view.resize(*size)
    view.show()
    qtbot.waitExposed(view)
    view.show_block(layer_block(gpt2_run, 1))
    qtbot.wait(50)
    view._reflow()
    qtbot.waitUntil(lambda: view.boxes[-1].isVisible(), timeout=60_000)
    qtbot.wait(50)
    columns, scale = view.layout_now()
    port = view.scroll.viewport()
    right = max(w.geometry().right() for w in view.boxes)
    bottom = max(w.geometry().bottom() for w in view.boxes)
    assert right <= port.width(), f"{size}: a box is cut off at the right"
    assert not view.scroll.horizontalScrollBar().isVisible()
    if size[0] >= 1024:
        assert scale > 1.2, f"{size}: the boxes stayed small ({scale:.2f})"
        assert bottom <= port.height(), f"{size}: the grown boxes need scrolling"
    for w in view.boxes:
        assert w.width() == round(BOX_W * scale)
        assert w.picture.pixmap().width() == round(IMAGE_W * scale)
    view.worker.wait()


@pytest.mark.parametrize("n", [1, 11, 12])
def test_fit_picks_the_largest_scale_that_fits_else_scale_one(n):
    from gui.views.model_block import BOX_W, IMAGE_H, MAX_SCALE, fit

    for width, height in [(1300, 650), (990, 420), (600, 300), (4000, 4000)]:
        columns, scale = fit(n, width, height, 90, 6)
        rows = -(-n // columns)
        if scale > 1:
            assert columns * BOX_W * scale + 6 * (columns - 1) <= width + 1e-9
            assert rows * (90 + round(IMAGE_H * scale)) + 6 * (rows - 1) <= height
            assert scale <= MAX_SCALE
            for c in range(1, n + 1):  # no other column count gives a larger scale that fits
                s = min(MAX_SCALE, (width - 6 * (c - 1)) / c / BOX_W)
                r = -(-n // c)
                if r * (90 + round(IMAGE_H * s)) + 6 * (r - 1) <= height:
                    assert s <= scale
        else:
            assert columns == max(1, (width + 6) // (BOX_W + 6))


@pytest.mark.gui
def test_the_block_tab_computes_off_the_gui_thread_and_opens_the_heads(
    qtbot, open_window, gpt2_run, monkeypatch
):
    pytest.importorskip("PyQt6")
    from gui.state import session as sm

    window = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    panel = window.model
    panel.show_result(gpt2_run)
    window.tabs.setCurrentWidget(panel)
    real, threads = models.layer_block, []

    def probed(run, layer):
        threads.append(threading.current_thread())
        return real(run, layer)

    monkeypatch.setattr(models, "layer_block", probed)
    panel.layer.setValue(2)
    panel.head.setCurrentIndex(panel.head.findData(1))
    with qtbot.waitSignal(panel.block.worker.finished, timeout=60000):
        panel.views.setCurrentWidget(panel.block)
    assert threads and threads[0] is not threading.main_thread()
    shown = panel.block.block
    assert shown.layer == 2 and np.array_equal(shown["attention"].value, gpt2_run.attentions[2])
    attention = [w for w in panel.block.boxes if w.box.name == "attention"][0]
    assert attention.box.title == "Attention: head 1"
    qtbot.mouseClick(attention, qtbot_left())
    assert panel.views.currentIndex() == 0  # the head grid
    panel.views.setCurrentWidget(panel.block)
    qtbot.waitUntil(lambda: not panel.block.worker.busy, timeout=60000)
    norm = [w for w in panel.block.boxes if w.box.name == "norm"][0]
    with qtbot.waitSignal(panel.sessionChosen, timeout=60000) as opened:
        qtbot.mouseClick(norm, qtbot_left())
    assert opened.args[0].preset.endswith("layer 2:head 1")
    qtbot.waitUntil(lambda: not window.worker.busy, timeout=60000)
    panel.block.worker.wait()


def qtbot_left():
    from PyQt6.QtCore import Qt

    return Qt.MouseButton.LeftButton


@pytest.mark.gui
def test_a_long_prompt_leaves_the_views_their_height(qtbot, open_window, smollm2):
    """The status shows a long prompt's end only: at 1024 x 700 the block view keeps its rows."""
    pytest.importorskip("PyQt6")
    from gui.state import session as sm
    from gui.views.model_panel import PROMPT_CHARS
    from gui.work.model_worker import frame
    from scratch.models import decoding

    prompt = "the cat sat on the mat and then it looked at the dog " * 12  # 600 characters
    window = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    panel = window.model
    panel.show_result(frame(decoding.start(smollm2, prompt)))
    window.tabs.setCurrentWidget(panel)
    text = panel.status.text()
    assert prompt[-PROMPT_CHARS:].strip() in text and prompt not in text  # its end, elided
    qtbot.wait(200)  # the layout settles
    assert panel.views.height() >= 380, "the status pushed the views off the window"


def test_max_pool_keeps_the_brightest_cell_of_each_block():
    rng = np.random.default_rng(0)
    a = rng.random((512, 512)) * 0.1  # (T, T)
    a[300, 7] = 0.9
    small = bvm.max_pool(a, 50, 150)
    assert small.shape == (47, 128)  # blocks of 11 x 4 (ceil 512 / 50, ceil 512 / 150)
    assert small.max() == 0.9 and small[300 // 11, 7 // 4] == 0.9
    assert small[0, 0] == a[:11, :4].max()
    small_head = a[:6, :6]  # fits: left as it is
    assert bvm.max_pool(small_head, 50, 150) is small_head

"""The Model tab with a decoder (SmolLM2): next-token bars, Generate one token at a time, the
query heads grouped under the key/value head they share, a head opened with RoPE as a step,
and `main.py --generate N --screenshot`. One SmolLM2 per test session (conftest's smollm2)."""

import threading

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import QTimer  # noqa: E402

from gui.state import session as sm  # noqa: E402
from gui.widgets.model_grid import colour_table, kv_colours  # noqa: E402
from gui.work import model_worker  # noqa: E402
from gui.work.model_worker import frame  # noqa: E402
from tests.test_gui_cli import load_main, png_size  # noqa: E402

pytestmark = pytest.mark.gui
PROMPT = "The capital of France is"
FLOAT64 = 1e-12  # the same float64 sums, perhaps in another order
SMOLLM2_GROUPS = {0: [0, 1, 2], 1: [3, 4, 5], 2: [6, 7, 8]}  # 9 query heads, 3 KV heads: h // 3


@pytest.fixture
def window(open_window):
    """A small random example, its first trace shown."""
    return open_window(sm.random_session(0, 4, 4, 2, 2, 1))


@pytest.fixture(scope="module")
def prompt_frame(smollm2):
    """What the Model tab shows after running the prompt (built as its worker builds it)."""
    from scratch.models import decoding

    return frame(decoding.start(smollm2, PROMPT))


def test_run_model_fills_the_bars_with_the_next_tokens_off_the_gui_thread(
    qtbot, window, smollm2, monkeypatch
):
    panel = window.model
    real, threads, ticked = model_worker.start_model, [], threading.Event()

    def probed(path, text, progress=None):
        threads.append(threading.current_thread())
        ticked.clear()  # from here on only the GUI thread's timer can set it
        assert ticked.wait(20), "the GUI thread handled no timer event while the model ran"
        return real(path, text, progress)

    monkeypatch.setattr(model_worker, "start_model", probed)
    timer = QTimer()
    timer.timeout.connect(ticked.set)
    timer.start(5)
    panel.model_path.setText("smollm2")
    panel.text.setText(PROMPT)
    try:
        with qtbot.waitSignal(panel.worker.finished, timeout=60000):
            panel.run_button.click()
    finally:
        timer.stop()
    assert threads and threads[0] is not threading.main_thread(), "the model ran in the GUI thread"
    run = smollm2.run(PROMPT)
    top = run.next_tokens(10)
    bars = panel.bars
    assert not bars.isHidden() and not panel.generate_bar.isHidden()
    assert bars.tokens == [t for t, _ in top]
    widths = np.asarray(bars.bars.opts["width"], dtype=np.float64)  # what the bars are drawn from
    assert np.abs(widths - [p for _, p in top]).max() <= FLOAT64
    labels = [text for _, text in bars.getPlotItem().getAxis("left")._tickLevels[0]]
    assert labels[:3] == ["␣Paris", "␣the", "␣London"]  # leading spaces shown, not lost
    assert np.abs(panel.grid.attentions - run.attentions).max() <= FLOAT64


def test_generate_appends_the_greedy_token_and_the_grid_shows_its_row(
    qtbot, window, smollm2, prompt_frame
):
    panel = window.model
    panel.show_result(prompt_frame)
    gen = smollm2.generate(PROMPT, 2)  # the public API's greedy tokens and rows
    table = colour_table()
    for step in (1, 2):
        with qtbot.waitSignal(panel.worker.finished, timeout=60000):
            panel.generate_bar.button.click()
        d, S = panel.frame.decoding, 5 + step
        assert list(d.ids) == gen.ids[:step] and d.length == S  # the cache grew by one
        assert panel.grid.attentions.shape == (30, 9, S, S)
        newest = gen.attentions[step - 1]  # (layers, heads, S): the new token over the cache
        assert np.abs(panel.grid.attentions[:, :, -1, :] - newest).max() <= FLOAT64
        assert panel.lines.focus == S - 1 and len(panel.lines.tokens) == S
        assert f"KV cache: {S} tokens" in panel.generate_bar.cache.text()
        if step < 2:
            assert panel.bars.tokens[0] == gen.tokens[step]  # the next greedy pick is on top
    panel.generate_bar.newest.setChecked(True)  # each cell: the newest token's row alone
    assert panel.grid.newest_only
    brightest = tuple(int(c) for c in table[255][:3])
    for layer in range(30):
        for head in range(9):
            image = panel.grid.images[layer][head]
            assert (image.width(), image.height()) == (7, 1)
            j = int(np.argmax(gen.attentions[1][layer, head]))
            colour = image.pixelColor(j, 0)
            assert (colour.red(), colour.green(), colour.blue()) == brightest, (layer, head)


def test_query_heads_stand_under_the_kv_head_they_share(qtbot, window, prompt_frame):
    panel = window.model
    panel.show_result(prompt_frame)
    window.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(panel.grid)
    assert not window.dock.isVisible()  # the Model tab gets the window's width
    grid = panel.grid
    image = grid.grab().toImage()
    colours = kv_colours(3)
    for kv, heads in SMOLLM2_GROUPS.items():
        band = grid.band_rect(kv)
        centres = {h: grid.cell_rect(0, h).center().x() for h in range(9)}
        assert [h for h in range(9) if band.left() <= centres[h] <= band.right()] == heads
        for h in heads:  # the band's colour above each head of the group (its top edge: no text)
            pixel = image.pixelColor(int(centres[h]), int(band.top()) + 1)
            assert pixel.rgb() == colours[kv].rgb(), f"head {h}: not KV {kv}'s colour"
    window.tabs.setCurrentWidget(window.pipeline)
    assert window.dock.isVisible()


def test_a_decoder_head_opens_in_projection_mode_with_rope_as_its_variant(
    qtbot, window, smollm2, prompt_frame
):
    """x -> q -> rotated q -> scores in the pipeline: the head's x and W columns, its KV head's
    W_k, W_v, the variant causal + RoPE; its weights are the run's, its output the ground
    truth's."""
    panel = window.model
    panel.show_result(prompt_frame)
    panel.layer.setValue(2)  # the head view's pickers, then its Open in pipeline button
    panel.head.setCurrentIndex(panel.head.findData(4))
    assert panel.lines.heads == [4] and panel.lines.focus == 4  # the newest token's lines
    assert panel.head_note.text().startswith("Head 4 reads KV head 1 (with heads 3, 5).")
    panel.open_button.click()
    assert panel.grid.selected == (2, 4)
    opened = "layer 2:head 4 (RoPE; KV head 1)"
    qtbot.waitUntil(
        lambda: not window.worker.busy and window.outcome.session.preset.endswith(opened),
        timeout=60000,
    )
    s, trace = window.outcome.session, window.outcome.trace
    assert window.tabs.currentWidget() is window.pipeline
    assert s.mode == "project" and (s.num_tokens, s.d_model, s.d_k) == (5, 576, 64)
    assert (s.variant.mask, s.variant.rope, s.variant.rope_base) == ("causal", "half", 100000.0)
    names = trace.names()
    assert names[names.index("q") :][:6] == ["q", "k", "v", "q_rotated", "k_rotated", "scores"]
    shown = window.pipeline.names()  # the pipeline's own steps: x, W, q, ..., rotated q, scores
    assert shown[0] == "x" and shown.index("q") < shown.index("q_rotated") < shown.index("scores")
    window.pipeline.set_step("q")  # q = x @ W_q: x's 576 columns, no bias column
    assert window.pipeline.step_name == "q"
    weights = np.asarray(trace["weights"].value)
    assert np.abs(weights - prompt_frame.attentions[2, 4]).max() <= 1e-9  # run.trace's AGREEMENT
    truth = smollm2.run(PROMPT).trace(2, 4)  # pure Python: q, k turned by scratch.rotary
    for name, step in (("q", "q_rotated"), ("k", "k_rotated"), ("output", "output")):
        gap = np.abs(np.asarray(trace[step].value) - np.asarray(truth[name].value)).max()
        assert gap <= FLOAT64, f"{step}: {gap:.3g} from the ground truth's {name}"
    assert window.outcome.checks and all(c.ok for c in window.outcome.checks)


def test_main_generates_and_screenshots_the_generation_view(qtbot, tmp_path, smollm2, monkeypatch):
    from gui.widgets import export

    main = load_main()
    seen = []
    real = export.widget_png

    def capture(window):
        seen.append((window.tabs.currentWidget() is window.model, window.model.frame))
        return real(window)

    monkeypatch.setattr(export, "widget_png", capture)
    out = tmp_path / "generation.png"
    args = ["--model", "smollm2", "--text", PROMPT, "--generate", "1"]
    assert main.main([*args, "--size", "1024x700", "--screenshot", str(out)]) == 0
    assert png_size(out) == (1024, 700)
    ((on_model_tab, shown),) = seen
    assert on_model_tab and shown.tokens[5:] == [" Paris"]  # as transformers' greedy


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--generate", "2"], "--generate: needs --model"),
        (["--model", "default", "--generate", "2"], "is not a decoder; try --model smollm2"),
    ],
)
def test_generate_without_a_decoder_is_a_usage_error(tmp_path, capsys, args, words):
    main = load_main()
    out = tmp_path / "x.png"
    if "default" in args:
        pytest.importorskip("safetensors")
    assert main.main([*args, "--screenshot", str(out)]) == 2
    assert words in capsys.readouterr().err and not out.exists()


def test_help_says_what_generate_and_model_do(capsys):
    main = load_main()
    with pytest.raises(SystemExit):
        main.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--generate N" in text and "add N greedy tokens" in text
    assert "'smollm2' (SmolLM2-135M-Instruct, a decoder" in text
    with pytest.raises(SystemExit):
        main.parse_args(["--generate", "0"])
    assert "expected 1 to 256, found 0" in capsys.readouterr().err


def test_thirty_layers_of_nine_heads_stay_readable_at_1024x700(qtbot, open_window, prompt_frame):
    from PyQt6.QtGui import QFont, QFontMetrics

    from gui.widgets.model_grid import GAP

    window = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    panel = window.model
    panel.show_result(prompt_frame)
    window.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(panel.grid)
    font = QFont()
    font.setPointSize(8)  # the grid's labels
    metrics = QFontMetrics(font)
    for newest in (False, True):
        panel.generate_bar.newest.setChecked(newest)
        qtbot.waitUntil(lambda: panel.grid.height() >= panel.grid.minimumHeight(), timeout=60_000)
        assert (window.width(), window.height()) == (1024, 700)  # nothing widened the window
        grid = panel.grid
        rows = [grid.cell_rect(layer, 0) for layer in range(30)]
        assert rows[0].height() >= metrics.height(), "a layer label is taller than its row"
        assert all(b.top() - a.bottom() >= GAP - 1e-9 for a, b in zip(rows, rows[1:]))
        lefts = sorted(grid.cell_rect(0, h).left() for h in range(9))
        assert min(b - a for a, b in zip(lefts, lefts[1:])) > metrics.horizontalAdvance("H8")
        assert grid.height() >= rows[-1].bottom()  # the scroll area reaches layer 29
        assert panel.grid_scroll.verticalScrollBar().maximum() > 0  # and scrolls to it

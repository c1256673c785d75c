"""Issue 23 item 8's small defects: the options open the window on screen as they open a
screenshot (--head, a bad --step), the Model tab hides the example's status, and a model head
in the pipeline says why d_model is one more than the model's."""

import dataclasses

import pytest

from gui.state import session as sm
from scratch.learn import presets


def test_a_bad_step_is_refused_before_the_window_opens(monkeypatch, capsys):
    import main

    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    assert main.main(["--step", "wieghts"]) == 2
    err = capsys.readouterr().err
    assert "unknown step 'wieghts'" in err and "weights" in err, err


def test_the_model_head_note_names_the_bias_column():
    from gui.state.head_note import model_head_note

    s = sm.random_session(0, 4, 4, 2, 2, 1)
    assert model_head_note(s) == ""
    x1 = tuple((*row, 1.0) for row in s.query)  # (T, d_model + 1): the bias column
    w = tuple((*row,) for row in s.w_q) + ((0.5, 0.5),)
    head = dataclasses.replace(
        s, query=x1, w_q=w, w_k=w, w_v=w, preset="model:all-MiniLM-L6-v2:layer 0:head 3"
    )
    note = model_head_note(head)
    assert "all-MiniLM-L6-v2, layer 0, head 3" in note
    assert "d_model 4 + 1" in note and "b_q" in note
    # a decoder's head (RoPE, no biases): no bias column to speak of (it said "575 + 1")
    from scratch.variants.choice import VariantChoice

    rope = dataclasses.replace(
        s, variant=VariantChoice(mask="causal", rope="half"),
        preset="model:SmolLM2-135M-Instruct:layer 29:head 1 (RoPE; KV head 0)",
    )  # fmt: skip
    note = model_head_note(rope)
    assert "d_model 4: X is the layer's RMSNorm'd input" in note and "+ 1" not in note
    assert "half pairing" in note and "b_q" not in note


@pytest.mark.gui
def test_head_and_tab_open_on_screen_too(open_window, qtbot):
    pytest.importorskip("PyQt6")
    import main

    w = open_window(sm.random_session(0, 4, 4, 2, 2, 2))
    args = main.parse_args(["--step", "weights", "--head", "all", "--tab", "check"])
    args.train_run = None  # what main() reads from --run (none here)
    main.open_as_asked(w, args)
    qtbot.waitUntil(lambda: not w.worker.busy and w.outcome is not None, timeout=60_000)
    assert w.tabs.currentWidget() is w.checks
    assert w.pipeline.head == "all"
    assert w.pipeline.step_name == "weights"
    assert w.pipeline.head_box.currentData() == "all"


@pytest.mark.gui
def test_the_model_tab_hides_the_examples_inputs_and_verdict(open_window):
    pytest.importorskip("PyQt6")
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    assert "all steps pass" in w.backend_label.text()
    assert not w.backend_label.isHidden() and not w.dock.isHidden()
    w.tabs.setCurrentWidget(w.model)
    assert w.dock.isHidden()
    assert w.backend_label.isHidden()  # the toy example's "all steps pass" is not the model's
    w.tabs.setCurrentWidget(w.pipeline)
    assert not w.backend_label.isHidden() and not w.dock.isHidden()


@pytest.mark.gui
def test_a_model_head_in_the_pipeline_says_d_model_has_a_bias_column(open_window):
    pytest.importorskip("PyQt6")
    models = pytest.importorskip("scratch.models")
    from gui.state.model_session import head_session

    try:
        run = models.load().run("Your journey starts with one step")
    except models.ModelError as exc:
        pytest.skip(f"default model not installed: {exc}")
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    w.load_session(head_session(run, 0, 3))
    notes = w.inputs.preset_notes
    assert not notes.isHidden()
    assert "d_model 384 + 1" in notes.text() and "b_q" in notes.text(), notes.text()
    assert w.inputs.session.preset.endswith("layer 0:head 3")


@pytest.mark.gui
def test_a_one_token_cache_says_1_token(open_window, qtbot, smollm2):
    pytest.importorskip("PyQt6")
    from gui.work.model_worker import frame
    from scratch.models import decoding

    start = decoding.start(smollm2, "Hi")
    assert len(start.prompt.ids) == 1, start.prompt.ids  # one token, nothing generated yet
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    w.model.show_result(frame(start), "smollm2")
    w.model.generate_bar.newest.setChecked(True)  # the grid title then counts the cache
    w.model._show_grid()
    cache = w.model.generate_bar.cache.text()
    assert cache.startswith("KV cache: 1 token (1 + 0 new)"), cache
    assert "over the 1 token in the cache" in w.model.grid_title.text(), w.model.grid_title.text()


@pytest.mark.gui
def test_a_longer_presets_notes_are_shown_whole_after_a_switch(qapp, settings):
    """The notes label kept the height of the previous preset's notes and cut the new ones
    (222 of 250 pixels at 1024 x 700)."""
    import time

    from gui.app.main_window import MainWindow

    w = MainWindow(settings, sm.from_preset(presets.get("journey")), dialogs=False)
    try:
        w.resize(1024, 700)
        w.show()

        def settle() -> None:
            end = time.monotonic() + 20
            while (w.worker.busy or w.outcome is None) and time.monotonic() < end:
                qapp.processEvents()
                time.sleep(0.01)
            for _ in range(20):
                qapp.processEvents()

        settle()
        box = w.inputs.preset
        box.setCurrentIndex(box.findData("seed002"))
        box.activated.emit(box.currentIndex())
        settle()
        notes = w.inputs.preset_notes
        assert "sums each term over the features" in notes.text()
        assert notes.height() >= notes.heightForWidth(notes.width())
    finally:
        w.close()
        w.deleteLater()

"""The Train tab: training in a worker (start, pause, resume, cancel, joined), the scrubber
showing each snapshot's weights, a click opening the head's layer as a session whose x is the
probe's layer input, File > Open run refusing a bad file, and the tab fitting 1024 x 700."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtCore import Qt  # noqa: E402

from gui.state import session as sm  # noqa: E402
from scratch.train import ModelConfig, TrainConfig, Trainer, run_file  # noqa: E402

pytestmark = pytest.mark.gui


def tiny_config(seed: int = 0, steps: int = 6, lr: float = 1e-3, **model: object) -> TrainConfig:
    """A model small enough that a step takes milliseconds (context 7, d_model 4, batch 2)."""
    shape = dict(vocab=8, context=7, d_model=4, n_layers=2, n_heads=2) | model
    return TrainConfig(
        task="induction", steps=steps, batch=2, snapshot_every=2, seed=seed, lr=lr,
        model=ModelConfig(**shape),
    )  # fmt: skip


def tiny_run(seed: int = 0, **model: object) -> object:
    """Six steps at a learning rate of 0.1: the heads move 0.03 away from uniform weights (at
    1e-3 they stayed within 2e-7 of it, and another layer's weights drew the same picture)."""
    return Trainer(tiny_config(seed, lr=0.1, **model)).advance()


@pytest.fixture
def tab(qtbot, errors):
    from gui.views.train_tab import TrainTab

    shown = TrainTab()
    qtbot.addWidget(shown)
    shown.resize(900, 650)
    shown.show()
    yield shown
    shown.wait()  # training stopped and its worker joined


def test_start_pause_resume_and_cancel_between_pieces(tab, qtbot):
    tab.worker.piece = 1
    assert tab.start(tiny_config(steps=100_000))  # never finishes within the test
    trainer = tab.worker.trainer
    qtbot.waitUntil(lambda: tab.run.steps_done >= 2, timeout=60_000)
    tab.pause_or_resume()  # Pause: the job ends after its piece
    qtbot.waitUntil(lambda: not tab.worker.busy, timeout=60_000)
    assert tab.worker.wait(60_000)  # the job has returned: no thread trains any more
    paused_at = trainer.run.steps_done
    qtbot.waitUntil(lambda: tab.run.steps_done == paused_at, timeout=60_000)  # the last piece
    assert tab.paused and tab.pause_button.text() == "Resume"
    assert trainer.run.steps_done == paused_at  # nothing ran while paused
    tab.pause_or_resume()  # Resume: the same trainer goes on
    assert tab.worker.trainer is trainer and tab.pause_button.text() == "Pause"
    qtbot.waitUntil(lambda: tab.run.steps_done > paused_at, timeout=60_000)
    tab.cancel()
    assert not tab.worker.busy and tab.worker.trainer is None
    assert tab.worker.wait(60_000)  # joined: the job stopped between two steps
    stopped = trainer.run.steps_done
    assert 2 <= stopped < 100_000 and not tab.paused
    assert tab.run.steps_done <= stopped  # the steps drawn so far stay on screen
    assert not tab.pause_button.isEnabled() and not tab.cancel_button.isEnabled()


def test_the_windows_timers_fire_while_it_redraws_every_step(tab, qtbot):
    """A redraw per step, each taking longer than a step: the GUI thread still has idle time
    (a redraw posted the moment the last one ended starved every timer: a test's waitUntil
    returned only when the 100,000 steps were done)."""
    from PyQt6.QtCore import QTimer

    tab.worker.piece = 1
    assert tab.start(tiny_config(steps=5_000))  # 15-40 s here: a starved wait ends with it
    qtbot.waitUntil(lambda: tab.run.steps_done >= 1, timeout=60_000)
    fired = []
    for delay in (0, 50, 200):
        QTimer.singleShot(delay, lambda d=delay: fired.append(d))
    qtbot.waitUntil(lambda: len(fired) == 3, timeout=10_000)
    assert tab.worker.busy and tab.worker.trainer.run.steps_done < 5_000  # still training
    tab.cancel()
    assert tab.worker.wait(60_000)


def test_a_run_trains_to_its_end_and_is_drawn_whole(tab, qtbot):
    assert tab.start(tiny_config(steps=9))
    qtbot.waitUntil(lambda: not tab.worker.busy and tab.run.steps_done == 9, timeout=60_000)
    expected = Trainer(tiny_config(steps=9)).advance()  # seeded: the same run, bit for bit
    assert tab.run.losses == expected.losses
    assert [s.step for s in tab.run.snapshots] == [0, 2, 4, 6, 8, 9]
    assert tab.progress.value() == 9 and tab.scrubber.value() == tab.scrubber.maximum() == 5
    drawn = tab.loss.scored.getData()[1]
    assert len(drawn) == 9 and drawn[0] == pytest.approx(expected.scored_losses[0])


def masked_weights(w: np.ndarray) -> np.ndarray:
    """A causal head's weights as the heatmap draws them: unseen keys NaN (grey)."""
    T = w.shape[0]
    return np.where(np.tril(np.ones((T, T), bool)), w, np.nan).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_scrubber_shows_each_snapshots_weights(tab, seed):
    run = tiny_run(seed)
    tab.open_run(run)
    assert tab.scrubber.maximum() == len(run.snapshots) - 1
    for layer, head in ((seed % 2, 1 - seed % 2),):  # over the seeds: both layers, both heads
        tab.head = (layer, head)
        for index, snapshot in enumerate(run.snapshots):
            tab.scrubber.setValue(index)
            shown = tab.heatmap.image_item.image
            want = masked_weights(snapshot.weights[layer][head])
            np.testing.assert_array_equal(shown, want, err_msg=f"snapshot {index}")
            grid = np.stack(snapshot.weights)  # (layers, heads, T, T)
            np.testing.assert_array_equal(tab.grid.attentions, grid, err_msg=f"grid {index}")
            assert tab.loss.now.value() == snapshot.step


def layer_inputs(params: dict, probe: np.ndarray, heads: int) -> list[np.ndarray]:
    """Each layer's input on the probe, written out here for an attention-only causal model:
    x0 = w_te[probe] + w_pe[:T]; x1 = x0 + concat(softmax(q k^T / sqrt(dh)) v) @ w_o."""
    T = len(probe)
    x = (params["w_te"][probe] + params["w_pe"][:T]).astype(np.float64)
    found = [x]
    layer = 0
    while f"{layer}.w_q" in params:
        q, k, v = (x @ params[f"{layer}.w_{n}"].astype(np.float64) for n in "qkv")
        dh = q.shape[1] // heads
        outs = []
        for h in range(heads):
            cols = slice(h * dh, (h + 1) * dh)
            scores = q[:, cols] @ k[:, cols].T / np.sqrt(dh)
            scores[np.triu(np.ones((T, T), bool), 1)] = -np.inf
            w = np.exp(scores - scores.max(axis=1, keepdims=True))
            outs.append((w / w.sum(axis=1, keepdims=True)) @ v[:, cols])
        x = x + np.concatenate(outs, axis=1) @ params[f"{layer}.w_o"].astype(np.float64)
        found.append(x)
        layer += 1
    return found


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_click_on_a_head_opens_its_layer_at_that_step(tab, qtbot, seed):
    run = tiny_run(seed)
    tab.open_run(run)
    tab.scrubber.setValue(2)  # step 4
    snapshot = run.snapshots[2]
    inputs = layer_inputs(snapshot.params, run.probe, heads=2)
    for layer, head in ((0, 1), (1, 0), (1, 1)):
        centre = tab.grid.cell_rect(layer, head).center().toPoint()
        with qtbot.waitSignal(tab.sessionChosen, timeout=60_000) as chosen:
            qtbot.mouseClick(tab.grid, Qt.MouseButton.LeftButton, pos=centre)
        s = chosen.args[0]
        assert tab.head == (layer, head)
        np.testing.assert_allclose(np.array(s.query), inputs[layer], rtol=1e-5, atol=1e-7)
        for name in ("w_q", "w_k", "w_v"):
            np.testing.assert_array_equal(
                np.array(getattr(s, name)), snapshot.params[f"{layer}.{name}"].astype(np.float64)
            )
        assert (s.mode, s.num_heads, s.num_kv_heads) == ("project", 2, 2)
        assert s.variant.mask == "causal" and s.preset.startswith("model:")
        assert "step 4" in s.preset and f"head {layer + 1}.{head + 1}" in s.preset
        assert s.tokens == tuple(str(t) for t in run.probe)


def test_the_clicked_layer_recomputes_the_snapshots_weights(tab, qtbot):
    """The pipeline's trace of the opened session has the weights the run kept (float32)."""
    from gui.state import controller

    run = tiny_run(3, n_kv_heads=1)  # grouped-query attention: both heads read one KV head
    tab.open_run(run)
    tab.scrubber.setValue(3)
    s = tab.open_head(1, 1)
    trace = controller.run(s).trace
    weights = next(step.value for step in trace.steps if step.name == "weights")
    np.testing.assert_allclose(weights, run.snapshots[3].weights[1], rtol=0, atol=1e-6)


def test_open_run_refuses_a_bad_file_and_keeps_the_run(open_window, qtbot, tmp_path):
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    good = tmp_path / "run.npz"
    run_file.save(tiny_run(0), good)
    assert w.files.open_run(str(good))
    shown = w.train.run
    assert w.tabs.currentWidget() is w.train and shown.steps_done == 6
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(good.read_bytes()[:200])  # a cut file
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, losses=np.zeros(3))
    for bad in (corrupt, foreign, tmp_path / "missing.npz"):
        assert not w.files.open_run(str(bad))
        assert "not a training run" in w.warnings[-1] and "The run is kept" in w.warnings[-1]
        assert w.train.run is shown
    saved = tmp_path / "saved.npz"
    assert w.files.save_run(str(saved))
    assert run_file.load(saved).losses == shown.losses


def test_a_train_head_opens_in_the_pipeline_with_the_toy_banner(open_window, settle):
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    toy = w.inputs.session
    w.train.open_run(tiny_run(0))
    s = w.train.open_head(1, 1)
    settle(w)
    assert w.inputs.session == s and w.tabs.currentWidget() is w.pipeline
    assert w.pipeline.head == "1" and w.toy_banner.isVisible() and w.toy_banner.toy == toy
    w.train.open_head(0, 0, backward=True)
    assert w.tabs.currentWidget() is w.backward


@pytest.mark.parametrize("size", [(1024, 700), (1400, 900)])
def test_the_train_tab_fits_the_window(open_window, qtbot, size):
    from tests.test_fonts_fit import cut_texts

    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=size)
    w.train.open_run(tiny_run(0))
    w.tabs.setCurrentWidget(w.train)
    hint = w.minimumSizeHint()
    assert hint.width() <= 1024 and hint.height() <= 700, hint
    qtbot.waitUntil(lambda: not cut_texts(w), timeout=60_000)
    assert (w.width(), w.height()) == size
    heat = w.train.heatmap
    assert heat.view.ci.geometry().width() <= heat.view.width() + 1


def test_open_in_backward_differentiates_for_the_training_steps_own_dO(open_window, qtbot):
    """The Backward tab offers 'from the training step' only for a layer opened from a run,
    chooses it, says which step it is from, and its trace starts from the model's own dO."""
    from gui.views.backward_view import TRAINING
    from scratch.train import Model

    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    toy = w.inputs.session
    box = w.backward.kind

    def offered() -> list:
        return [box.itemData(i) for i in range(box.count())]

    assert TRAINING not in offered()  # a toy example has no training dO
    run = tiny_run(1)
    w.train.open_run(run)
    w.train.scrubber.setValue(2)  # step 4
    w.train.head = (1, 1)
    w.train.backward_button.click()
    assert w.tabs.currentWidget() is w.backward
    assert w.backward.pipeline.head == "1"  # the head clicked, shown there too
    qtbot.waitUntil(
        lambda: (
            not w.backward_worker.busy
            and w.backward_outcome is not None
            and w.backward_outcome.session.grad_output == TRAINING
        ),
        timeout=60_000,
    )
    assert TRAINING in offered() and box.currentData() == TRAINING
    assert "step 4 on the probe" in w.backward.about.text()
    params = {k: v.astype(np.float64) for k, v in run.snapshots[2].params.items()}
    model = Model(run.config.model)
    fwd = model.forward(params, run.probe[None], run.probe_targets[None])
    mine = model.attention_grad_outputs(params, fwd)[1].grad_output[0]  # (H, T, dh): layer 2's
    found = np.asarray(w.backward_outcome.trace["grad_head_outputs"].tolist())
    np.testing.assert_array_equal(found, mine)
    w.load_session(toy)  # the toy example back: its dO choice no longer lists the training one
    assert TRAINING not in offered() and box.currentData() == toy.grad_output

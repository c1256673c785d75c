"""scratch.train: the tiny transformer's gradients, Adam, scores, the record and its file.

Every hand-written backward line is compared with torch autograd on the same model in float64
(scratch/train/torch_model.py), over random configurations; the attention inside runs through the
NumPy backend's kernels and, for a tiny model, through the pure-Python ground truth.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from scratch.train import ModelConfig, TrainConfig, Trainer, load, save
from scratch.train.__main__ import main
from scratch.train.adam import Adam
from scratch.train.model import Model, init_params
from scratch.train.scores import head_scores
from scratch.train.tasks import make_task
from scratch.train.torch_model import torch_gradients
from scratch.train.words import phase_change, summary

# no explain phase: a planted gradient bug must fail in seconds, not search for minutes
FAST_FAIL = settings(max_examples=30, phases=[Phase.explicit, Phase.generate, Phase.shrink])


def sharpened(params: dict, factor: float = 10.0) -> dict:
    """The weights times `factor` (norms kept): attention far from uniform, gradients large."""
    return {k: v if "ln" in k else v * factor for k, v in params.items()}


def one_step(config: ModelConfig, seed: int, backend: str = "numpy", batch: int = 3):
    """(params, inputs, targets, loss, gradients) of one step in float64."""
    rng = np.random.default_rng(seed)
    params = sharpened(init_params(config, rng, "float64"))
    inputs = rng.integers(0, config.vocab, size=(batch, config.context))
    targets = rng.integers(0, config.vocab, size=(batch, config.context))
    model = Model(config, backend)
    fwd = model.forward(params, inputs, targets)
    return params, inputs, targets, fwd.loss, model.backward(params, fwd)


@st.composite
def configs(draw) -> ModelConfig:
    """Small random models: layers, heads, GQA, MLP, norm, causal or not."""
    heads = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
    return ModelConfig(
        vocab=draw(st.integers(3, 9)),
        context=draw(st.integers(1, 7)),
        d_model=heads * draw(st.integers(1, 3)),
        n_layers=draw(st.integers(1, 3)),
        n_heads=heads,
        n_kv_heads=kv,
        mlp=draw(st.booleans()),
        norm=draw(st.booleans()),
        causal=draw(st.booleans()),
    )


@FAST_FAIL
@given(config=configs(), seed=st.integers(0, 2**16))
def test_one_steps_gradients_equal_torch_autograd_in_float64(config, seed):
    params, inputs, targets, loss, grads = one_step(config, seed)
    torch_loss, expected = torch_gradients(config, params, inputs, targets)
    assert abs(loss - torch_loss) <= 1e-12 * max(1.0, abs(torch_loss))
    assert set(grads) == set(expected)
    for name, g in grads.items():
        assert g.shape == expected[name].shape, name
        err = float(np.max(np.abs(g - expected[name])))
        assert err <= 1e-12, f"{name}: max |numpy - torch| = {err:.3g} ({config})"


@pytest.mark.parametrize("shards", [2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_a_batch_split_over_threads_gives_torchs_gradients(shards, seed):
    # Trainer.step splits each batch over threads (TrainConfig.threads): each part's gradient
    # of its own mean loss, weighted by its share of the batch (5 rows: parts of 3 and 2 rows)
    config = ModelConfig(vocab=7, context=6, d_model=8, n_heads=2, n_kv_heads=1, mlp=True)
    params, inputs, targets, *_ = one_step(config, seed, batch=5)
    losses, grads = Model(config).gradients(params, inputs, targets, shards)
    torch_loss, expected = torch_gradients(config, params, inputs, targets)
    assert abs(float(losses.mean()) - torch_loss) <= 1e-12 * max(1.0, abs(torch_loss))
    assert set(grads) == set(expected)
    for name, g in grads.items():
        assert g.shape == expected[name].shape and g.dtype == params[name].dtype, name
        err = float(np.max(np.abs(g - expected[name])))
        assert err <= 1e-12, f"{name}: max |numpy - torch| = {err:.3g} ({shards} parts)"


@pytest.mark.parametrize("mlp_norm", [False, True])
def test_the_pure_python_ground_truth_computes_the_same_step(mlp_norm):
    config = ModelConfig(vocab=5, context=4, d_model=4, n_layers=2, n_heads=2, n_kv_heads=1,
                         mlp=mlp_norm, norm=mlp_norm)  # fmt: skip
    *_, loss, fast = one_step(config, seed=3, backend="numpy", batch=2)
    *_, truth_loss, truth = one_step(config, seed=3, backend="scratch", batch=2)
    assert abs(loss - truth_loss) <= 1e-14
    for name in truth:
        assert np.max(np.abs(fast[name] - truth[name])) <= 1e-13, name


def test_adam_steps_as_torchs_adam():
    rng = np.random.default_rng(0)
    params = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5)}
    mine = {k: v.copy() for k, v in params.items()}
    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.Adam(theirs.values(), lr=1e-2, betas=(0.8, 0.95), eps=1e-8, foreach=False)
    adam = Adam(mine, 1e-2, (0.8, 0.95), 1e-8)
    for _ in range(5):
        grads = {k: rng.standard_normal(v.shape) for k, v in params.items()}
        for k, t in theirs.items():
            t.grad = torch.tensor(grads[k])
        opt.step()
        adam.step(mine, grads)
        for k in params:
            np.testing.assert_allclose(mine[k], theirs[k].detach().numpy(), rtol=1e-13, atol=1e-15)


def test_a_seeded_run_is_reproducible_bit_for_bit():
    config = TrainConfig(steps=6, batch=4, snapshot_every=3, seed=7,
                         model=ModelConfig(context=9, d_model=8, n_heads=2))  # fmt: skip
    one, two = Trainer(config).advance(), Trainer(config).advance()
    other = Trainer(dataclasses.replace(config, seed=8)).advance()
    assert one.losses == two.losses and one.losses != other.losses
    assert [s.step for s in one.snapshots] == [0, 3, 6]
    for a, b in zip(one.snapshots, two.snapshots):
        for name in a.params:
            assert np.array_equal(a.params[name], b.params[name]), name
        assert all(np.array_equal(x, y) for x, y in zip(a.weights, b.weights))


def test_advancing_in_pieces_equals_one_advance():
    config = TrainConfig(
        steps=5, batch=2, snapshot_every=2, model=ModelConfig(context=7, d_model=4)
    )
    whole = Trainer(config).advance()
    pieces = Trainer(config)
    for _ in range(3):
        pieces.advance(2)
    assert pieces.finished and pieces.run.losses == whole.losses
    assert [s.step for s in pieces.run.snapshots] == [0, 2, 4, 5]


def test_the_scores_read_the_right_positions():
    T, n = 9, 4  # a probe of period 4: positions 4.. repeat 0..
    prev = np.zeros((T, T))
    prev[0, 0] = 1
    prev[np.arange(1, T), np.arange(T - 1)] = 1  # each row looks one back
    induction = np.zeros((T, T))
    induction[np.arange(n), 0] = 1
    induction[np.arange(n, T), np.arange(n, T) - n + 1] = 1  # the token after the earlier copy
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    w = np.stack([prev, induction, uniform])[None]  # (1 layer, 3 heads, T, T)
    s = head_scores([w], period=n)
    assert s["previous"][0].tolist() == [1.0, pytest.approx(1 / (T - 1)), pytest.approx(
        np.mean(1 / np.arange(2, T + 1)))]  # fmt: skip
    assert s["induction"][0, 1] == 1.0 and s["induction"][0, 0] == (n == 1)
    assert s["first"][0, 0] == pytest.approx(2 / T)  # rows 0 and 1 look at position 0
    assert np.isnan(head_scores([w], period=None)["induction"]).all()


def test_tasks_make_what_they_say():
    rng = np.random.default_rng(0)
    ind = make_task("induction", vocab=10, half=5).batch(rng, 3)
    seq = np.concatenate([ind.inputs, ind.targets[:, -1:]], axis=1)  # (3, 10)
    assert (
        np.array_equal(seq[:, :5], seq[:, 5:]) and ind.scored.tolist() == [False] * 5 + [True] * 4
    )
    copy = make_task("copying", vocab=10, half=4).batch(rng, 2)
    assert (copy.inputs[:, 4] == 9).all() and np.array_equal(
        copy.targets[:, 4:], copy.inputs[:, :4]
    )
    srt = make_task("sorting", vocab=10, half=4).batch(rng, 2)
    assert np.array_equal(srt.targets[:, 4:], np.sort(srt.inputs[:, :4], axis=1))
    assert all(len(set(row)) == 4 for row in srt.inputs[:, :4].tolist())
    with pytest.raises(ValueError, match="task: expected one of"):
        make_task("reversing")
    with pytest.raises(ValueError, match="vocab: sorting needs"):
        make_task("sorting", vocab=5, half=5)


def test_the_text_task_reads_a_users_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("to be or not to be, that is the question\n" * 3, encoding="utf-8")
    config = TrainConfig(task="text", steps=2, batch=2, model=ModelConfig(context=8, d_model=4))
    run = Trainer(config, text_path=str(path)).advance()
    assert run.config.model.vocab == len(set(path.read_text())) and run.steps_done == 2
    assert run.task.label(run.task.alphabet.index(" ")) == "␣"
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="text_path: .* is not UTF-8"):
        Trainer(config, text_path=str(tmp_path / "bad.txt"))
    with pytest.raises(ValueError, match="text_path: cannot read"):
        Trainer(config, text_path=str(tmp_path / "missing.txt"))


def test_a_run_file_round_trips_and_foreign_files_are_refused(tmp_path):
    config = TrainConfig(
        steps=4, batch=2, snapshot_every=2, model=ModelConfig(context=7, d_model=4)
    )
    run = Trainer(config).advance()
    path = tmp_path / "run.npz"
    save(run, path)
    back = load(path)
    assert back.config == run.config and back.losses == run.losses
    assert [s.step for s in back.snapshots] == [0, 2, 4]
    for a, b in zip(run.snapshots, back.snapshots):
        assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
        assert all(np.array_equal(a.scores[k], b.scores[k], equal_nan=True) for k in a.scores)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz: not a training run .*cannot read"):
        load(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", settings=np.array(json.dumps({"format": "elsewhere/1"})))
    with pytest.raises(ValueError, match="format 'elsewhere/1'"):
        load(tmp_path / "other.npz")
    np.savez(tmp_path / "nosettings.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="nosettings.npz: not a training run .*KeyError"):
        load(tmp_path / "nosettings.npz")


def test_a_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    config = TrainConfig(steps=2, batch=2, model=ModelConfig(context=5, d_model=4))
    run = Trainer(config).advance()
    path = tmp_path / "run.npz"
    save(run, path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", broken)
    with pytest.raises(OSError, match="disk full"):
        save(run, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["run.npz"]


def test_the_phase_change_is_found_where_the_loss_falls():
    flat = [3.4] * 1000
    assert phase_change(flat) is None
    curve = [3.4] * 600 + list(np.linspace(3.4, 0.5, 100)) + [0.5] * 300
    found = phase_change(curve)
    assert found is not None and 550 <= found.step <= 720
    assert found.loss_before > 3.0 and found.loss_after < 1.0


def test_the_command_line_trains_and_writes_a_run(tmp_path, capsys):
    out = tmp_path / "cli.npz"
    assert main(["copying", "--steps", "3", "--batch", "2", "--context", "6", "--d-model", "4",
                 "--snapshot-every", "1", "--out", str(out)]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "3 steps of copying" in text and f"wrote {out}" in text
    assert load(out).steps_done == 3
    assert main(["induction", "--heads", "3", "--d-model", "4"]) == 2
    assert "d_model: expected a multiple of n_heads=3, found 4" in capsys.readouterr().err


def test_the_summary_names_the_phase_change_with_the_runs_numbers():
    config = TrainConfig(steps=3, batch=2, model=ModelConfig(context=7, d_model=4))
    trainer = Trainer(config)
    run = trainer.advance()
    run.scored_losses = [3.4] * 300 + [0.4] * 300  # a planted fall at step 300
    run.losses = [3.4] * 600
    last = run.snapshots[-1]
    run.snapshots = [dataclasses.replace(last, step=0), dataclasses.replace(last, step=500)]
    words = summary(run)
    assert "the loss on the repeated half fell from 3.4 to 0.4" in words
    assert "At step 301" in words and "600 steps of induction" in words


def test_bad_settings_are_refused_with_their_names():
    with pytest.raises(ValueError, match="n_kv_heads: expected a divisor of n_heads=4, found 3"):
        ModelConfig(n_kv_heads=3)
    with pytest.raises(ValueError, match="lr: expected a number in"):
        TrainConfig(lr=2.0)
    with pytest.raises(ValueError, match="dtype: expected one of float32, float64"):
        TrainConfig(dtype="float16")
    with pytest.raises(TypeError, match="mlp: expected True or False"):
        ModelConfig(mlp=1)


def test_a_run_shows_itself_in_a_notebook():
    config = TrainConfig(
        steps=3, batch=2, snapshot_every=1, model=ModelConfig(context=7, d_model=4)
    )
    run = Trainer(config).advance()
    page = run._repr_html_()
    assert page.count("<polyline") == 2 and "<svg" in page
    assert summary(run).split(":")[0] in page  # the words, escaped into the page
    assert page.count("<tr><td>head ") == 2 * 4  # every head's scores: 2 layers x 4 heads

"""The Backward tab's dO 'from the training step': a layer opened from a training run is
differentiated for the model's own dO there (Model.attention_grad_outputs), so the Backward tab's
dQ, dK, dV are the model's own gradients at that layer, and x^T dQ its w_q gradient; within
scratch.gradient_tolerance's float64 bound (derived for two float64 backwards of one input)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scratch
from gui.state import backward_check, controller, session_file
from gui.state import session as sm
from gui.state.sampled_check import split_heads
from gui.state.train_session import head_session
from scratch.bounds.tolerance import gamma
from scratch.train import Model, ModelConfig, TrainConfig, Trainer

U64 = 2.0**-53  # float64's unit roundoff
CONFIGS = {
    "plain": dict(),
    "gqa, norm, mlp": dict(n_heads=4, n_kv_heads=2, norm=True, mlp=True),
}


def small_run(seed: int, **model: object) -> object:
    """Ten steps of a small induction model (context 12: the probe is 11 tokens) at lr 0.05, so
    the weights have moved from their start."""
    shape = dict(vocab=8, context=12, d_model=16, n_layers=2, n_heads=2) | model
    config = TrainConfig(
        steps=10, batch=4, snapshot_every=5, seed=seed, lr=0.05, model=ModelConfig(**shape)
    )
    return Trainer(config).advance()


def models_own(run: object, step: int) -> tuple[list, dict]:
    """(per layer the model's AttentionGrads, every parameter's gradient) of the mean loss on the
    probe at the snapshot of `step`, in float64."""
    params = {k: np.asarray(v, np.float64) for k, v in run.snapshot_at(step).params.items()}
    model = Model(run.config.model, "numpy")
    inputs, targets = run.probe[None], run.probe_targets[None]
    fwd = model.forward(params, inputs, targets)
    return model.attention_grad_outputs(params, fwd), model.backward(params, fwd)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("shape", list(CONFIGS))
def test_the_backward_tabs_gradients_are_the_models_own(shape, seed):
    run = small_run(seed, **CONFIGS[shape])
    at_attention, grads = models_own(run, 10)
    for layer in range(run.config.model.n_layers):
        s = head_session(run, 10, layer, 1)
        assert (s.grad_output, s.grad_given is not None) == ("training", True)
        trace = controller.run_backward(s).trace  # what the Backward tab computes and shows
        mine = at_attention[layer]
        H, Hkv = trace.num_heads, trace.num_kv_heads
        # step 1: dO is the model's own, every head's (the same numbers carried over)
        dO = np.asarray(trace["grad_head_outputs"].value)  # (H, T, dh)
        np.testing.assert_array_equal(dO, mine.grad_output[0], err_msg=f"dO, layer {layer}")
        # step 2: dQ, dK, dV equal the model's within the float64 bound of two backwards
        q, k, v = (split_heads(np.asarray(trace[n].value), h) for n, h in
                   (("q", H), ("k", Hkv), ("v", Hkv)))  # fmt: skip
        bound = scratch.gradient_tolerance(
            q.tolist(), k.tolist(), v.tolist(), dO.tolist(), is_causal=True,
            enable_gqa=H != Hkv, scale=trace.scale, dtype="float64",
        )  # fmt: skip
        for name, theirs in (("grad_query", mine.grad_query), ("grad_key", mine.grad_key),
                             ("grad_value", mine.grad_value)):  # fmt: skip
            found = split_heads(np.asarray(trace[name].value), H if name == "grad_query" else Hkv)
            excess = np.abs(found - theirs[0]) - np.asarray(bound[name])
            assert excess.max() <= 0, (
                f"{name}, layer {layer}: max |window - model| - bound = {excess.max():.3g}"
            )
        # step 3: each head's w_q gradient from the window's dQ (its grad_w_q step, x^T dQ) is
        # the model's: the bound is |x|^T (dQ's bound) and both products' rounding,
        # 2 gamma_T |x|^T |dQ|
        x, dQ = np.asarray(trace["x"].value), np.asarray(trace["grad_query"].value)  # (T, H*dh)
        dQ_bound = np.concatenate(list(np.asarray(bound["grad_query"])), axis=1)  # (T, H*dh)
        w_bound = np.abs(x).T @ dQ_bound + 2 * gamma(len(x), U64) * (np.abs(x).T @ np.abs(dQ))
        from_window = np.asarray(trace["grad_w_q"].value)  # (d_model, H*dh)
        dh = dQ.shape[1] // H
        for head in range(H):
            cols = slice(head * dh, (head + 1) * dh)
            excess = np.abs(from_window - grads[f"{layer}.w_q"])[:, cols] - w_bound[:, cols]
            assert excess.max() <= 0, f"w_q, layer {layer}, head {head}: {excess.max():.3g}"


def test_the_training_do_is_offered_only_where_it_came_with_the_example():
    run = small_run(2)
    s = head_session(run, 5, 1, 0)
    words = backward_check.describe_grad_output(s)
    assert "step 5 on the probe" in words and "layer 2's attention output" in words
    toy = sm.random_session(0)
    with pytest.raises(sm.SessionError, match="training run"):
        sm.with_grad_output(toy, "training", 0)
    ones = sm.with_grad_output(s, "ones", 0)
    assert backward_check.grad_output_for(ones) == [[1.0] * s.d_out] * s.num_tokens
    back = sm.with_grad_output(ones, "training", 0)  # the given dO is kept while it fits
    assert backward_check.grad_output_for(back) == [list(r) for r in s.grad_given.values]
    # a new size or example: the given dO no longer fits, and is dropped (ones instead)
    for edited in (sm.resized(s, num_tokens=4), sm.with_preset(s, "random")):
        assert (edited.grad_output, edited.grad_given) == ("ones", None)


def test_a_session_file_keeps_the_training_do_and_refuses_a_wrong_one(tmp_path):
    run = small_run(3)
    s = head_session(run, 10, 0, 0)
    loaded = session_file.loads(session_file.dumps(s))
    assert loaded == s
    data = s.to_dict()
    data["grad_given"]["values"] = data["grad_given"]["values"][:-1]  # one row short
    with pytest.raises(sm.SessionError, match="grad_given.values"):
        session_file.validate(data)
    data = dataclasses.replace(s, grad_given=None).to_dict()  # 'training' with no dO
    with pytest.raises(sm.SessionError, match="grad_given"):
        session_file.validate(data)


def test_a_run_file_keeps_the_probe_targets(tmp_path):
    from scratch.train import load, save

    run = small_run(4)
    save(run, tmp_path / "run.npz")
    loaded = load(tmp_path / "run.npz")
    np.testing.assert_array_equal(loaded.probe_targets, run.probe_targets)
    assert loaded.probe_targets.tolist() == run.task.probe().targets[0].tolist()

"""A trained layer's attention as a window session (no Qt): the probe at one snapshot.

The pipeline recomputes what the tiny transformer did on the task's probe at that step: x is
the layer's (normed) input h on the probe (T, d_model), w_q, w_k, w_v the layer's own weights
(every head side by side, its key/value heads as the model has them), the causal mask the model
trained with, and the probe's tokens as labels; and the dO of the Backward tab's 'training'
choice: the gradient of the model's mean loss on the probe with respect to this layer's attention
output, from the model's own backward (Model.attention_grad_outputs), so the Backward tab's dQ,
dK, dV are the model's gradients at this layer. Everything in float64, the snapshot's weights
cast up. Its preset starts with 'model:' like a real
model's head (gui/state/model_session.py), so the window opens it by the same path: the toy
banner above the inputs offers the toy example back.
"""

from __future__ import annotations

import numpy as np

from gui.state import session as sm
from gui.state.token_text import session_label
from scratch.train import Forward, Model, Run, Snapshot
from scratch.train.words import head_name
from scratch.variants import VariantChoice

PRESET = "model:tiny transformer"  # model_session's prefix: the window's path for model heads


def probe_forward(run: Run, snapshot: Snapshot) -> tuple[Model, dict, Forward]:
    """(the model, the snapshot's weights in float64, its forward on the probe): one pass the
    layer's input and its training dO both read. The targets are the probe's own (zeros for a
    run file saved before them: only the loss reads them)."""
    probe = np.asarray(run.probe, dtype=np.int64)[None, :]  # (1, T)
    targets = np.zeros_like(probe) if run.probe_targets is None else run.probe_targets
    targets = np.asarray(targets, dtype=np.int64).reshape(probe.shape)  # (1, T)
    params = {name: np.asarray(w, np.float64) for name, w in snapshot.params.items()}
    model = Model(run.config.model, "numpy")
    return model, params, model.forward(params, probe, targets)


def layer_grad_output(model: Model, params: dict, fwd: Forward, layer: int) -> np.ndarray:
    """dO (T, H * d_head): d(the mean loss on the probe) / d(layer `layer`'s attention output)
    from the model's own backward of `fwd`, each head's columns side by side as the session's
    output has them."""
    d_out = model.attention_grad_outputs(params, fwd)[layer].grad_output  # (1, H, T, dh)
    H, T, dh = d_out.shape[1:]
    return d_out[0].transpose(1, 0, 2).reshape(T, H * dh)  # (H, T, dh) -> (T, H*dh)


def grad_source(run: Run, step: int, layer: int) -> str:
    """Where the 'training' dO of layer `layer` at snapshot step `step` comes from, in words."""
    return (
        f"the loss's gradient at step {step:,} on the probe: d(mean cross-entropy of its "
        f"{len(run.probe)} next-token predictions) / d(layer {layer + 1}'s attention output, "
        f"each head's before w_o), so dQ, dK, dV are the model's own gradients at this layer"
    )


def check_layer_head(run: Run, layer: int, head: int) -> None:
    """ValueError naming `layer` or `head` when the run's model has no such one."""
    m = run.config.model
    for name, value, count in (("layer", layer, m.n_layers), ("head", head, m.n_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
            raise ValueError(f"{name}: expected an int in [0, {count - 1}], found {value!r}")


def head_session(run: Run, step: int, layer: int, head: int) -> sm.Session:
    """The session of layer `layer` on the probe at the snapshot of `step` (the last one at or
    before it); `head` is named in the preset (the pipeline shows it first)."""
    check_layer_head(run, layer, head)
    snapshot = run.snapshot_at(step)
    m = run.config.model
    model, params, fwd = probe_forward(run, snapshot)
    x = fwd.saved[layer]["h"][0]  # (T, d_model): the layer's (normed) input on the probe
    weights = {n: params[f"{layer}.w_{n}"] for n in "qkv"}
    tokens = tuple(session_label(run.task.label(int(t))) for t in run.probe)
    causal = VariantChoice(mask="causal", align="top-left")  # the model's is_causal
    task = run.config.task
    given = None  # a run file saved before the probe's targets has no training dO
    if run.probe_targets is not None:
        dO = layer_grad_output(model, params, fwd, layer)  # (T, H * d_head)
        given = sm.GivenGrad(sm.as_matrix(dO), grad_source(run, snapshot.step, layer))
    return sm.Session(
        tokens=tokens,
        key_tokens=tokens,
        query=sm.as_matrix(x),
        w_q=sm.as_matrix(weights["q"]),  # (d_model, H * d_head)
        w_k=sm.as_matrix(weights["k"]),  # (d_model, Hkv * d_head)
        w_v=sm.as_matrix(weights["v"]),
        mode="project",
        num_heads=m.n_heads,
        num_kv_heads=m.kv_heads,
        variant=causal if m.causal else VariantChoice(),
        backend="numpy",
        grad_output="ones" if given is None else "training",
        grad_given=given,
        preset=f"{PRESET} ({task}, step {snapshot.step}):{head_name(layer, head)} (layer "
        f"{layer}, head {head})",
    )


__all__ = [
    "PRESET",
    "check_layer_head",
    "grad_source",
    "head_session",
    "layer_grad_output",
    "probe_forward",
]

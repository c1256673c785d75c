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
from scratch.train import Model, Run, Snapshot
from scratch.train.words import head_name
from scratch.variants import VariantChoice

PRESET = "model:tiny transformer"  # model_session's prefix: the window's path for model heads


def _float64(snapshot: Snapshot) -> dict:
    """The snapshot's weights in float64 (the window's dtype; a run trains in float32)."""
    return {name: np.asarray(w, dtype=np.float64) for name, w in snapshot.params.items()}


def layer_input(run: Run, snapshot: Snapshot, layer: int) -> np.ndarray:
    """h (T, d_model): layer `layer`'s attention input on the probe with the snapshot's
    weights (its layer-norm output when the model has norms), float64."""
    check_layer_head(run, layer, 0)
    probe = np.asarray(run.probe, dtype=np.int64)[None, :]  # (1, T)
    model = Model(run.config.model, "numpy")
    fwd = model.forward(_float64(snapshot), probe, np.zeros_like(probe))  # targets unused here
    return fwd.saved[layer]["h"][0]  # (T, d_model)


def layer_grad_output(run: Run, snapshot: Snapshot, layer: int) -> np.ndarray | None:
    """dO (T, H * d_head): d(the mean loss on the probe) / d(layer `layer`'s attention output),
    each head's columns side by side as the session's output has them, at the snapshot's
    weights in float64; None when the run has no probe targets (a file saved before them)."""
    check_layer_head(run, layer, 0)
    if run.probe_targets is None:
        return None
    probe = np.asarray(run.probe, dtype=np.int64)[None, :]  # (1, T)
    targets = np.asarray(run.probe_targets, dtype=np.int64)[None, :]
    model = Model(run.config.model, "numpy")
    d_out = model.attention_grad_outputs(_float64(snapshot), probe, targets)[layer].grad_output
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
    x = layer_input(run, snapshot, layer)  # (T, d_model)
    weights = {n: np.asarray(snapshot.params[f"{layer}.w_{n}"], np.float64) for n in "qkv"}
    tokens = tuple(session_label(run.task.label(int(t))) for t in run.probe)
    causal = VariantChoice(mask="causal", align="top-left")  # the model's is_causal
    task = run.config.task
    dO = layer_grad_output(run, snapshot, layer)
    given = (
        None
        if dO is None
        else sm.GivenGrad(sm.as_matrix(dO), grad_source(run, snapshot.step, layer))
    )
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
    "layer_input",
]

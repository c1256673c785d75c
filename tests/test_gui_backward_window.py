"""The Backward view in the window: its steps, dO choices, hover, sources, Check tab, refusals."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

import scratch  # noqa: E402
from gui.state import backward_check, session_file, variant_session  # noqa: E402
from gui.state import session as sm  # noqa: E402
from gui.state.input_modes import with_mode  # noqa: E402
from tests.journey_sessions import with_mask

pytestmark = pytest.mark.gui

# the steps of the contract, written out per configuration (not read from the registry)
SINGLE = ["grad_output", "grad_value", "grad_weights", "row_dot", "grad_scores", "grad_query",
          "grad_key"]  # fmt: skip
PROJECTED = ["grad_w_q", "grad_w_k", "grad_w_v"]


def projected(seed=0, tokens=4, heads=2, kv=None) -> sm.Session:
    """A random projected example (d_model 4, d_k = d_v = 2)."""
    return sm.random_session(seed, tokens, 4, 2, 2, heads, kv)


CONFIGS = {
    "one head, q = k = v = x": (
        dataclasses.replace(with_mode(projected(heads=1), "self"), num_kv_heads=1),
        SINGLE,
    ),
    "one head, projections": (projected(heads=1), SINGLE + PROJECTED + ["grad_x"]),
    "two heads, projections": (
        projected(heads=2),
        SINGLE[:1] + ["grad_head_outputs"] + SINGLE[1:] + PROJECTED + ["grad_x"],
    ),
    "four heads, two kv heads (GQA)": (
        projected(heads=4, kv=2),
        SINGLE[:1] + ["grad_head_outputs"] + SINGLE[1:] + PROJECTED + ["grad_x"],
    ),
    "two heads, q, k, v given": (
        with_mode(projected(heads=2), "qkv"),
        SINGLE[:1] + ["grad_head_outputs"] + SINGLE[1:],
    ),
}


def open_backward(qtbot, window) -> object:
    """Open the Backward tab and wait for its computation; the BackwardOutcome."""
    window.tabs.setCurrentWidget(window.backward)
    qtbot.waitUntil(
        lambda: not window.backward_worker.busy and window.backward_outcome is not None,
        timeout=60_000,
    )
    assert dataclasses.replace(window.backward_outcome.session, step="") == dataclasses.replace(
        window.inputs.session, step=""
    )
    return window.backward_outcome


@pytest.mark.parametrize("config", CONFIGS)
def test_the_view_shows_exactly_the_backward_steps(qtbot, open_window, config):
    session, want = CONFIGS[config]
    w = open_window(session)
    open_backward(qtbot, w)
    view = w.backward.pipeline
    assert view.names() == want
    assert view.slider.maximum() == len(want) - 1
    for name in want:  # each step's image holds its values (head 0), D as a column
        view.set_step(name)
        values = np.asarray(view.trace[name].tolist(), np.float64)
        if view.trace[name].axes[0] == "head":
            values = values[0]
        if values.ndim == 1:
            values = values[:, None] if name == "row_dot" else values[None, :]
        image = view.heatmaps[0].image_item.image
        assert image.shape == values.shape, name
        assert np.array_equal(image, values.astype(np.float32)), name
    w.backward.pipeline.go(0)
    assert w.backward.pipeline.step_name == "grad_output"


def test_nothing_backward_is_computed_until_the_tab_is_opened(qtbot, open_window, settle):
    w = open_window(projected())
    w.inputs.apply_edit(sm.with_cell, "query", 0, 0, 0.25)
    settle(w)
    assert w.backward_outcome is None and w.backward_worker.current == 0
    assert "open the Backward tab" in w.checks.header.text()
    outcome = open_backward(qtbot, w)
    assert outcome.session.query[0][0] == 0.25


def test_the_row_dot_column_and_its_rows(qtbot, open_window):
    w = open_window(projected(heads=2, tokens=5))
    open_backward(qtbot, w)
    view = w.backward.pipeline
    view.set_step("row_dot")
    panel = view.heatmaps[0].panel
    assert panel.image.shape == (5, 1) and panel.row_labels == list(view.trace.tokens)
    view.hover_cell(3, 0)
    assert view.explanation.text() == scratch.explain(view.trace, "row_dot", (0, 3)).text


def choose_grad_output(qtbot, window, kind: str, seed: int) -> object:
    """Pick dO in the view the way a user does, then wait for the new backward pass."""
    view = window.backward
    view.seed.setValue(seed)
    view.kind.setCurrentIndex(view.kind.findData(kind))
    view.kind.activated.emit(view.kind.currentIndex())
    assert (window.inputs.session.grad_output, window.inputs.session.grad_seed) == (kind, seed)
    return open_backward(qtbot, window)


@pytest.mark.parametrize("seed", [0, 5, 123])
def test_each_dO_choice_reaches_the_trace(qtbot, open_window, seed):
    s = projected(seed, tokens=3, heads=2)
    w = open_window(s)
    width, rows = 4, 3  # two heads of d_v 2 side by side
    outcome = open_backward(qtbot, w)
    assert outcome.trace["grad_output"].tolist() == [[1.0] * width] * rows
    outcome = choose_grad_output(qtbot, w, "random", seed)
    rng = random.Random(seed)
    want = [[round(rng.uniform(-1, 1), 2) for _ in range(width)] for _ in range(rows)]
    assert outcome.trace["grad_output"].tolist() == want
    assert w.backward.pipeline.trace is outcome.trace
    outcome = choose_grad_output(qtbot, w, "target", seed)
    rng = random.Random(seed)
    i, c = rng.randrange(rows), rng.randrange(width)
    dO = outcome.trace["grad_output"].tolist()
    assert [(r, k) for r in range(rows) for k in range(width) if dO[r][k]] == [(i, c)]
    assert f"output[{i}][{c}]" in w.backward.about.text()
    # with one-hot dO the gradient of the weights is v's row feature c, row i only
    v = np.asarray(outcome.trace["v"].tolist())
    dP = np.asarray(outcome.trace["grad_weights"].tolist())[c // 2]  # the head of column c
    want_dP = np.zeros((rows, rows))
    want_dP[i] = v[:, c]
    assert np.array_equal(dP, want_dP)


@pytest.mark.parametrize("config", ["two heads, projections", "four heads, two kv heads (GQA)"])
def test_hover_text_is_explains_and_the_inputs_that_fed_it_light_up(qtbot, open_window, config):
    w = open_window(CONFIGS[config][0])
    open_backward(qtbot, w)
    view = w.backward.pipeline
    for name in view.names():
        view.set_step(name)
        step = view.trace[name]
        panel = view.heatmaps[0].panel
        rows, cols = panel.image.shape
        cell = (min(1, rows - 1), min(2, cols - 1))
        view.hover_cell(*cell)
        index = ((0,) if step.axes[0] == "head" else ()) + (
            (cell[0],) if panel.vector == "column" else (cell[1],) if panel.vector else cell
        )
        want = scratch.explain(view.trace, name, index)
        assert view.explanation.text() == want.text, name
        shown = {hm.panel.step: hm for hm in view.sources if hm.isVisible()}
        for src, axis, idx in want.sources:
            if src not in shown:
                continue
            marks = [m.rect() for m in shown[src]._marks]
            if shown[src].panel.vector:
                axis = 0 if shown[src].panel.vector == "column" else 1
            at = [r.y() + 0.5 if axis == 0 else r.x() + 0.5 for r in marks]
            assert idx in at, f"{name}{cell}: {src} {'row' if axis == 0 else 'column'} {idx}"
    # one written out: dS[0][1][2] reads weights, dP and D of head 0's row 1
    view.set_step("grad_scores")
    view.hover_cell(1, 2)
    lit = {hm.panel.step: [m.rect().y() + 0.5 for m in hm._marks] for hm in view.sources}
    assert lit == {"weights": [1], "grad_weights": [1], "row_dot": [1]}


@pytest.mark.parametrize("backend, dtype", [("numpy", "float32"), ("numpy", "float64")])
def test_the_check_tab_passes_a_correct_backends_gradients(qtbot, open_window, backend, dtype):
    s = dataclasses.replace(projected(heads=4, kv=2), backend=backend, dtype=dtype)
    w = open_window(sm.with_grad_output(s, "random", 3))
    outcome = open_backward(qtbot, w)
    table = w.checks.table
    names = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert names[-3:] == ["grad_query", "grad_key", "grad_value"]
    verdicts = [table.item(r, 4).text() for r in range(table.rowCount())]
    assert verdicts[-3:] == ["pass"] * 3
    header = w.checks.header.text()
    assert "dQ, dK, dV within their bounds" in header
    assert f"{backend}'s scaled_dot_product_attention_backward ({dtype}) vs" in header
    assert all(c.ok for c in outcome.checks)


def test_the_check_tab_names_a_planted_wrong_gradient(qtbot, open_window, monkeypatch):
    real = backward_check.backward_with_backend

    def scale_missing_in_dk(name, dtype, q, k, v, dO, options):
        dq, dk, dv = real(name, dtype, q, k, v, dO, options)
        return dq, dk / options.scale, dv

    monkeypatch.setattr(backward_check, "backward_with_backend", scale_missing_in_dk)
    w = open_window(dataclasses.replace(projected(), backend="numpy", dtype="float64"))
    outcome = open_backward(qtbot, w)
    assert [c.ok for c in outcome.checks] == [True, False, True]
    table = w.checks.table
    failed = [table.item(r, 0).text() for r in range(table.rowCount())
              if table.item(r, 4).text() == "FAIL"]  # fmt: skip
    assert failed == ["grad_key"]
    assert "gradient outside the bound: grad_key" in w.checks.header.text()
    assert table.currentRow() == table.rowCount() - 2  # the failing row is selected ...
    assert w.checks.diff_map.panel.title == "|grad_key - ground truth|"  # ... and drawn


def test_a_refused_dO_edit_keeps_the_session(qtbot, open_window):
    w = open_window(projected())
    before = w.inputs.session
    w.inputs.apply_edit(sm.with_grad_output, "twos", 1)
    assert w.inputs.session is before
    assert (
        "refused: dO: expected one of ones, random, target, training"
        in w.statusBar().currentMessage()
    )


def test_a_file_with_a_bad_dO_choice_is_refused_and_the_work_kept(qtbot, open_window, tmp_path):
    w = open_window(sm.with_grad_output(projected(), "random", 8))
    data = projected(seed=1).to_dict()
    data["grad_seed"] = -1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert not w.files.open_session(str(path))
    assert "grad_seed" in w.warnings[-1] and "The current session is kept" in w.warnings[-1]
    assert (w.inputs.session.grad_output, w.inputs.session.grad_seed) == ("random", 8)


def test_the_dO_choice_is_saved_and_opened_with_the_session(qtbot, open_window, tmp_path):
    w = open_window(projected())
    choose_grad_output(qtbot, w, "target", 11)
    path = tmp_path / "s.json"
    assert w.files.save_session(str(path))
    saved = session_file.load(path)
    assert (saved.grad_output, saved.grad_seed) == ("target", 11)
    other = open_window(projected(seed=2))
    other.tabs.setCurrentWidget(other.backward)
    assert other.files.open_session(str(path))
    outcome = open_backward(qtbot, other)
    assert (other.backward.kind.currentData(), other.backward.seed.value()) == ("target", 11)
    assert outcome.trace["grad_output"].tolist() == backward_check.grad_output_for(saved)


def test_too_many_tokens_show_why_instead_of_the_steps(qtbot, open_window):
    w = open_window(sm.random_session(0, 513, 2, 1, 1, 1))
    outcome = open_backward(qtbot, w)
    assert outcome.trace is None
    assert w.backward.message.isVisibleTo(w) and not w.backward.pipeline.isVisibleTo(w)
    assert "513 x 513 = 263,169" in w.backward.message.text()
    assert "Gradients: not computed" in w.checks.header.text()
    # the dO row and the message stay at the top (they were spread over the empty view)
    assert w.backward.message.geometry().bottom() < w.backward.height() // 2
    assert w.backward.about.geometry().top() < 80


@pytest.mark.parametrize("policy", ["zero", "nan"])
def test_a_fully_masked_row_gets_no_gradient_and_the_check_agrees(qtbot, open_window, policy):
    s = dataclasses.replace(projected(heads=2), backend="numpy", dtype="float64")
    s = variant_session.toggled_mask_cell(
        s, 0, 0
    )  # the grid starts all True: row 2 loses every key below
    for j in range(4):
        s = variant_session.toggled_mask_cell(s, 2, j)
    w = open_window(dataclasses.replace(s, masked_rows=policy))
    outcome = open_backward(qtbot, w)
    dS = np.asarray(outcome.trace["grad_scores"].tolist())  # (H, L, S)
    dQ = np.asarray(outcome.trace["grad_query"].tolist())  # (L, H * d_k)
    if policy == "zero":
        assert np.array_equal(dS[:, 2], np.zeros((2, 4))) and np.array_equal(dQ[2], np.zeros(4))
    else:
        assert np.isnan(dQ[2]).all() and not np.isnan(dQ[[0, 1, 3]]).any()
    assert [c.ok for c in outcome.checks] == [True, True, True]
    view = w.backward.pipeline
    view.set_step("grad_query")
    assert np.array_equal(view.heatmaps[0].image_item.image[2], dQ[2].astype(np.float32),
                          equal_nan=True)  # fmt: skip


MASKS = {
    "causal": dict(mask_mode="causal-top-left"),
    "bottom-right": dict(mask_mode="causal-bottom-right"),
    "custom, row 1 fully masked, nan": dict(
        mask_mode="custom",
        grid=((True,) * 4, (False,) * 4, (True, False, True, False), (True,) * 4),
        masked_rows="nan",
    ),
}


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("heads, kv", [(1, 1), (2, 2), (4, 2)])
def test_the_check_compares_the_problem_the_view_shows(mask, heads, kv):
    """The check's ground truth on its inputs (float64: not rounded) is the trace's own
    gradients, head by head: it checks the mask, scale and heads the view shows."""
    from gui.state import controller

    changes = dict(MASKS[mask])
    s = with_mask(
        projected(heads=heads, kv=kv), changes.pop("mask_mode"), changes.pop("grid", None)
    )
    s = dataclasses.replace(s, scale_mode="custom", scale_value=0.7, **changes)
    example, options = controller.backward_example_and_options(s)
    trace = scratch.trace_example(example, options, grad_output=backward_check.grad_output_for(s))
    q, k, v, dO = backward_check.head_inputs(trace, "float64")
    truth = backward_check.backward_with_backend(  # the ground truth's own backward
        "scratch", "float64", q, k, v, dO, backward_check.check_options(trace, options)
    )
    assert len(truth) == 3  # dQ, dK, dV: the zip below compares each
    for name, h, got in zip(("grad_query", "grad_key", "grad_value"), (heads, kv, kv), truth):
        layout = np.asarray(trace[name].tolist())  # (n, h * d): head h is a column block
        want = layout.reshape(layout.shape[0], h, -1).transpose(1, 0, 2)
        assert np.array_equal(np.asarray(got), want, equal_nan=True), name


def test_grad_x_names_all_six_inputs_and_draws_the_first_three(qtbot, open_window):
    w = open_window(projected(heads=2))
    open_backward(qtbot, w)
    view = w.backward.pipeline
    view.set_step("grad_x")
    title = view.source_title.text()
    assert title == (
        "inputs of this step: grad_query, w_q, grad_key, w_k, grad_value, w_v "
        "(the first 3 of 6 drawn)"
    )
    assert [hm.panel.step for hm in view.sources if hm.isVisibleTo(w)] == [
        "grad_query", "w_q", "grad_key",
    ]  # fmt: skip


def test_cancel_drops_a_running_backward_and_says_so(qtbot, open_window, monkeypatch):
    import threading

    from gui.state import controller

    release, real = threading.Event(), controller.run_backward

    def held(s, progress=None, cancelled=None):
        assert release.wait(10), "the test never released the job"
        return real(s, progress, cancelled)

    monkeypatch.setattr(controller, "run_backward", held)  # before the window makes its worker
    w = open_window(projected())
    try:
        w.tabs.setCurrentWidget(w.backward)
        assert w.backward_worker.busy and w.backward.cancel_button.isVisibleTo(w)
        w.backward.cancel_button.click()
        assert "The backward pass was not computed: cancelled" in w.backward.message.text()
        assert not w.backward.cancel_button.isVisibleTo(w)
    finally:
        release.set()
        assert w.backward_worker.wait(10000)  # joined: its result is dropped
    qtbot.wait(50)
    assert w.backward_outcome is None


def test_a_new_dO_recomputes_the_backward_only(qtbot, open_window, tmp_path):
    w = open_window(projected())
    open_backward(qtbot, w)
    forward_jobs, trace = w.worker.current, w.outcome.trace
    outcome = choose_grad_output(qtbot, w, "random", 4)
    assert w.worker.current == forward_jobs and w.outcome.trace is trace  # no forward again
    assert w.outcome.session == w.inputs.session  # ... and it counts as the current inputs:
    assert w.files.export_trace_json(str(tmp_path / "t.json"))  # exports are not refused
    assert outcome.trace["grad_output"].tolist() == backward_check.grad_output_for(w.inputs.session)
    w.inputs.apply_edit(sm.with_cell, "query", 0, 0, 0.5)  # a new input: both again
    assert w.worker.current == forward_jobs + 1
    open_backward(qtbot, w)

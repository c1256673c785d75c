"""Large matrices in the window: pooled images that keep the heaviest cell, exact cells under the
mouse, one cell explained from a few rows, the sentence's row chosen with NumPy as in Python."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

pytest.importorskip("PyQt6")

import scratch  # noqa: E402
from gui.present import pooled, sentences, view_model  # noqa: E402
from gui.state import controller  # noqa: E402
from gui.state.session import random_session  # noqa: E402
from scratch.trace import steps  # noqa: E402
from tests.journey_sessions import with_mask
from tests.test_sentence_rows_words import most_decided  # noqa: E402


def _heaviest(cells: list[float]) -> float:
    """The block's pixel by the rule, cell by cell: the finite cell of largest magnitude (the
    larger value on a tie), -inf when every cell is -inf."""
    finite = [c for c in cells if c != -math.inf]
    if not finite:
        return -math.inf
    return max(finite, key=lambda c: (abs(c), c))


@pytest.mark.parametrize("seed", range(6))
def test_pooling_keeps_each_blocks_heaviest_cell_with_its_sign(monkeypatch, seed):
    monkeypatch.setattr(pooled, "MAX_SIDE", 8)
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(9, 40, size=2)  # blocks of 2-5, sizes not always divisible
    m = rng.standard_normal((rows, cols)).astype(np.float32) * 3
    m[rng.random((rows, cols)) < 0.3] = -np.inf  # masked cells, some whole blocks
    m[: rows // 2, : cols // 3] = -np.inf
    blocks = pooled.blocks_for((rows, cols))
    image = pooled.pool(m, blocks)
    br, bc = blocks
    assert image.shape == (math.ceil(rows / br), math.ceil(cols / bc))
    for a in range(image.shape[0]):
        for b in range(image.shape[1]):
            block = m[a * br : (a + 1) * br, b * bc : (b + 1) * bc].ravel().tolist()
            assert image[a, b] == _heaviest(block), (a, b, block)


def test_one_sharp_weight_survives_pooling_where_a_stride_loses_it(monkeypatch):
    monkeypatch.setattr(pooled, "MAX_SIDE", 16)
    w = np.full((64, 64), 1 / 64, dtype=np.float32)
    w[13, 42] = 0.9  # one query attends one key
    image = pooled.pool(w, pooled.blocks_for(w.shape))
    assert image.shape == (16, 16) and image.max() == np.float32(0.9)
    assert image[13 // 4, 42 // 4] == np.float32(0.9)
    assert w[::4, ::4].max() < 0.9  # what a stride would have drawn


def _numpy_outcome(tokens: int, heads: int = 2, mask_mode: str = "none"):
    s = dataclasses.replace(
        with_mask(random_session(3, num_tokens=tokens, num_heads=heads), mask_mode),
        backend="numpy",
        dtype="float32",
    )
    return controller.run(s)


def test_a_pooled_panel_draws_a_small_image_and_keeps_every_exact_cell(monkeypatch):
    monkeypatch.setattr(pooled, "MAX_SIDE", 16)
    trace = _numpy_outcome(40).trace
    scores = trace["scores"].value  # (H, 40, 40) float32, the backend's own array
    (p,) = view_model.panels(trace, "scores", "1")
    assert p.blocks == (3, 3) and p.image.shape == (14, 14) and p.shape == (40, 40)
    assert np.shares_memory(p.raw, scores) and p.raw[5, 7] == scores[1, 5, 7]  # not a copy
    top = float(np.abs(scores).max())
    assert p.levels == (-top, top) and p.largest == float(np.abs(scores[1]).max())
    assert (
        pooled.axis_note(p.blocks[1], why=True) == " (3 cells a pixel, the largest |value| drawn)"
    )
    assert p.pixel(5, 7) == p.image[1, 2]
    (w,) = view_model.panels(trace, "weights", "0", "fixed")
    assert w.image.max() == pytest.approx(float(trace["weights"].value[0].max()))
    monkeypatch.setattr(pooled, "MAX_SIDE", 1024)
    (whole,) = view_model.panels(trace, "scores", "1")
    assert whole.blocks == (1, 1) and whole.image.shape == (40, 40) and whole.largest is None


def test_the_mouse_over_a_pooled_image_names_the_exact_cell(monkeypatch, qtbot):
    from gui.widgets.heatmap import Heatmap

    monkeypatch.setattr(pooled, "MAX_SIDE", 16)
    trace = _numpy_outcome(40).trace
    hm = Heatmap()
    qtbot.addWidget(hm)
    hm.resize(600, 600)
    hm.show()
    hm.show_panel(view_model.panels(trace, "scores", "0")[0])
    assert hm.plot.getAxis("bottom").labelText == "key (3 cells a pixel, the largest |value| drawn)"
    seen = []
    hm.cellHovered.connect(seen.append)
    for cell in [(0, 0), (5, 7), (39, 38), (22, 13)]:
        hm.hover(*cell)
    assert seen == [(0, 0), (5, 7), (39, 38), (22, 13)]
    assert hm.cell_at(hm.scene_position(39, 39)) == (39, 39)


class _NoWholeMatrix(np.ndarray):
    """An array that refuses to become nested lists as a whole (one row at a time is fine)."""

    def tolist(self):
        if self.ndim >= 2:
            raise AssertionError(f"a whole {self.shape} matrix was turned into lists")
        return super().tolist()


def _guarded(trace):
    steps = tuple(
        dataclasses.replace(s, value=np.asarray(s.value).view(_NoWholeMatrix)) for s in trace.steps
    )
    return dataclasses.replace(trace, steps=steps)


@pytest.mark.parametrize(
    "step, index",
    [("scores", (1, 3, 4)), ("scaled", (0, 0, 9)), ("weights", (1, 11, 2)), ("q", (7, 1)),
     ("head_outputs", (0, 5, 1)), ("output", (2, 3)), ("masked", (1, 2, 2))],
)  # fmt: skip
def test_one_cell_is_explained_from_its_rows_with_the_same_words(step, index):
    trace = _numpy_outcome(12).trace
    lists = dataclasses.replace(  # every step as nested lists: the ground truth's form
        trace, steps=tuple(dataclasses.replace(s, value=s.tolist()) for s in trace.steps)
    )
    whole = scratch.explain(lists, step, index)
    one = scratch.explain(_guarded(trace), step, index)
    assert (one.text, one.sources) == (whole.text, whole.sources)
    with pytest.raises(AssertionError, match="turned into lists"):
        _guarded(trace)[step].tolist()  # the guard does catch a whole matrix


def _random_matrix(rng: random.Random, rows: int, cols: int) -> list[list[float]]:
    pick = [0.0, 0.004, 0.01, 0.3, 0.5, -math.inf, math.nan, 1.0]
    return [
        [rng.choice(pick) if rng.random() < 0.5 else rng.random() for _ in range(cols)]
        for _ in range(rows)
    ]


@pytest.mark.parametrize("seed", range(40))
def test_the_sentences_row_chosen_with_numpy_is_the_rules_row_in_either_dtype(seed):
    rng = random.Random(seed)
    m = _random_matrix(rng, rng.randint(1, 9), rng.randint(1, 7))
    if seed % 5 == 0:
        m = [list(m[0]) for _ in m]  # ties: the first row wins
    a = np.asarray(m, dtype=np.float32 if seed % 2 else np.float64)
    every = list(range(len(a)))
    assert sentences.sharpest_row(a) == most_decided(a, every)
    # two weights >= NOTABLE, compared in float64 as Python compares the float32 values
    mixed = [i for i in every if sum(1 for v in a[i] if float(v) >= sentences.NOTABLE) >= 2]
    assert sentences.teaching_row(a) == most_decided(a, mixed or every)
    assert sentences.teaching_row(a.tolist()) == sentences.teaching_row(a)


def test_the_sentence_of_a_large_step_reads_the_same_as_of_a_small_one(qtbot, monkeypatch):
    """The window's sentence at a pooled size is the one gui.present.sentences writes from the whole
    matrix (pooling changes the picture, never the words)."""
    from gui.views.pipeline_view import PipelineView

    trace = _numpy_outcome(40, heads=1, mask_mode="causal-top-left").trace
    view = PipelineView()
    qtbot.addWidget(view)
    monkeypatch.setattr(pooled, "MAX_SIDE", 16)
    view.set_trace(trace)
    for step in ("weights", "scores", "masked", "output"):
        view.set_step(step)
        kind = steps.spec_for(steps.call_of_names(trace.names()), step).sentence
        panel = view.heatmaps[0].panel
        w = np.asarray(trace["weights"].value, dtype=np.float64)
        weights = (w[0] if trace["weights"].axes[0] == "head" else w).tolist()
        mix = kind in ("mix", "heads")
        expected = sentences.describe(
            kind,
            np.asarray(panel.raw, dtype=np.float64).tolist(),
            panel.row_labels,
            list(trace.key_tokens) if mix else panel.col_labels,
            None,
            weights if mix else None,
            heads=1,
            w_o="w_o" in trace,
            hidden=[[j > i for j in range(40)] for i in range(40)],  # causal
        )
        assert view.sentence.text() == expected, step


def test_hovering_a_pooled_heatmap_explains_the_exact_cell(qtbot, monkeypatch):
    from gui.views.pipeline_view import PipelineView

    monkeypatch.setattr(pooled, "MAX_SIDE", 16)
    trace = _numpy_outcome(40, heads=2).trace
    view = PipelineView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    view.set_trace(trace)
    view.set_step("scores")
    assert view.heatmaps[0].panel.blocks == (3, 3)
    view.hover_cell(22, 13)
    expected = scratch.explain(trace, "scores", (0, 22, 13)).text
    assert view.explanation.text() == expected and expected.startswith("scores[0][22][13] = ")

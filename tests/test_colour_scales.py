"""The weights' colour scales (fixed, per row, auto), and masked cells grey on every scale."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gui.present import view_model

INF = math.inf


def test_per_row_colour_divides_each_row_by_its_largest_weight():
    weights = np.array([[0.1, 0.3, 0.6], [0.24, 0.16, 0.6], [0.5, 0.25, 0.25]])
    image, levels = view_model.colour_weights(weights, None, "row")
    want = [[1 / 6, 0.5, 1.0], [0.4, 16 / 60, 1.0], [1.0, 0.5, 0.5]]  # worked by hand
    assert levels == (0.0, 1.0)
    np.testing.assert_allclose(image, want, rtol=1e-6)
    assert image.dtype == np.float32 and image.flags["C_CONTIGUOUS"]


def test_auto_colour_spans_the_weights_that_occur_and_greys_masked_cells():
    # the journey preset's weights are 0.10..0.24: a fixed 0..1 scale shows them alike
    weights = np.array([[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.2, 0.3, 0.5]])
    masked = np.array([[0.0, -INF, -INF], [1.0, 2.0, -INF], [1.0, 1.0, 1.0]])
    image, (lo, hi) = view_model.colour_weights(weights, masked, "auto")
    assert np.isnan(image[0, 1]) and np.isnan(image[0, 2]) and np.isnan(image[1, 2])
    assert np.isfinite(image[2]).all()  # nothing masked there: every cell coloured
    shown = [1.0, 0.4, 0.6, 0.2, 0.3, 0.5]  # the six unmasked weights
    assert lo == 0.2 and hi == pytest.approx(np.percentile(shown, 99))
    assert hi - lo < 0.81  # not the 0..1 of the fixed scale
    fixed, levels = view_model.colour_weights(weights, masked, "fixed")
    assert levels == (0.0, 1.0) and np.isnan(fixed[0, 1])  # masked is grey on every scale


def test_auto_colour_lets_one_outlier_saturate_instead_of_flattening_the_rest():
    rng = np.random.default_rng(3)
    weights = rng.uniform(0.001, 0.003, (64, 64))
    weights[5, 7] = 0.9  # one sharp weight among many flat ones (long inputs look like this)
    _image, (lo, hi) = view_model.colour_weights(weights, None, "auto")
    assert hi < 0.01 and lo >= 0.001  # the 4095 others use the whole colour range


def test_colour_ranges_refuse_unknown_names():
    with pytest.raises(ValueError, match="colour: expected one of fixed, row, auto"):
        view_model.colour_weights(np.zeros((2, 2)), None, "rainbow")


def test_masked_weights_are_grey_in_every_head_of_a_causal_trace():
    import scratch

    x = [[0.5, -1.0, 0.25, 1.0], [1.0, 0.5, -0.5, 0.0], [0.0, 1.0, 1.0, -1.0]]
    trace = scratch.trace_attention(x=x, num_heads=2, is_causal=True)
    for head in ("0", "1", view_model.HEAD_AVERAGE):
        (panel,) = view_model.panels(trace, "weights", head, "auto")
        hidden = np.isnan(panel.image)
        want = np.array([[False, True, True], [False, False, True], [False, False, False]])
        assert (hidden == want).all(), (head, hidden)
        assert (panel.raw[hidden] == 0).all()  # the trace's own numbers are untouched

"""The trace JSON's "options" (format version 1) read from the typed Trace.options and
Trace.source: the same keys and values as when options were a dict."""

import json
import math

import pytest

import scratch

pytest.importorskip("numpy")
pytest.importorskip("PyQt6")

from gui.widgets import export  # noqa: E402

X = [[1.0, 0.5], [0.0, -1.0], [2.0, 1.0]]
W = [[1.0, 0.0], [0.0, 1.0]]


def test_options_of_a_causal_self_attention_trace():
    trace = scratch.trace_attention(X, w_q=W, w_k=W, w_v=W, b_q=[0.0, 1.0], is_causal=True)
    assert export.trace_dict(trace)["options"] == {
        "is_causal": True,
        "mask": "causal",
        "masked_rows": "zero",
        "scale_given": False,
        "backend": "scratch",
        "dtype": "float64",
        "kernel": "explicit",
        "cross": False,
        "dropout_p": 0.0,
    }


def test_options_of_a_cross_attention_numpy_trace_with_a_float_mask():
    mask = [[0.0, -math.inf], [0.5, 0.0], [-math.inf, -math.inf]]
    numpy_backend = scratch.backends.get("numpy")
    trace = numpy_backend.trace_attention(
        X, key=[[1.0, 1.0], [0.0, 2.0]], attn_mask=mask, scale=0.5, masked_rows="nan",
        dtype="float32",
    )  # fmt: skip
    data = export.trace_dict(trace)
    assert data["options"] == {
        "is_causal": False,
        "mask": "float",
        "masked_rows": "nan",
        "scale_given": True,
        "backend": "numpy",
        "dtype": "float32",
        "kernel": "explicit",
        "cross": True,
        "dropout_p": 0.0,
    }
    json.dumps(data, allow_nan=False)  # every value JSON can hold


def test_a_dropout_trace_names_its_probability():
    import random

    trace = scratch.trace_attention(X, dropout_p=0.25, rng=random.Random(0))
    assert export.trace_dict(trace)["options"]["dropout_p"] == 0.25
    assert trace.options.dropout_p == 0.25 and trace.options.rng is not None

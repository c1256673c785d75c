"""gui.present.learn_model: one head picked out of a trace (GQA included), the rows and keys
shown."""

import numpy as np
import pytest

from gui.present import learn_model
from gui.state import controller
from gui.state import session as sm
from tests.journey_sessions import with_mask


def trace_of(s: sm.Session) -> object:
    """The ground-truth trace of a session (no window)."""
    return controller.run(s, lambda *a: None, lambda: False).reference


@pytest.mark.parametrize("head", range(4))
def test_a_head_of_a_grouped_query_trace(head):
    s = with_mask(sm.random_session(1, 5, 4, 2, 3, 4, 2), "causal-top-left")
    t = trace_of(s)
    x = learn_model.head_inputs(t, head)
    value = lambda n: np.asarray(t[n].tolist())  # noqa: E731
    assert (x.head, x.heads, x.d_k) == (head, 4, 2)
    kv = head // 2  # kv head h // (H / Hkv); heads side by side along the features
    np.testing.assert_array_equal(x.q, value("q")[:, 2 * head : 2 * head + 2])
    np.testing.assert_array_equal(x.k, value("k")[:, 2 * kv : 2 * kv + 2])
    np.testing.assert_array_equal(x.v, value("v")[:, 3 * kv : 3 * kv + 3])
    np.testing.assert_allclose(x.scores, x.q @ x.k.T, rtol=1e-14)  # (L, d) @ (d, S): this head's
    for name in ("scores", "scaled", "masked"):
        np.testing.assert_array_equal(getattr(x, name), value(name)[head])
    np.testing.assert_array_equal(x.allowed, np.tril(np.ones((5, 5), dtype=bool)))
    assert x.scale == pytest.approx(1 / np.sqrt(2)) and x.tokens == list(s.tokens)


def test_one_head_and_no_mask():
    t = trace_of(sm.random_session(0, 3, 4, 2, 2, 1))
    x = learn_model.head_inputs(t, 5)  # a head past the last is the last
    assert x.head == 0 and x.allowed is None and x.allowed_lists() is None
    assert x.q.shape == (3, 2) and x.scores.shape == (3, 3)


def test_too_many_tokens_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(learn_model, "MAX_TOKENS", 2)
    with pytest.raises(ValueError, match="up to 2 tokens.*has 3"):
        learn_model.head_inputs(trace_of(sm.random_session(0, 3, 4, 2, 2, 1)))


def test_rows_and_keys_shown():
    assert learn_model.tile_rows(6) == list(range(6))
    rows = learn_model.tile_rows(512)
    assert len(rows) == 64 and rows[0] == 0 and rows[-1] == 511 and rows == sorted(set(rows))
    assert learn_model.shown_keys([0.1, 0.5, 0.2], limit=12) == [0, 1, 2]
    weights = [0.0] * 20
    weights[3], weights[17], weights[9] = 0.5, 0.3, 0.2
    assert learn_model.shown_keys(weights, limit=3) == [3, 9, 17]  # the largest, in key order
    assert learn_model.number(float("nan")) == "nan" and learn_model.number(-float("inf")) == "-inf"

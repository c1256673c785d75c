"""The window's variant picker: the trace follows scratch.flex_attention, hover names the score
change, decode grows the cache one token at a time, sessions keep the variant, and bad
parameters are refused by name with the work kept."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

import scratch  # noqa: E402
from gui.present import view_model
from gui.state import session as sm  # noqa: E402
from gui.state import session_file
from gui.state.app_state import backend_dtypes  # noqa: E402
from scratch.variants import SlidingWindow, Softcap, VariantChoice  # noqa: E402

pytestmark = pytest.mark.gui

EPS = 2.0**-52


def _pick(w, **fields) -> None:
    """Set the picker's widgets as a user would, then finish the edit (one edited signal)."""
    panel = w.inputs.variant
    for name, value in fields.items():
        if name in ("mask", "align", "rope"):
            box = getattr(panel, name)
            box.setCurrentIndex(box.findData(value))
        elif name in ("softcap_on", "alibi", "sinks_on"):
            getattr(panel, name).setChecked(value)
        else:
            panel.texts[name].setText(value)
    panel.edited.emit(panel.fields())


def _heads(m, heads: int) -> list:
    d = len(m[0]) // heads
    return [[row[h * d : (h + 1) * d] for row in m] for h in range(heads)]


def test_picking_a_variant_changes_the_trace_as_flex_attention_says(settle, open_window):
    """Window (1, 0) + softcap 5 + sinks (0.5, -1) over 2 heads: every head's output and the
    sink column equal scratch.flex_attention on the trace's q, k, v (the tolerance of
    tests/test_variant_trace.py: (2 |lse| + 8) eps max|v|, doubled)."""
    w = open_window(sm.random_session(1, 6, 4, 2, 2, 2))
    plain = w.outcome.trace["head_outputs"].tolist()
    _pick(w, mask="window", left="1", right="0", softcap_on=True, softcap="5", sinks_on=True,
          sinks="0.5, -1")  # fmt: skip
    settle(w)
    trace = w.outcome.trace
    assert "sink_weights" in trace and trace["head_outputs"].tolist() != plain
    q, k, v = (_heads(trace[n].tolist(), 2) for n in "qkv")
    window, cap = SlidingWindow(1, 0), Softcap(5.0)
    block = scratch.create_block_mask(window.mask_mod, 1, 2, 6, 6)
    out, lse = scratch.flex_attention([q], [k], [v], cap.score_mod, block, scale=trace.scale,
                                      return_lse=True, sinks=[0.5, -1.0])  # fmt: skip
    v_top = max(abs(c) for row in trace["v"].tolist() for c in row)
    got, sink = trace["head_outputs"].tolist(), trace["sink_weights"].tolist()
    for h in range(2):
        tol = (2 * max(map(abs, lse[0][h])) + 8) * EPS * 2
        for i in range(6):
            for c in range(2):
                assert abs(got[h][i][c] - out[0][h][i][c]) <= tol * v_top, (h, i, c)
            want = math.exp([0.5, -1.0][h] - lse[0][h][i])
            assert abs(sink[h][i] - want) <= tol * want, (h, i)
    # the mask drawn: the window's cells, as the rule in words says
    assert w.inputs.mask_grid.grid == [[i - 1 <= j <= i for j in range(6)] for i in range(6)]
    assert w.inputs.variant.rule.text().startswith("window (1, 0): key j seen by query i iff")


def test_hover_names_the_score_change_and_the_rule(settle, open_window):
    w = open_window(sm.random_session(2, 5, 4, 2, 2, 1))
    _pick(w, mask="causal", softcap_on=True, softcap="30", alibi=True, slopes="")
    settle(w)
    p = w.pipeline
    p.set_step("scaled")
    p.hover_cell(3, 1)
    want = scratch.explain(w.outcome.reference, "scaled", (3, 1)).text
    assert p.explanation.text() == want
    assert "softcap(" in want and "= 30 * tanh(" in want and "alibi(" in want
    p.set_step("masked")
    p.hover_cell(1, 3)
    assert p.explanation.text() == "masked[1][3] = -inf: masked (causal: key 3 > 1)"


def test_decode_grows_the_cache_one_token_at_a_time(settle, open_window):
    """Each decode step's row equals that row of the full trace (bottom-right, RoPE, sinks)."""
    w = open_window(sm.random_session(4, 5, 4, 2, 2, 1))
    _pick(w, mask="window", left="2", right="0", sinks_on=True, sinks="0.25", rope="half")
    settle(w)
    full = w.outcome.trace
    panel = w.inputs.variant
    panel.decode_on.click()  # on: the whole sequence cached, the last token queries
    settle(w)
    assert w.inputs.session.decode == 5
    panel.decode.setValue(1)
    for n in range(1, 6):
        settle(w)
        trace = w.outcome.trace
        assert w.inputs.session.decode == n and trace.tokens == (full.tokens[n - 1],)
        assert trace.key_tokens == full.key_tokens[:n]
        assert trace["weights"].tolist()[0] == full["weights"].tolist()[n - 1][:n]
        assert trace["sink_weights"].tolist() == [full["sink_weights"].tolist()[n - 1]]
        assert trace["output"].tolist() == [full["output"].tolist()[n - 1]]
        assert panel.grow.isEnabled() == (n < 5)
        if n < 5:
            panel.grow.click()
    panel.decode_on.click()
    settle(w)
    assert w.inputs.session.decode == 0 and w.outcome.trace["weights"].shape == (5, 5)


def test_sessions_save_and_load_the_variant(tmp_path, settle, open_window):
    w = open_window(sm.random_session(5, 6, 4, 2, 2, 1))
    _pick(w, mask="documents", cu_seqlens="0, 2, 6", alibi=True, slopes="0.5",
          softcap_on=True, softcap="8", rope="interleaved", rope_base="100")  # fmt: skip
    settle(w)
    w.inputs.variant.decode_on.click()
    settle(w)
    saved = w.inputs.session
    assert saved.variant.cu_seqlens == (0, 2, 6) and saved.decode == 6
    path = tmp_path / "variant.json"
    session_file.save(path, saved)
    loaded = session_file.load(path, backend_dtypes())
    assert loaded == saved
    w.load_session(sm.random_session(0))
    settle(w)
    assert w.inputs.variant.mask.currentData() == "none"
    w.load_session(loaded)
    settle(w)
    panel = w.inputs.variant
    assert panel.mask.currentData() == "documents" and panel.texts["cu_seqlens"].text() == "0, 2, 6"
    assert panel.rope.currentData() == "interleaved" and panel.alibi.isChecked()
    assert "q_rotated" in w.outcome.trace.names()
    # a file written before variants existed loads with none, decode off
    old = json.loads(session_file.dumps(sm.random_session(5)))
    del old["variant"], old["decode"]
    s = session_file.loads(json.dumps(old))
    assert s.variant == VariantChoice() and s.decode == 0


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"mask": "window", "left": "-3"}, "left", "expected an integer >= 0, or -1 for unbounded"),
        ({"softcap_on": True, "softcap": "0"}, "cap", "expected a finite number > 0"),
        ({"softcap_on": True, "softcap": "-2"}, "cap", "expected a finite number > 0"),
        ({"mask": "documents", "cu_seqlens": "0, 4, 2, 6"}, "cu_seqlens",
         "expected increasing integers"),
        ({"mask": "documents", "cu_seqlens": "0, 2, 5"}, "cu_seqlens",
         "expected the last entry to be the sequence length (6), found 5"),
        ({"alibi": True, "slopes": "0.5, 0.25, 0.125"}, "slopes",
         "expected one slope per query head (H = 2), found 3"),
        ({"sinks_on": True, "sinks": "1"}, "sinks", "expected one logit per query head (2)"),
        ({"mask": "chunked", "chunk": "two"}, "chunk", "expected an integer"),
    ],
)  # fmt: skip
def test_bad_parameters_are_refused_by_name_and_the_work_stays(
    settle, open_window, fields, field, words
):
    w = open_window(sm.random_session(6, 6, 4, 2, 2, 2))
    _pick(w, mask="window", left="2", right="0")
    settle(w)
    before, trace = w.inputs.session, w.outcome.trace
    _pick(w, **fields)
    settle(w)
    message = w.statusBar().currentMessage()
    assert f"{field}: {words}" in message and message.startswith("refused: "), message
    assert w.inputs.session is before and w.outcome.trace is trace  # the work stays
    assert w.inputs.variant.texts["left"].text() == "2"  # the picker shows it again
    assert w.inputs.variant.mask.currentData() == "window"


def test_a_variant_file_with_bad_fields_is_refused_by_name():
    data = json.loads(session_file.dumps(sm.random_session(7, 4)))
    for change, field in (
        ({"left": -5, "mask": "window"}, "left"),
        ({"softcap": 0}, "cap"),
        ({"mask": "documents", "cu_seqlens": [0, 3]}, "cu_seqlens"),
        ({"sinks": "0.5"}, "sinks"),
        ({"colour": 1}, "unknown fields colour"),
    ):
        bad = {**data, "variant": {**data["variant"], **change}}
        with pytest.raises(sm.SessionError, match=f"^session field 'variant': {field}"):
            session_file.loads(json.dumps(bad))
    with pytest.raises(sm.SessionError, match="^session field 'decode'"):
        session_file.loads(json.dumps({**data, "decode": 9}))


@pytest.mark.parametrize("backend", ["numpy", "torch-cpu"])
def test_a_variant_computes_on_numpy_and_torch_and_passes_the_check(settle, open_window, backend):
    """Choosing NumPy or torch keeps the variant: it computes, and every step passes its bound."""
    if backend == "torch-cpu":
        pytest.importorskip("torch")
    w = open_window(sm.random_session(8, 4, 4, 2, 2, 1))
    _pick(w, softcap_on=True, softcap="4")
    settle(w)
    w.inputs._apply(sm.with_backend, backend, w.inputs.backends[backend])
    settle(w)
    assert w.inputs.session.backend == backend and w.outcome.backend == backend
    assert w.outcome.checks and all(c.ok for c in w.outcome.checks), w.outcome.checks
    assert "all steps pass" in w.backend_label.text()
    image = view_model.panels(w.outcome.trace, "scaled")[0].raw
    assert float(abs(image).max()) < 4.0  # softcapped: |scaled| < cap


def test_copy_as_code_refuses_a_variant_rather_than_leave_it_out(settle, open_window):
    w = open_window(sm.random_session(9, 4, 4, 2, 2, 1))
    assert "scores = q_h @ k_h.T" in w.files.copy_code("numpy")
    _pick(w, mask="chunked", chunk="2")
    settle(w)
    assert w.files.copy_code("numpy") == ""
    assert w.warnings[-1].startswith("Copy as code writes plain attention only")


def test_the_overview_groups_rope_s_q_and_k_in_one_stage():
    from scratch.core.options import Options
    from scratch.trace.forward import trace_example
    from scratch.variants import LearnedSinks, Rotary, combine

    example = scratch.Example([[1.0, 0.0], [0.0, 1.0]], params={"w_q": [[1.0, 0.0], [0.0, 1.0]]})
    trace = trace_example(example, Options(variant=combine(Rotary(), LearnedSinks([0.0]))))
    stages = [(s.names, s.arrow) for s in view_model.flow_stages(trace.names())]
    assert stages[3:5] == [(("q_rotated", "k_rotated"), "RoPE"), (("scores",), "q @ k^T")]
    assert stages[-3:-1] == [(("weights",), "softmax"), (("sink_weights",), "sink")]

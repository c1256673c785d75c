"""The dilated sliding window, one product file (scratch/variants/dilated.py), everywhere a mask
goes: Longformer's rule cell by cell, the session's choice and file, the window's picker, the
checker (a kernel with the rule passes, one with the wrong dilation is named), and NumPy and
torch (tests/flex_cases.py's "dilated" cases run through test_numpy_flex, test_flex_torch,
test_flex_torch_backend and test_variant_arrays; here the window's two backends)."""

from __future__ import annotations

import numpy as np
import pytest

from scratch.checker import check_variants
from scratch.variants import SlidingWindow, VariantChoice
from scratch.variants.choice import MASKS
from scratch.variants.dilated import DilatedWindow


def longformer(i: int, j: int, w: int, d: int, shift: int) -> bool:
    """Longformer's dilated window, as the issue states it, at query position i + shift."""
    back = i + shift - j
    return 0 <= back <= w * d and back % d == 0


@pytest.mark.parametrize("shift", [0, 3, -2])
def test_the_mask_is_longformers_rule_at_every_cell(shift):
    for w in range(4):
        for d in range(1, 5):
            rule = DilatedWindow(w, d, shift)
            for i in range(9):
                for j in range(12):
                    seen = rule.mask_mod(0, 0, i, j)
                    assert type(seen) is bool and seen == longformer(i, j, w, d, shift), (
                        w,
                        d,
                        i,
                        j,
                    )


def test_dilation_one_is_the_causal_sliding_window():
    for w in range(4):
        plain, dilated = SlidingWindow(w, 0, 1), DilatedWindow(w, 1, 1)
        cells = [(i, j) for i in range(7) for j in range(9)]
        assert [dilated.mask_mod(0, 0, *c) for c in cells] == [
            plain.mask_mod(0, 0, *c) for c in cells
        ]


def test_bad_parameters_are_refused_by_name():
    with pytest.raises(ValueError, match="dilation: expected an integer >= 1, found 0"):
        DilatedWindow(2, 0)
    with pytest.raises(ValueError, match="width: expected an integer >= 0, found -1"):
        VariantChoice(mask="dilated", width=-1).variant(4, 4, 1)


def test_the_choice_builds_it_aligned_and_session_files_keep_it():
    assert "dilated" in MASKS
    choice = VariantChoice(mask="dilated", width=3, dilation=2)
    assert choice.variant(4, 10, 2) == DilatedWindow(3, 2, 6)  # bottom-right: shift S - L
    top_left = VariantChoice(mask="dilated", align="top-left", width=3, dilation=2)
    assert top_left.variant(4, 10, 2) == DilatedWindow(3, 2, 0)
    assert VariantChoice.from_dict(choice.to_dict()) == choice
    old = {"mask": "window", "left": 3, "right": 0, "chunk": 4, "prefix": 2, "cu_seqlens": [],
           "sink_tokens": 1}  # fmt: skip  # a file written before the dilated window existed
    assert VariantChoice.from_dict(old) == VariantChoice(mask="window", left=3)
    with pytest.raises(ValueError, match="dilation: expected a value like 2"):
        VariantChoice.from_dict({"mask": "dilated", "dilation": "2"})


def test_the_rule_and_the_hover_words_say_it():
    rule = VariantChoice(mask="dilated", width=2, dilation=3).variant(6, 8, 1)
    assert rule.rule().startswith("dilated window (width 2, dilation 3, shift 2): key j seen")
    assert rule.explain(0, 0, 5, 1).startswith("seen (query 5, key 1: dilated window")
    assert rule.explain(0, 0, 5, 2).startswith("masked (query 5, key 2: dilated window")


# ---- the window's picker: a row for the mask, one for each parameter


@pytest.mark.gui
def test_the_picker_offers_it_and_the_trace_follows(open_window, settle):
    pytest.importorskip("PyQt6")
    from gui.state import session as sm

    w = open_window(sm.random_session(1, 8, 4, 2, 2, 2))
    panel = w.inputs.variant
    index = panel.mask.findData("dilated")
    assert index >= 0 and panel.mask.itemText(index) == "dilated window"
    panel.mask.setCurrentIndex(index)
    panel.texts["width"].setText("2")
    panel.texts["dilation"].setText("3")
    panel.edited.emit(panel.fields())
    settle(w)
    chosen = w.inputs.session.variant
    assert (chosen.mask, chosen.width, chosen.dilation) == ("dilated", 2, 3)
    shown = {key for key in panel.params if panel.form.isRowVisible(panel.texts[key])}
    assert shown == {"width", "dilation"}
    assert panel.texts["dilation"].toolTip().startswith("d: positions between two keys seen")
    assert panel.rule.text().startswith("dilated window (width 2, dilation 3)")
    weights = np.asarray(w.outcome.trace["weights"].tolist()).reshape(-1, 8, 8)
    unseen = np.array([[not longformer(i, j, 2, 3, 0) for j in range(8)] for i in range(8)])
    assert np.all(weights[:, unseen] == 0) and np.all(weights[:, ~unseen] > 0)
    panel.texts["dilation"].setText("0")  # refused by name, the work kept
    panel.edited.emit(panel.fields())
    assert w.inputs.session.variant.dilation == 3


# ---- the checker: its case comes from the declaration (width 2, dilation 2, L 20 of S 24)


def with_rule(dilation: int):
    """A flex-style NumPy kernel that writes its own dilated window (width 2), float64."""

    def kernel(q, k, v, mask_mod=None, score_mod=None, sinks=None):
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
        L, S = q.shape[2], k.shape[2]
        rule = DilatedWindow(2, dilation, S - L)
        seen = rule.mask_mod_array(0, 0, np.arange(L)[:, None], np.arange(S)[None, :], np)
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (1, H, L, E) @ (1, H, E, S)
        s = np.where(seen, s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v  # (1, H, L, S) @ (1, H, S, Ev)

    return kernel


def dilated_case(report):
    (found,) = [c for c in report.cases if c.name == "dilated"]
    return found


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_checker_passes_the_rule_and_names_a_wrong_dilation(seed):
    right = dilated_case(check_variants(with_rule(2), dtype="float64", seed=seed))
    assert right.status == "pass" and right.features == ("decode", "dilated"), right
    assert right.options == "dilated(width=2, dilation=2), decode (L < S, shift 4)"
    wrong = dilated_case(check_variants(with_rule(3), dtype="float64", seed=seed))
    assert wrong.status == "fail"
    assert wrong.diagnosis == "dilated window: dilation off by one (3, not 2)", wrong


def test_a_flash_style_kernel_has_no_keyword_for_it():
    def flash(q, k, v, causal=False, window_size=(-1, -1)):
        return q

    found = dilated_case(check_variants(flash, seed=0))
    assert found.status == "unsupported" and "dilated window (use a mask_mod)" in found.message


# ---- the window's two backends: the trace of a session that picks it


@pytest.mark.parametrize("backend", ["numpy", "torch-cpu"])
def test_the_windows_backends_compute_it_as_the_ground_truth(backend):
    """The picker's choice through each backend's trace, float64: every step within
    scratch.compare_traces' bounds, and the keys the rule hides weigh exactly 0."""
    pytest.importorskip(backend.split("-")[0])
    import scratch
    from scratch import backends
    from scratch.core.options import Options
    from scratch.trace.forward import trace_example

    L = 9
    choice = VariantChoice(mask="dilated", width=2, dilation=2)
    unseen = np.array([[not longformer(i, j, 2, 2, 0) for j in range(L)] for i in range(L)])
    for seed in range(3):
        rng = np.random.default_rng(seed)
        example = scratch.Example(rng.normal(size=(L, 4)).tolist(), num_heads=2)
        options = Options(variant=choice.variant(L, L, 2))
        truth = trace_example(example, options)
        ours = backends.get(backend).trace_example(example, options, dtype="float64")
        checks = scratch.compare_traces(ours, truth)
        assert [c.name for c in checks] == truth.names()
        assert all(c.ok for c in checks), [c for c in checks if not c.ok]
        weights = np.asarray(ours["weights"].tolist()).reshape(-1, L, L)  # (heads, L, S)
        assert np.all(weights[:, unseen] == 0) and np.all(weights[:, ~unseen] > 0)

"""scratch.testing without the plugin: the checker's cases as parameters, one case as an
assertion (the one runner, case by case), and hypothesis strategies that draw cases."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from scratch.checker import check
from scratch.checker.cases import Case, backward_cases, standard_cases
from scratch.checker.variant_cases import variant_cases
from scratch.testing import AttentionCase, assert_attention_close, attention_cases
from scratch.testing import strategies as ats
from scratch.testing.assertions import AttentionMismatch
from tests.backward_kernels import numpy_backward
from tests.kernels_for_checker import _with_bug, attention
from tests.variant_kernels import flash2_variants

FAST = settings(max_examples=25, deadline=None, derandomize=True)
# a search that must fail: the first failing example is enough (shrinking and the explain phase
# re-run the checker hundreds of times: one such test took over 10 minutes in the full suite)
FIND = settings(FAST, phases=[Phase.explicit, Phase.generate])


def one_element_off(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The correct output with 1 added to one element: the last head's last row, feature 1."""
    out = attention(q, k, v, attn_mask, is_causal, scale, enable_gqa).copy()
    out[(-1,) * (out.ndim - 2) + (-1, 1)] += 1.0
    return out


def one_nan(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The correct output with NaN at output[..., 0, 0]."""
    out = attention(q, k, v, attn_mask, is_causal, scale, enable_gqa).copy()
    out[..., 0, 0] = np.nan
    return out


def no_causal(q, k, v, attn_mask=None, scale=None, enable_gqa=False):
    """A correct kernel that takes no is_causal keyword."""
    return attention(q, k, v, attn_mask, False, scale, enable_gqa)


def test_the_cases_are_the_checkers_named_for_pytest():
    found = attention_cases()
    assert [c.__name__ for c in found] == [c.name for c in standard_cases("float32")]
    assert all(c.dtype == "float32" for c in found)
    back = attention_cases(dtype="float64", backward=True)
    assert [c.case for c in back] == backward_cases("float64")
    variants = attention_cases(variants=True)
    assert [c.case for c in variants] == variant_cases("float32")
    both = attention_cases(variants=True, backward=True)
    assert [c.name for c in both] == [c.name for c in variants]
    assert all(c.case.grad_output for c in both) and not any(c.case.grad_output for c in variants)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="cases: expected one of standard, full, large"):
        attention_cases(cases="huge")
    with pytest.raises(ValueError, match="cases: variants checks have the standard cases only"):
        attention_cases(cases="full", variants=True)
    with pytest.raises(ValueError, match="dtype"):
        attention_cases(dtype="int8")
    with pytest.raises(TypeError, match="case: expected an AttentionCase"):
        assert_attention_close(attention, "plain")


@pytest.mark.parametrize("case", attention_cases())
def test_a_parameter_is_named_by_its_case(case, request):
    assert request.node.callspec.id == case.name
    assert isinstance(case, AttentionCase)


@pytest.mark.parametrize("seed", [0, 11])
def test_case_by_case_equals_the_checkers_report(seed):
    """Each case run alone (the plugin's way) gets the row scratch.check's whole run gets."""
    bug = _with_bug("causal-off-by-one")
    for kernel in (attention, bug):
        whole = check(kernel, seed=seed)
        plan = check.plan(kernel, seed=seed)
        for row, case in zip(whole.cases, plan.cases, strict=True):
            alone = plan.run_one(case).cases[0]
            assert (alone.name, alone.status, alone.max_error) == (
                row.name,
                row.status,
                row.max_error,
            )
            assert alone.diagnosis == row.diagnosis, case.name


def test_a_correct_kernel_passes_every_case_and_seed():
    """Seeds 0 and 11 in float32 (prepared above), 0 in float64."""
    runs = [(c, s) for c in attention_cases() for s in (0, 11)]
    for case, seed in runs + [(c, 0) for c in attention_cases(dtype="float64")]:
        assert assert_attention_close(attention, case, seed=seed).status == "pass"


def test_a_planted_mistake_fails_with_its_diagnosis_and_worst_element():
    causal = [c for c in attention_cases() if c.case.is_causal]
    for case in causal:
        with pytest.raises(AssertionError) as caught:
            assert_attention_close(_with_bug("causal-off-by-one"), case, seed=1)
        text = str(caught.value)
        first = text.splitlines()[0]
        assert first == (
            f"{case.name} (float32, seed 1): causal mask off by one (diagonal excluded: j < i)"
        )
        assert "\nworst element: output[" in text and "FAIL" in text


def test_the_worst_element_is_where_the_error_was_planted():
    cases = {c.name: c for c in attention_cases()}
    for name, where in [
        ("plain", "[4, 1]"),
        ("batch-heads", "[1, 2, 3, 1]"),
        ("gqa", "[0, 3, 4, 1]"),
    ]:
        with pytest.raises(AssertionError, match=r"worst element: output\[.*\] off by") as e:
            assert_attention_close(one_element_off, cases[name], seed=2)
        line = next(x for x in str(e.value).splitlines() if x.startswith("worst element"))
        assert line.startswith(f"worst element: output{where} off by 1")  # 1 + rounding
    with pytest.raises(AssertionError, match=r"output\[0, 0\] NaN or inf where the truth"):
        assert_attention_close(one_nan, cases["plain"])


def test_the_worst_element_of_a_sampled_case_is_its_true_row():
    """A case of sampled rows (as the 4096-token ones) compares 5 of 40 rows; the planted last
    row (always sampled) is row 39, not 4 of the 5."""
    sampled = Case("sampled", (40, 8), (40, 8), (40, 8), rows=5)
    for seed in (0, 1):
        with pytest.raises(AssertionError, match=r"worst element: output\[39, 1\] off by 1"):
            assert_attention_close(one_element_off, sampled, seed=seed)


def test_a_declined_case_is_returned_unsupported_or_fails_when_required():
    case = next(c for c in attention_cases() if c.name == "causal-square")
    result = assert_attention_close(no_causal, case)
    assert (result.status, result.message) == ("unsupported", "fn takes no is_causal keyword")
    with pytest.raises(AssertionError, match="causal required"):
        assert_attention_close(no_causal, case, require="causal")


def test_backward_and_variant_cases_run_through_their_checks():
    back = attention_cases(backward=True)
    for case in back[:6]:
        assert assert_attention_close(numpy_backward(), case).status == "pass"
    with pytest.raises(AssertionError, match="worst element: dq\\["):
        assert_attention_close(numpy_backward("no_d"), back[0])
    window = next(c for c in attention_cases(variants=True) if c.name == "window-causal")
    assert assert_attention_close(flash2_variants, window).status == "pass"
    planted = lambda *a, **kw: flash2_variants(*a, **kw, bug="window-left-short")  # noqa: E731
    with pytest.raises(AssertionError, match="window off by one on the left"):
        assert_attention_close(planted, window, variant_style="flash")


@given(case=ats.shapes())
@FAST
def test_drawn_shapes_fit_together(case):
    q, k, v = case
    assert len(q) == len(k) == len(v) in (2, 3, 4)
    assert k[-2] == v[-2] and q[-1] == k[-1] and k[:-2] == v[:-2] and q[:-3] == k[:-3]
    if len(q) > 2:
        assert q[-3] % k[-3] == 0


@given(case=ats.cases(), seed=st.integers(0, 2**16), dtype=st.sampled_from(["float32", "float64"]))
@FAST
def test_a_correct_kernel_passes_drawn_cases(case, seed, dtype):
    assert assert_attention_close(attention, case, seed=seed, dtype=dtype).status == "pass"


@given(case=ats.variant_cases(), seed=st.integers(0, 2**16))
@FAST
def test_a_correct_variant_kernel_passes_drawn_variant_cases(case, seed):
    kw = dict(seed=seed, variant_style="flash")
    assert assert_attention_close(flash2_variants, case, **kw).status in ("pass", "unsupported")


def test_hypothesis_finds_a_planted_mistake_in_drawn_cases():
    @given(case=ats.cases(masks=False, scale=False))
    @FIND
    def missing_scale(case):
        assert_attention_close(_with_bug("missing-scale"), case)

    with pytest.raises(AttentionMismatch, match="attention_missing_scale"):
        missing_scale()  # found (not shrunk: see FIND)

    @given(case=ats.variant_cases(variants=("window",)))
    @FIND
    def window_short(case):
        kernel = lambda *a, **kw: flash2_variants(*a, **kw, bug="window-left-short")  # noqa: E731
        assert_attention_close(kernel, case, variant_style="flash")

    with pytest.raises(AttentionMismatch, match="window_size=\\("):
        window_short()


def test_the_strategies_name_the_dev_extra_without_hypothesis(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # import hypothesis -> ImportError
    monkeypatch.delitem(sys.modules, "scratch.testing.strategies")
    with pytest.raises(ImportError, match=r"needs hypothesis.*scratch-attention\[dev\]"):
        importlib.import_module("scratch.testing.strategies")
    with pytest.raises(ValueError, match="variants: expected names from"):
        ats.variant_cases(variants=("flash",))

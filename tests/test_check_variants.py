"""check_variants: variant cases, the two keyword styles, and the planted-mistake catalogue.

The catalogue (tests/checker_variants.py) runs here on seed 0, its torch kernels only in part
(each torch FlexAttention check costs 2-3 s); the sweep, tests/checker_variants_sweep.py, ran
the correct kernels on seeds 0-199 and the mistakes on 0-49 (the README quotes its numbers).
"""

from __future__ import annotations

import numpy as np
import pytest

from scratch.checker import check_variants
from scratch.checker.variant_cases import registered_cases, variant_cases
from scratch.checker.variant_keywords import style_of
from scratch.checker.variant_numpy import attend
from scratch.checker.variant_prepare import prepare_variant
from scratch.flex.forward import create_block_mask, flex_attention
from scratch.ops.rope import rotary
from tests.checker_outside import outcome
from tests.checker_variants import CORRECT, MISTAKES
from tests.variant_kernels import flash2_variants, split_kv


@pytest.mark.parametrize("seed", [0, 7])
def test_numpy_form_equals_the_ground_truth_on_every_case(seed):
    """variant_numpy.attend (the diagnosis's family, nothing planted) == scratch.flex_attention."""
    for case in variant_cases("float64"):
        prep = prepare_variant(case, "float64", seed)
        got = attend(case, prep.data)
        # float64 rounding of sums of E products and S terms (any rule change moves >= 1e-3)
        S, E = case.k[2], case.q[3]
        allowed = 4 * (E + S) * 2.0**-53 * float(np.max(np.abs(prep.data.v)))
        assert np.max(np.abs(got - prep.truth)) <= allowed, case.name


SUITE = [n for n, m in MISTAKES.items() if m[1] == "numpy"] + ["flex from keywords decode top-left"]
SUITE_CORRECT = [
    n for n, c in CORRECT.items() if c[1] == "numpy" or n.startswith("FlexAttention eager")
]


@pytest.mark.parametrize("name", SUITE)
def test_planted_variant_mistake_is_caught_and_never_misnamed(name):
    fn, array, dtype, words = MISTAKES[name]
    report = check_variants(fn, array=array, dtype=dtype, seed=0)
    found = outcome(report, words)
    assert found != "passed", name
    assert found != "misnamed", (name, report.diagnosis)
    if words is not None:
        assert found == "named", (name, str(report))


@pytest.mark.parametrize("name", SUITE_CORRECT)
def test_correct_variant_kernels_raise_no_alarm(name):
    fn, array, dtype = CORRECT[name]
    report = check_variants(fn, array=array, dtype=dtype, seed=0)
    assert report, str(report)


def test_the_style_is_read_from_the_signature():
    assert style_of(flash2_variants, None) == "flash"
    assert style_of(split_kv, None) == "flex"

    def both(q, k, v, window_size=None, mask_mod=None):
        return q

    def neither(q, k, v, **kwargs):
        return q

    for fn in (both, neither):
        with pytest.raises(ValueError, match="variant_style"):
            style_of(fn, None)
    assert style_of(neither, "flex") == "flex"
    with pytest.raises(ValueError, match="variant_style: expected one of flash, flex"):
        style_of(neither, "triton")


def test_a_flash_style_kernel_refuses_prefix_lm_unless_required():
    report = check_variants(flash2_variants, seed=0)
    assert report, str(report)
    assert "; prefix-LM, " in report.verdict and report.verdict.endswith(" unsupported")
    refused = {c.name for c in report.cases if c.status == "unsupported"}
    assert refused == {"prefix-lm", "prefix-tiles"} | {c.name for c in registered_cases()}
    required = check_variants(flash2_variants, seed=0, require="prefix")
    assert not required
    assert [c.name for c in required.failed] == ["prefix-lm", "prefix-tiles"]


def test_a_missing_keyword_makes_its_cases_unsupported():
    """A tiled kernel without softcap or sinks: those cases are refused, the rest pass."""

    def no_softcap(q, k, v, causal=False, window_size=(-1, -1), alibi_slopes=None,
                   cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=0, rotary_cos=None,
                   rotary_sin=None, rotary_interleaved=False):  # fmt: skip
        return flash2_variants(q, k, v, causal, window_size, 0.0, alibi_slopes, None,
                               cu_seqlens_q, cu_seqlens_k, attention_chunk, rotary_cos,
                               rotary_sin, rotary_interleaved)  # fmt: skip

    report = check_variants(no_softcap, seed=0)
    assert report, str(report)
    refused = {c.name for c in report.cases if c.status == "unsupported"}
    assert {"softcap", "softcap-causal", "sinks", "window-softcap-gqa-sinks"} <= refused
    assert not check_variants(no_softcap, seed=0, require=["softcap"])


def test_the_mods_serve_plain_python_numbers():
    """array='list': a kernel that calls mask_mod and score_mod with ints and floats."""

    def plain(q, k, v, score_mod=None, mask_mod=None, sinks=None, rotary_cos=None,
              rotary_sin=None, rotary_interleaved=False, enable_gqa=False):  # fmt: skip
        _, H, L, _ = (len(q), len(q[0]), len(q[0][0]), len(q[0][0][0]))
        S = len(k[0][0])
        if rotary_cos is not None:
            pairing = "interleaved" if rotary_interleaved else "half"
            q = rotary(q, range(S - L, S), pairing=pairing)
            k = rotary(k, range(S), pairing=pairing)
        block = None if mask_mod is None else create_block_mask(mask_mod, 1, H, L, S)
        return flex_attention(q, k, v, score_mod, block, enable_gqa=enable_gqa, sinks=sinks)

    report = check_variants(plain, array="list", dtype="float64", seed=0)
    assert report, str(report)
    assert all(c.status == "pass" for c in report.cases)


def test_bad_settings_are_refused_with_the_argument_named():
    with pytest.raises(ValueError, match=r"numpy has no bfloat16 \(array='numpy', dtype="):
        check_variants(flash2_variants, dtype="bfloat16")
    with pytest.raises(ValueError, match="require: expected names from"):
        check_variants(flash2_variants, require="windows")
    with pytest.raises(TypeError, match="fn: expected a callable"):
        check_variants("flash2")


def test_the_command_line_checks_variants():
    from scratch.checker.cli import main

    assert main(["--variants", "tests.variant_kernels:split_kv", "--dtype", "float64"]) == 0
    args = ["--variants", "tests.variant_kernels:flash2_variants", "--require", "prefix"]
    assert main(args) == 1


def test_a_truth_that_disagrees_with_the_reference_kernels_is_an_internal_error(monkeypatch):
    """Without the guard a wrong truth widens the allowed error until every kernel passes."""
    import scratch.checker.variant_prepare as vp
    from scratch.variants import SlidingWindow

    right = vp.truth_variant

    def window_one_wider(case, slopes):
        if case.window is None:
            return right(case, slopes)
        left, r = case.window
        return SlidingWindow(left + 1, r, case.shift)

    monkeypatch.setattr(vp, "truth_variant", window_one_wider)
    monkeypatch.setattr(vp, "_CACHE", type(vp._CACHE)())
    with pytest.raises(RuntimeError, match="rule and truth disagree"):
        check_variants(split_kv, seed=11)

"""The checker names a keyword a kernel takes and never uses (tests/ignored_kernels.py).

Each planted kernel on seeds 0-1 (seeds 0-9: tests/checker_ignored_sweep.py): the names in its
diagnosis are exactly the expected ones, on every failing case; where no 'ignored' name is
true of every case (a float mask skipped, is_causal applied only when L == S), none is given.
"""

from __future__ import annotations

import pytest

from scratch.checker import check, check_variants
from scratch.checker.ignored import IGNORED, settle_ignored
from scratch.checker.report import CaseResult
from tests.ignored_kernels import CORRECT, FORWARD, VARIANTS

SEEDS = (0, 1)


def answered(report) -> list:
    """The failing cases where fn returned an output (a raise is no ignored keyword's doing)."""
    return [c for c in report.failed if c.raised is None]


def names(report) -> set[str]:
    """The diagnoses of the failing cases."""
    return {c.diagnosis for c in report.failed if c.diagnosis}


def assert_named(report, want: tuple[str, ...], label: str) -> None:
    """Failed; every failing case that returned an output named with one of `want` (all of
    them used), or, with no names wanted, no 'ignored' name anywhere."""
    assert not report, (label, str(report))
    if want:
        assert all(c.diagnosis in want for c in answered(report)), (label, str(report))
        assert names(report) == set(want), (label, report.diagnosis)
    else:
        assert not names(report) & set(IGNORED), (label, report.diagnosis)


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_kernel_ignoring_a_keyword_is_named(name):
    fn, array, want = FORWARD[name]
    for seed in SEEDS:
        assert_named(check(fn, array=array, seed=seed), want, (name, seed))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_kernel_ignoring_a_keyword_is_named(name):
    fn, style, array, want = VARIANTS[name]
    for seed in SEEDS:
        report = check_variants(fn, variant_style=style, array=array, seed=seed)
        assert_named(report, want, (name, seed))


def test_the_readme_tour_kernel_names_both_masks():
    """The tour's words: the 11 cases with a mask or is_causal fail (the GQA cases raise), the
    diagnosis names attn_mask and is_causal."""
    fn, _, _ = FORWARD["README tour, scale put right"]
    report = check(fn)
    wrong = answered(report)
    assert len(wrong) == 11 and len(report.cases) == 24, str(report)
    assert all({"mask", "causal"} & set(c.features) for c in wrong), str(report)
    assert report.diagnosis.startswith("is_causal ignored"), report.diagnosis
    assert "; attn_mask ignored" in report.diagnosis, report.diagnosis


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_kernels_still_pass(name):
    fn, how = CORRECT[name]
    for seed in SEEDS:
        if how in ("flash", "flex"):
            report = check_variants(fn, variant_style=how, seed=seed)
        else:
            report = check(fn, array=how, seed=seed)
        assert report, (name, seed, str(report))


def result(name: str, status: str, features: tuple, diagnosis: str | None) -> CaseResult:
    """A hand-made case result."""
    r = CaseResult(name, "", "", "float32", status, diagnosis=diagnosis)
    r.features = features
    return r


def test_settle_drops_a_name_some_case_with_the_keyword_contradicts():
    name = next(n for n, uses in IGNORED.items() if uses == ("mask",))
    other = "some other mistake"
    for status, said in (
        ("pass", None),  # the mask applied here
        ("fail", None),  # failing unexplained
        ("fail", other),  # failing for another reason
    ):
        cases = [result("a", "fail", ("mask",), name), result("b", status, ("mask",), said)]
        settle_ignored(cases)
        assert cases[0].diagnosis is None, (status, said)
        assert cases[1].diagnosis == said
    kept = [result("a", "fail", ("mask",), name), result("b", "unsupported", ("mask",), None)]
    settle_ignored(kept)
    assert kept[0].diagnosis == name  # a refused case says nothing against it

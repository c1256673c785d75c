"""The checker: correct kernels pass, each planted mistake fails with the right diagnosis.

The buggy kernels live in tests/kernels_for_checker.py (numpy, one bug each). The command line
is tested through subprocess only: importing the module scratch.check would shadow the
function scratch.check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import scratch.backends as backends
from scratch.checker import check
from tests import kernels_for_checker as kernels

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch is optional
    torch = None

ROOT = Path(__file__).resolve().parents[1]


def backend_fn(name: str):
    """A backend's scaled_dot_product_attention as a checker-style fn."""
    sdpa = backends.get(name).scaled_dot_product_attention

    def fn(q, k, v, **kwargs):
        return sdpa(q, k, v, **kwargs)

    fn.__name__ = fn.__qualname__ = f"{name}_sdpa"
    return fn


@pytest.mark.parametrize("name", backends.available())
def test_every_backend_passes(name):
    array = "torch" if name.startswith("torch") else "numpy"
    report = check(backend_fn(name), array=array, dtype="float32")
    assert report, str(report)
    assert report.diagnosis is None
    assert all(c.status == "pass" for c in report.cases), str(report)


def test_correct_numpy_kernel_passes_full_cases():
    report = check(kernels.attention, cases="full")
    assert report and len(report.cases) > len(check(kernels.attention).cases), str(report)


def test_ground_truth_passes_with_lists():
    import scratch

    report = check(scratch.scaled_dot_product_attention, array="list")
    assert report, str(report)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_torch_sdpa_passes(dtype):
    report = check(F.scaled_dot_product_attention, array="torch", dtype=dtype)
    assert report, str(report)
    assert all(c.status == "pass" for c in report.cases), str(report)


DIAGNOSES = {
    "missing-scale": "missing scale",
    "scale-1/d": "scale 1/d instead of 1/sqrt(d)",
    "wrong-axis": "softmax over the wrong axis",
    "no-transpose": "without the transpose",
    "mask-inverted": "mask convention inverted",
    "causal-off-by-one": "causal mask off by one",
    "causal-bottom-right": "bottom-right causal alignment",
    "mask-before-scale": "mask added before scaling",
    "dropout": "dropout left on (the output changes between two identical calls)",
    "dropout-seeded": "dropout left on (weights zeroed or rescaled by 1.25",
    "no-max": "subtract the row max",
    "ignore-scale": "scale argument is ignored",
    "gqa-interleaved": "h % Hkv",
    "nan-rows": "masked_rows='nan'",
    "float16": "lower precision: the error fits a float16 computation",
    "returns-weights": "returned the weights instead of the output",
}


@pytest.mark.parametrize("bug", sorted(DIAGNOSES))
def test_planted_mistake_fails_with_its_diagnosis(bug):
    report = check(kernels.BUGGY[bug])
    assert not report
    assert report.diagnosis is not None, str(report)
    first = report.diagnosis.split("; ")[0]  # the diagnosis most failing cases agree on
    assert DIAGNOSES[bug] in first, report.diagnosis
    assert f"diagnosis: {report.diagnosis}" in str(report)


def test_each_mistake_fails_only_the_cases_that_reveal_it():
    """Mistakes in one feature leave the other cases passing (cases are distinguishable)."""
    expected = {
        "mask-inverted": {"bool-mask", "masked-row"},
        "causal-off-by-one": {"causal-square", "causal-wide", "causal-tall"},
        "causal-bottom-right": {"causal-wide", "causal-tall"},
        "mask-before-scale": {"float-mask"},
        "ignore-scale": {"custom-scale"},
        "gqa-interleaved": {"gqa"},
        "nan-rows": {"masked-row"},
        "no-max": {"large-logits"},
    }
    for bug, cases in expected.items():
        report = check(kernels.BUGGY[bug])
        assert {c.name for c in report.failed} == cases, (bug, str(report))


def test_within_the_bound_but_far_from_plain_fails():
    """A 2^-20 relative error fits the loose worst-case bound but not 2x the plain kernel's."""
    report = check(kernels.BUGGY["sloppy"])
    assert not report
    by_rule = [c for c in report.failed if c.ratio <= 1.0]
    assert len(by_rule) >= 5 and all(not c.rule.ok for c in by_rule)
    assert all("2x the plain float32 kernel" in c.message for c in by_rule)


def test_float16_scores_fail_the_float32_accumulation_bound():
    """A kernel that keeps scores in float16 is as good as plain float16, but not float32-summed."""
    report = check(kernels.attention, dtype="float16")
    assert not report
    assert all(c.rule.ok for c in report.failed)
    assert report.diagnosis.startswith("scores or sums kept in float16"), report.diagnosis


def test_nan_policy_accepts_nan_rows():
    """The same kernel passes when the user says fully masked rows should be NaN."""
    assert check(kernels.BUGGY["nan-rows"], masked_rows="nan")
    assert not check(kernels.attention, masked_rows="nan")


def test_unsupported_features_are_reported_not_failed():
    for fn in (kernels.attention_no_masks, kernels.attention_refuses_masks):
        report = check(fn)
        assert report, str(report)
        status = {c.name: c for c in report.cases}
        assert status["bool-mask"].status == "unsupported"
        assert status["gqa"].status == "unsupported"
        assert status["plain"].status == "pass"
    refused = {c.name: c for c in check(kernels.attention_refuses_masks).cases}
    assert "masks are not implemented" in refused["causal-wide"].message


def test_a_crash_in_a_feature_handled_elsewhere_fails():
    """Causal crashing for L != S while causal with L == S ran is a bug, not a refusal."""
    report = check(kernels.attention_square_causal_only)
    assert not report, str(report)
    status = {c.name: c for c in report.cases}
    assert status["causal-square"].status == "pass"
    for name in ("causal-wide", "causal-tall"):
        assert status[name].status == "fail" and status[name].raised
        assert "yet fn handled is_causal in case causal-square" in status[name].message
    polite = {c.name: c for c in check(kernels.attention_refuses_non_square_causal).cases}
    assert polite["causal-wide"].status == "unsupported"  # NotImplementedError: a refusal
    assert polite["causal-square"].status == "pass"


def test_a_result_that_is_not_an_array_fails():
    """None (a forgotten return) fails even in cases with optional features."""
    report = check(kernels.attention_forgets_return_with_masks)
    assert not report
    status = {c.name: c for c in report.cases}
    for name in ("bool-mask", "causal-wide", "masked-row"):
        assert status[name].status == "fail", str(report)
        assert "not an array of numbers" in status[name].message
    assert status["plain"].status == "pass"


def test_a_ragged_list_result_fails_without_crashing():
    report = check(kernels.attention_ragged_list, array="list")
    assert not report and all(c.status == "fail" for c in report.cases)
    assert "ragged rows" in report.cases[0].message


def test_wrong_output_shape_fails_with_a_clear_message():
    report = check(kernels.BUGGY["returns-weights"])
    plain = {c.name: c for c in report.cases}["plain"]
    assert plain.status == "fail"
    assert "output shape (5, 7), expected (5, 4)" in plain.message


def test_report_table():
    report = check(kernels.attention)
    text = str(report)
    for word in (
        "case",
        "shapes",
        "options",
        "max error",
        "bound",
        "verdict",
        "causal-wide",
        "5x8 / 7x8 / 7x4",
        "pass",
        "13 cases: 13 pass, 0 fail, 0 unsupported",
    ):
        assert word in text, word
    assert len(report.cases) == 13 and all(c.max_error >= 0 for c in report.cases)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="array"):
        check(kernels.attention, array="jax")
    with pytest.raises(ValueError, match="dtype"):
        check(kernels.attention, dtype="int8")
    with pytest.raises(ValueError, match="bfloat16"):
        check(kernels.attention, dtype="bfloat16")
    with pytest.raises(ValueError, match="cases"):
        check(kernels.attention, cases="all")
    with pytest.raises(ValueError, match="device"):
        check(kernels.attention, device="cuda")
    with pytest.raises(TypeError, match="fn"):
        check("attention")


# ---------------------------------------------------------------- command line


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """python -m scratch.check ... from the tests folder (so kernels_for_checker imports)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "scratch.check", *args],
        cwd=ROOT / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_pass_fail_and_bad_arguments():
    ok = run_cli("kernels_for_checker:attention")
    assert ok.returncode == 0, ok.stderr
    assert "-> PASS" in ok.stdout and "checking case 13/13" in ok.stderr
    bad = run_cli("kernels_for_checker:missing_scale", "--dtype", "float64")
    assert bad.returncode == 1
    assert "diagnosis: missing scale" in bad.stdout
    for args in (
        ["kernels_for_checker:nope"],
        ["no_such_module:f"],
        ["kernels_for_checker"],
        ["kernels_for_checker:NOT_A_FUNCTION"],
        ["kernels_for_checker:attention", "--dtype", "float8"],
        ["kernels_for_checker:attention", "--array", "jax"],
    ):
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "error" in result.stderr


NO_NUMPY = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {"numpy", "torch"}:
            raise ImportError("blocked for this test: " + name)
sys.meta_path.insert(0, Block())
import scratch
from scratch.checker import check
from scratch.compare import compare_traces
from scratch.tolerance import tolerance
report = check(scratch.scaled_dot_product_attention, array="list", dtype="float64")
assert report, str(report)
assert all(c.rule is None for c in report.cases)  # no numpy: the reference rule is skipped
x = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
w = [[1.0, 0.5], [0.0, 1.0], [2.0, 1.0]]
t = scratch.trace_attention(x, w_q=w, w_k=w, w_v=w, is_causal=True)
checks = compare_traces(t, t)
assert [c.name for c in checks] == t.names() and all(c.ok for c in checks)
assert tolerance(x, x, x, [[1.0, 0.0], [0.5, 0.5]], dtype="float32")[1][2] > 0
print("ok")
"""


def test_checker_and_comparison_run_without_numpy():
    done = subprocess.run(
        [sys.executable, "-c", NO_NUMPY], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

"""check_variants_backward: the variant cases' gradients, the catalogue of backward mistakes.

Seed 0 here; `tests/checker_variants_sweep.py 0 20 backward` ran seeds 0-19 (the README
quotes its numbers).
"""

from __future__ import annotations

import numpy as np
import pytest

from scratch.checker import check_variants_backward
from scratch.checker.variant_cases import variant_cases
from scratch.checker.variant_grads import grads
from scratch.checker.variant_prepare import prepare_backward
from tests.checker_outside import outcome
from tests.checker_variants import BACKWARD_CORRECT, BACKWARD_MISTAKES


def test_numpy_backward_equals_the_ground_truth_on_every_case():
    """variant_grads.grads (the diagnosis's family) == scratch.flex_attention_backward."""
    for case in variant_cases("float64"):
        made = prepare_backward(case, "float64", 3)
        got = grads(case, made.prep.data, made.d_out)
        S, E = case.k[2], case.q[3]
        for g, t in zip(got, made.truth, strict=True):
            # float64 rounding of sums of E + S terms of size <= max |t| + 1 (rule changes: >> 1e-3)
            allowed = 8 * (E + S) * 2.0**-53 * (float(np.max(np.abs(t))) + 1.0)
            assert np.max(np.abs(g - t)) <= allowed, case.name


@pytest.mark.parametrize("name", sorted(BACKWARD_MISTAKES))
def test_planted_backward_mistake_is_caught_and_named(name):
    fn, array, dtype, words = BACKWARD_MISTAKES[name]
    report = check_variants_backward(fn, array=array, dtype=dtype, seed=0)
    assert outcome(report, words) == "named", (name, str(report))


@pytest.mark.parametrize("name", sorted(BACKWARD_CORRECT))
def test_correct_backward_kernels_raise_no_alarm(name):
    fn, array, dtype = BACKWARD_CORRECT[name]
    report = check_variants_backward(fn, array=array, dtype=dtype, seed=0)
    assert report, str(report)


def test_a_backward_returning_too_few_gradients_fails_with_the_shapes_named():
    fn = BACKWARD_CORRECT["flash2 tiled backward float32"][0]

    def three_only(q, k, v, grad_output, enable_gqa=False, **kw):
        return fn(q, k, v, grad_output, **kw)[:3]

    report = check_variants_backward(three_only, variant_style="flash", seed=0)
    assert not report
    failed = {c.name for c in report.failed}
    assert failed == {"sinks", "window-softcap-gqa-sinks"}
    assert "grad_sinks" in report.failed[0].message


def test_the_command_line_checks_a_variant_backward():
    from scratch.checker.cli import main

    target = "tests.variant_backward_kernels:flash2_variants_backward"
    assert main(["--variants", "--backward", target, "--dtype", "float64"]) == 0


def test_the_backward_variant_checker_is_reached_from_scratch_as_the_readme_says():
    import scratch
    from scratch.checker import check_variants_backward

    assert scratch.check_variants_backward is check_variants_backward
    assert "check_variants_backward" in scratch.__all__

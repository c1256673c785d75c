"""check_variants and check_variants_backward in float16 and bfloat16 (issue 35 item 3).

Correct 16-bit kernels written as outside projects write them (tests/variant_kernels_16bit.py:
transformers' eager attention and torch SDPA with an explicit mask, both with their autograd
backward; torch FlexAttention called eagerly; a NumPy FlashAttention-2 tiled kernel in float32
on float16 inputs) pass; planted mistakes fail with the names the float32 checker gives them.
Seed 0 here; SCRATCH_16BIT_SEEDS=10 runs seeds 0-9 (the sweep the README quotes).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from scratch.bounds.tolerance import ulp
from scratch.checker import check_variants, check_variants_backward
from scratch.checker.arrays import Arrays
from scratch.checker.variant_cases import variant_cases
from scratch.checker.variant_keywords import keywords
from scratch.checker.variant_numpy import attend
from scratch.checker.variant_prepare import prepare_backward, prepare_variant
from tests import variant_kernels as vk
from tests import variant_kernels_16bit as k16
from tests.checker_outside import outcome
from tests.checker_variants import LEFT, kernel

pytest.importorskip("torch")

SEEDS = range(int(os.environ.get("SCRATCH_16BIT_SEEDS", "1")))
DTYPES = ("float16", "bfloat16")
# name -> (fn, dtypes, the fewest cases it must run and pass); torch arrays
CORRECT = {
    "transformers eager": (kernel(k16.eager, "eager"), DTYPES, 19),
    "SDPA, explicit mask": (kernel(k16.sdpa, "sdpa"), DTYPES, 16),  # no softcap in SDPA
    # eager FlexAttention takes 1-4 s a check: one dtype
    "FlexAttention eager": (kernel(vk.flex_eager, "flex"), ("bfloat16",), 22),
}
BACKWARD_CORRECT = {
    "autograd through transformers eager": (kernel(k16.eager_backward, "eager_bw"), 19),
    "autograd through SDPA": (kernel(k16.sdpa_backward, "sdpa_bw"), 16),
}
SOFTCAP, LONG, NO_MAX = "softcap not applied", "window-left-long", "softmax-16bit-no-max"
# name -> (fn, dtype, the words its name must hold); torch arrays, FlashAttention's keywords
MISTAKES = {
    "eager window left one long bfloat16": (k16.eager, LONG, "bfloat16", LEFT),
    "eager window left one long float16": (k16.eager, LONG, "float16", LEFT),
    "SDPA window left one long float16": (k16.sdpa, LONG, "float16", LEFT),
    "eager softcap missing bfloat16": (k16.eager, "no-softcap", "bfloat16", SOFTCAP),
    "eager softcap missing float16": (k16.eager, "no-softcap", "float16", SOFTCAP),
    # float16's exp overflows past 11.09; the large-logits case reaches it
    "eager softmax in float16 without the max": (k16.eager, NO_MAX, "float16", "exp overflows"),
    "FlexAttention sink left out bfloat16": (vk.flex_eager, "sink-out", "bfloat16", "sink left"),
}
BACKWARD_MISTAKES = {
    "autograd window left one long bfloat16": (k16.eager_backward, LONG, "bfloat16", LEFT),
    "autograd softcap missing float16": (k16.eager_backward, "no-softcap", "float16", SOFTCAP),
}


def passed(report) -> int:
    """How many cases ran and passed."""
    return sum(c.status == "pass" for c in report.cases)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_correct_16bit_kernels_pass(dtype, seed):
    for name, (fn, dtypes, least) in CORRECT.items():
        if dtype in dtypes:
            report = check_variants(fn, array="torch", dtype=dtype, seed=seed)
            assert report and passed(report) >= least, (name, str(report))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_correct_16bit_backward_kernels_pass(dtype, seed):
    for name, (fn, least) in BACKWARD_CORRECT.items():
        report = check_variants_backward(
            fn, variant_style="flash", array="torch", dtype=dtype, seed=seed
        )
        assert report and passed(report) >= least, (name, str(report))


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_planted_16bit_mistake_is_caught_and_named(name):
    fn, bug, dtype, words = MISTAKES[name]
    report = check_variants(kernel(fn, bug, bug=bug), array="torch", dtype=dtype, seed=0)
    assert outcome(report, words) == "named", (name, str(report))


@pytest.mark.parametrize("name", sorted(BACKWARD_MISTAKES))
def test_planted_16bit_backward_mistake_is_caught_and_named(name):
    fn, bug, dtype, words = BACKWARD_MISTAKES[name]
    wrong = kernel(fn, bug, bug=bug)
    report = check_variants_backward(wrong, variant_style="flash", array="torch", dtype=dtype)
    assert outcome(report, words) == "named", (name, str(report))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_eager_reference_rounds_where_torch_eager_attention_does(dtype):
    """The checker's 16-bit eager reference equals a transformers-style torch kernel to the bit
    (99.2% of elements in float16, 100% in bfloat16; FlashAttention's roundings: 30-70%)."""
    arrays, same = Arrays("torch", None), []
    for case in variant_cases(dtype):
        if case.prefix is not None or case.registered_mask is not None:
            continue  # no FlashAttention keyword
        prep = prepare_variant(case, dtype, 0)
        kw = keywords(case, prep.data, arrays, dtype, "flash", set())
        d = prep.data
        got = k16.eager(*(arrays.make(x.tolist(), dtype) for x in (d.q, d.k, d.v)), **kw)
        mine = attend(case, d, dtype=dtype, eager=True)
        same.append(float(np.mean(mine == got.double().numpy())))
    assert min(same) >= 0.98, same


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_bounds_are_a_few_units_in_the_last_place(dtype):
    """Each allowed error, forward and backward, is at most 16 ulps of the largest true value
    (seen: 4.7-9.3 forward, 4.3-13.7 backward; a floor of (E + S) 16-bit roundings: 16-102)."""
    for case in variant_cases(dtype):
        prep = prepare_variant(case, dtype, 0)
        assert prep.allowed <= 16 * ulp(float(np.max(np.abs(prep.truth))), dtype), case.name
        made = prepare_backward(case, dtype, 0)
        for t, allowed in zip(made.truth, made.allowed, strict=True):
            assert allowed <= 16 * ulp(float(np.max(np.abs(t))), dtype), case.name


def test_float16_runs_with_numpy_and_bfloat16_needs_torch():
    fn = kernel(k16.widened, "widened")
    report = check_variants(fn, array="numpy", dtype="float16")
    assert report and passed(report) >= 17, str(report)
    with pytest.raises(ValueError, match=r"numpy has no bfloat16 \(array='numpy', dtype="):
        check_variants(fn, array="numpy", dtype="bfloat16")


def test_a_kernel_returning_float32_for_16bit_inputs_passes():
    """The checker judges values, as scratch.check does: a float32 answer is within the bound."""
    fn = kernel(k16.widened, "widened_float32_out", bug="float32-out")
    assert fn(*(np.zeros((1, 1, 2, 4), np.float16),) * 3).dtype == np.float32
    report = check_variants(fn, array="numpy", dtype="float16")
    assert report and passed(report) >= 17, str(report)

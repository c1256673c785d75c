"""check_variants on outside-style sink, split-KV, paged and tile-skipping kernels.

tests/outside_kernels_b.py labels each planted mistake with the words its name must hold: on
seeds 0 and 1 every one is caught, never misnamed, and named wherever a name is expected;
every correct kernel passes. The 50-seed record (and 200 seeds of the correct kernels) is
tests/outside_record_b.py.
"""

from __future__ import annotations

import pytest

from scratch.checker import check_variants
from tests.checker_outside import outcome
from tests.outside_kernels_b import CORRECT, MISTAKES

SEEDS = (0, 1)  # the suite's time budget; the record runs 0-49 and 0-199


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_outside_b_mistake_is_caught_and_gets_its_name(name):
    fn, array, dtype, words = MISTAKES[name]
    for seed in SEEDS:
        report = check_variants(fn, array=array, dtype=dtype, seed=seed)
        found = outcome(report, words)
        assert found != "passed", (name, seed)
        assert found != "misnamed", (name, seed, str(report))
        if words is not None:
            assert found == "named", (name, seed, str(report))


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_outside_b_kernel_passes(name):
    fn, array, dtype = CORRECT[name]
    for seed in SEEDS:
        report = check_variants(fn, array=array, dtype=dtype, seed=seed)
        assert report, (name, seed, str(report))

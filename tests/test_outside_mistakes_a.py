"""Outside kernels' slips in RoPE, softcap, ALiBi, chunks and documents get their names.

tests/outside_kernels_a.py holds the kernels (transformers' Llama RoPE, FlashAttention's
apply_rotary_emb, Gemma 2's softcap, BLOOM's ALiBi, a dense FlashAttention-keyword reference, a
varlen loop, Llama 4's chunk loop) and the planted slips; here on two seeds each slip is named
(every failing case's name holds the words, outcome 'named') and each correct kernel passes.
tests/outside_record_a.py runs the same over seeds 0-49 and 0-199.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scratch.checker.outside_slips import paper_slopes  # noqa: E402
from scratch.checker.variant_cases import variant_cases  # noqa: E402
from scratch.checker.variant_numpy import Planted, attend  # noqa: E402
from scratch.checker.variant_prepare import prepare_variant  # noqa: E402
from scratch.variants import alibi_slopes  # noqa: E402
from tests.outside_kernels_a import CORRECT_KERNELS, PLANTED  # noqa: E402
from tests.outside_record_a import DTYPES, mistakes, run_correct, run_mistake  # noqa: E402

SEEDS = (0, 1)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one torch thread (several spin on a shared machine); restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(mistakes()))
def test_each_outside_slip_gets_its_name(name):
    fn, words = mistakes()[name]
    for seed in SEEDS:
        found, report = run_mistake(fn, words, seed)
        names = [(c.name, c.diagnosis) for c in report.failed]
        assert found == "named", (name, seed, found, names)


@pytest.mark.parametrize("fn", CORRECT_KERNELS, ids=lambda fn: fn.__name__)
def test_each_correct_outside_kernel_passes(fn):
    for seed in SEEDS:
        for dtype in DTYPES:
            report = run_correct(fn, dtype, seed)
            assert report, str(report)
            assert sum(c.status == "pass" for c in report.cases) >= 4, report.verdict


def test_the_catalogue_has_twenty_slips_and_six_correct_kernels():
    assert len(PLANTED) >= 20 and len(CORRECT_KERNELS) >= 6
    assert len(mistakes()) == len(PLANTED)  # no two slips share a name


def test_paper_slopes_are_the_ground_truths_slopes():
    """The slope candidates are anchored: shift 0 is scratch.variants.alibi_slopes."""
    for H in range(1, 17):
        assert paper_slopes(H) == alibi_slopes(H), H


def test_the_slip_families_hold_the_truth_where_nothing_slips():
    """RoPE from base 10000, softcap (cap, cap), the case's own slopes: the ground truth; so a
    fitted base or cap that differs from the case's is a real difference."""
    for case in variant_cases("float64"):
        prep = prepare_variant(case, "float64", 3)
        same = []
        if case.rotary is not None:
            same.append(Planted(rope_freq=(10000.0, 2.0)))
        if case.softcap is not None:
            same.append(Planted(softcap_form=(case.softcap, case.softcap)))
        if case.alibi:
            same.append(Planted(slopes=tuple(alibi_slopes(case.q[1]))))
        for plant in same:
            out = attend(case, prep.data, plant)
            S, E = case.k[2], case.q[3]
            allowed = 4 * (E + S) * 2.0**-53 * float(np.max(np.abs(prep.data.v)))
            assert np.max(np.abs(out - prep.truth)) <= 64 * allowed, (case.name, plant)

"""The ground truth's flex_attention against torch's FlexAttention (eager, float64, CPU).

Every built-in variant and several combinations, with and without learned sinks, GQA and
L != S; then hypothesis over shapes, seeds and cases (fully masked rows included). Tolerance:
both sides are float64; torch's dense math sums at most 8 terms of size < 30, so its error is
below 8 * 2.2e-16 * 30 < 1e-13 (the ground truth is correctly rounded up to a few ulps).
"""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

import scratch  # noqa: E402
from tests.flex_cases import CASES, COMBINED, cu_seqlens, random_problems  # noqa: E402
from tests.flex_torch import randn, torch_flex  # noqa: E402

TOL = 1e-13


def truth(case, q, k, v, *, enable_gqa=False, sinks=None, block=2, scale=None):
    """The ground truth's (output, lse), its block mask built with small tiles."""
    B, H, L = len(q), len(q[0]), len(q[0][0])
    S = len(k[0][0])
    mask = case.variant.mask_mod
    bm = None if mask is None else scratch.create_block_mask(mask, B, H, L, S, BLOCK_SIZE=block)
    return scratch.flex_attention(
        q, k, v, case.variant.score_mod, bm, scale, enable_gqa, return_lse=True, sinks=sinks
    )


def assert_same(ours, theirs, what: str) -> None:
    """Output and lse equal within TOL; -inf lse (rows that see nothing) in the same places."""
    (out, lse), (t_out, t_lse) = ours, theirs
    out = torch.tensor(out, dtype=torch.float64)
    lse = torch.tensor(lse, dtype=torch.float64)
    assert out.shape == t_out.shape, f"{what}: output shape {out.shape} != {t_out.shape}"
    gap = (out - t_out).abs().max().item()
    assert gap <= TOL, f"{what}: output differs by {gap:.3g}"
    empty = torch.isinf(t_lse)
    assert torch.equal(torch.isinf(lse), empty), f"{what}: rows that see nothing differ"
    assert torch.equal(lse[empty], t_lse[empty])
    if (~empty).any():
        gap = (lse - t_lse)[~empty].abs().max().item()
        assert gap <= TOL, f"{what}: lse differs by {gap:.3g}"


def inputs(seed: int, B: int, H: int, Hkv: int, L: int, S: int, E: int, Ev: int):
    rng = random.Random(seed)
    return randn(rng, B, H, L, E), randn(rng, B, Hkv, S, E), randn(rng, B, Hkv, S, Ev)


SINKS = [0.5, -1.0, 0.2, 2.0]
RUNS = [(name, None) for name in CASES] + [(name, SINKS) for name in COMBINED]


@pytest.mark.parametrize(("name", "sinks"), RUNS, ids=[f"{n}{'+sinks' * bool(s)}" for n, s in RUNS])
def test_every_variant_matches_flex_attention(name, sinks):
    """GQA (4 query heads on 2 kv heads), L = 5 != S = 7, two batch entries."""
    B, H, Hkv, L, S = 2, 4, 2, 5, 7
    q, k, v = inputs(1, B, H, Hkv, L, S, 3, 2)
    case = CASES[name](B, H, L, S)
    ours = truth(case, q, k, v, enable_gqa=True, sinks=sinks)
    assert_same(ours, torch_flex(case, q, k, v, enable_gqa=True, sinks=sinks), name)


def test_documents_from_cu_seqlens_match_flex_attention():
    """One packed batch entry of documents [0, 2), [2, 3), [3, 6); a scale of 0.8 given."""
    q, k, v = inputs(2, 1, 2, 2, 6, 6, 3, 3)
    case = cu_seqlens(1, 2, 6, 6)
    ours, theirs = truth(case, q, k, v, scale=0.8), torch_flex(case, q, k, v, scale=0.8)
    assert_same(ours, theirs, "cu_seqlens")


def test_rows_that_see_nothing_give_zero_and_minus_inf():
    """Causal bottom-right, L > S: the first L - S queries see no key (FlexAttention: 0, -inf)."""
    q, k, v = inputs(3, 1, 1, 1, 5, 3, 2, 2)
    case = CASES["causal bottom-right"](1, 1, 5, 3)
    out, lse = truth(case, q, k, v)
    assert out[0][0][:2] == [[0.0, 0.0], [0.0, 0.0]] and lse[0][0][:2] == [-math.inf] * 2
    assert_same((out, lse), torch_flex(case, q, k, v), "L > S")
    # with a learned sink the same rows still output 0, and their lse is the sink's logit
    out, lse = truth(case, q, k, v, sinks=[0.75])
    assert out[0][0][0] == [0.0, 0.0] and lse[0][0][0] == 0.75
    assert_same((out, lse), torch_flex(case, q, k, v, sinks=[0.75]), "L > S, sink")


@random_problems
def test_hypothesis_shapes_gqa_and_seeds(name, z, with_sinks, seed):
    B, H, Hkv, group, L, S, E, Ev = z.B, z.H, z.Hkv, z.group, z.L, z.S, z.E, z.Ev
    q, k, v = inputs(seed, B, H, Hkv, L, S, E, Ev)
    sinks = [0.3 * h - 0.5 for h in range(H)] if with_sinks else None
    case = CASES[name](B, H, L, S)
    ours = truth(case, q, k, v, enable_gqa=group > 1, sinks=sinks, block=1 + seed % 3)
    theirs = torch_flex(case, q, k, v, enable_gqa=group > 1, sinks=sinks)
    assert_same(ours, theirs, f"{name} B={B} H={H} Hkv={Hkv} L={L} S={S}")


def test_the_fast_eager_path_is_torchs_ordinary_eager_path():
    """The tests skip dynamo's trace of each mod; the ordinary eager call gives the same bits."""
    B, H, Hkv, L, S = 1, 4, 2, 5, 7
    q, k, v = inputs(9, B, H, Hkv, L, S, 3, 2)
    case = COMBINED["window + softcap"](B, H, L, S)
    fast = torch_flex(case, q, k, v, enable_gqa=True, sinks=SINKS)
    traced = torch_flex(case, q, k, v, enable_gqa=True, sinks=SINKS, traced=True)
    assert torch.equal(fast[0], traced[0]) and torch.equal(fast[1], traced[1])

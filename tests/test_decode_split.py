"""Split-KV (flash-decoding): partials over key splits and their merge, against decode.

The merged row is not bit-equal to the full row in general; its gap stays within the bound
derived in scratch/decode/split_kv.py's docstring, u W_c (5T + 3E + 12 ln n + 3 ln k + 27) for the
output and u (3T + 6 ln n + 3 ln k + 9) for lse, over a seed sweep. One split is bit-equal;
empty splits (lse -inf) merge to the same answer; a merge without rescaling, splits at the
wrong key positions and top-left queries are planted and fail. Standard library only.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from decode_cases import mods, problem, rows, variants

import scratch
import scratch.decode.split_kv
from scratch.core.options import FlexOptions
from scratch.decode.attention import at_positions
from scratch.decode.split_kv import merge_partials, split_bounds, split_kv_partials
from scratch.flex.forward import create_block_mask, head, prepare
from scratch.variants import Causal, SlidingWindow

U = 2.0**-53
SINKS = [0.3, -0.5, 1.1, 0.0]


def full_rows(q, k, v, variant, sinks=None) -> dict:
    """Each (b, h, i): flex's Row of the full decode (scores, weights, lse) at true positions."""
    B, H, L, S = len(q), len(q[0]), len(q[0][0]), len(k[0][0])
    m = mods(variant)
    moved_mask = at_positions(m["mask_mod"], S - L)
    block = None if moved_mask is None else create_block_mask(moved_mask, B, H, L, S)
    options = FlexOptions(at_positions(m["score_mod"], S - L), block, enable_gqa=True, sinks=sinks)
    x = prepare(q, k, v, options)
    heads = {(b, h): head(x, b, h) for b in range(B) for h in range(H)}
    return {(b, h, i): seen_row(s, i) for (b, h), s in heads.items() for i in range(L)}


def seen_row(steps, i: int) -> SimpleNamespace:
    """Row i of a head's flex steps: the keys it saw, their scores and weights, its lse."""
    keys = [j for j, s in enumerate(steps.masked[i]) if s != -math.inf]
    scores, weights = [steps.masked[i][j] for j in keys], [steps.weights[i][j] for j in keys]
    return SimpleNamespace(keys=keys, scores=scores, weights=weights, lse=steps.lse[i])


def gaps_over_bounds(q, k, v, variant, num_splits, merged, sinks=None) -> list[float]:
    """For every row and feature: |merged - decode| / bound (<= 1 is within the bound)."""
    full, full_lse = scratch.decode_attention(
        q, k, v, **mods(variant), enable_gqa=True, return_lse=True, sinks=sinks
    )
    partials = split_kv_partials(q, k, v, num_splits, **mods(variant), enable_gqa=True)
    out, lse = merged
    group = len(q[0]) // len(k[0])
    ratios = []
    for (b, h, i), r in full_rows(q, k, v, variant, sinks).items():
        n = len(r.keys) + (sinks is not None)
        if n == 0:  # the row sees nothing: both exactly 0 and -inf
            assert out[b][h][i] == full[b][h][i] and lse[b][h][i] == full_lse[b][h][i] == -math.inf
            continue
        part_lse = [p[1][b][h][i] for p in partials]
        finite = [t for t in part_lse if t != -math.inf]
        T = max(abs(t) for t in [r.lse, *finite])
        E = max([abs(s - r.lse) for s in r.scores] + [abs(t - r.lse) for t in finite])
        for (lo, hi), t in zip(split_bounds(len(k[0][0]), num_splits), part_lse):
            E = max([E] + [abs(s - t) for s, j in zip(r.scores, r.keys) if lo <= j < hi])
        splits = num_splits + (sinks is not None)
        lse_bound = U * (3 * T + 6 * math.log(n) + 3 * math.log(splits) + 9)
        ratios.append(abs(lse[b][h][i] - full_lse[b][h][i]) / lse_bound)
        grow = 5 * T + 3 * E + 12 * math.log(n) + 3 * math.log(splits) + 27
        for c, value in enumerate(full[b][h][i]):
            W = math.fsum(w * abs(v[b][h // group][j][c]) for w, j in zip(r.weights, r.keys))
            gap = abs(out[b][h][i][c] - value)
            ratios.append(gap / (U * W * grow) if gap else 0.0)
    return ratios


def spread_problem(seed: int, S: int = 12, L: int = 2):
    """Queries at the last L of S positions, scores spread over about +-10."""
    q, k, v = problem(seed, S=S, E=4)
    q = rows([[[[3 * x for x in r] for r in h] for h in b] for b in q], S - L, S)
    return q, [[[[1.5 * x for x in r] for r in h] for h in b] for b in k], v


@pytest.mark.parametrize("name", ["plain", "causal", "window", "alibi", "window softcap alibi"])
@pytest.mark.parametrize("num_splits", [2, 3, 5])
@pytest.mark.parametrize("seed", range(8))
def test_merged_splits_stay_within_the_derived_bound(name, num_splits, seed):
    q, k, v = spread_problem(seed)
    variant = variants(4, 12)[name]
    merged = scratch.split_kv_attention(
        q, k, v, num_splits, **mods(variant), enable_gqa=True, return_lse=True
    )
    assert max(gaps_over_bounds(q, k, v, variant, num_splits, merged)) <= 1.0


@pytest.mark.parametrize("seed", range(8))
def test_learned_sinks_join_in_the_merge(seed):
    q, k, v = spread_problem(seed)
    variant = variants(4, 12)["window softcap alibi"]
    merged = scratch.split_kv_attention(
        q, k, v, 3, **mods(variant), enable_gqa=True, return_lse=True, sinks=SINKS
    )
    assert max(gaps_over_bounds(q, k, v, variant, 3, merged, SINKS)) <= 1.0


def test_the_merge_is_not_always_bit_equal_but_the_gap_is_a_few_ulps():
    """Over a sweep some merged rows differ from the full rows (so == would be wrong here)."""
    ratios = []
    for seed in range(6):
        q, k, v = spread_problem(seed)
        merged = scratch.split_kv_attention(q, k, v, 3, enable_gqa=True, return_lse=True)
        ratios += gaps_over_bounds(q, k, v, None, 3, merged)
    assert any(ratios) and max(ratios) <= 1.0


@pytest.mark.parametrize("seed", range(4))
def test_one_split_is_bit_equal(seed):
    """With one split the merge multiplies by exp(0) = 1 and adds log(1) = 0: exact."""
    q, k, v = spread_problem(seed)
    variant = variants(4, 12)["window softcap alibi"]
    options = {**mods(variant), "enable_gqa": True, "return_lse": True}
    split = scratch.split_kv_attention(q, k, v, 1, **options)
    assert split == scratch.decode_attention(q, k, v, **options)


def test_empty_splits_merge_correctly():
    """A window of 2 keys leaves the first splits all masked (lse -inf, output 0); 20 splits of
    12 keys leave the last ones with no key at all. The merge equals decode within the bound."""
    q, k, v = spread_problem(1)
    window = SlidingWindow(1, 0)
    partials = split_kv_partials(q, k, v, 4, **mods(window), enable_gqa=True)
    assert all(lse == -math.inf for p in partials[:3] for b in p[1] for h in b for lse in h)
    assert all(x == 0.0 for p in partials[:3] for b in p[0] for h in b for r in h for x in r)
    for num_splits in (4, 20):
        merged = scratch.split_kv_attention(
            q, k, v, num_splits, **mods(window), enable_gqa=True, return_lse=True
        )
        assert max(gaps_over_bounds(q, k, v, window, num_splits, merged)) <= 1.0
    assert split_bounds(12, 20)[12:] == [(12, 12)] * 8


def test_a_row_that_sees_nothing_merges_to_zero_and_minus_inf():
    empty = ([[[[0.0, 0.0]]]], [[[-math.inf]]])  # (1, 1, 1, 2) and (1, 1, 1)
    assert merge_partials([empty, empty]) == ([[[[0.0, 0.0]]]], [[[-math.inf]]])
    # with a learned sink: output 0, lse = the sink, as flex_attention gives
    assert merge_partials([empty, empty], sinks=[0.7]) == ([[[[0.0, 0.0]]]], [[[0.7]]])


def test_merge_numbers():
    """Two splits with lse log 1 and log 3: shares 1/4 and 3/4, lse log 4."""
    a = ([[[[4.0]]]], [[[0.0]]])
    b = ([[[[8.0]]]], [[[math.log(3.0)]]])
    out, lse = merge_partials([a, b])
    assert out[0][0][0][0] == pytest.approx(4.0 / 4 + 8.0 * 3 / 4, abs=1e-14)
    assert lse[0][0][0] == pytest.approx(math.log(4.0), abs=1e-15)


# ---------------------------------------------------------------- planted mistakes fail


def merge_without_rescaling(partials, sinks=None):
    """Plant: the partial outputs added as they are (no exp(lse_n - lse))."""
    out, lse = merge_partials(partials, sinks)
    outs = [p[0] for p in partials]
    summed = [
        [
            [
                [math.fsum(o[b][h][i][c] for o in outs) for c in range(len(r))]
                for i, r in enumerate(rh)
            ]
            for h, rh in enumerate(rb)
        ]
        for b, rb in enumerate(out)
    ]
    return summed, lse


@pytest.mark.parametrize("plant", ["no rescaling", "local key positions", "top-left"])
def test_planted_split_mistakes_exceed_the_bound(plant, monkeypatch):
    q, k, v = spread_problem(2)
    variant = variants(4, 12)["window softcap alibi"]
    if plant == "no rescaling":
        monkeypatch.setattr(scratch.decode.split_kv, "merge_partials", merge_without_rescaling)
    real = scratch.decode.split_kv.attend_at
    if plant == "local key positions":  # each split's keys numbered from 0
        monkeypatch.setattr(
            scratch.decode.split_kv, "attend_at", lambda x, qo, ko, s, m: real(x, qo, 0, s, m)
        )
    if plant == "top-left":
        monkeypatch.setattr(scratch.decode.split_kv, "query_offset", lambda L, S: 0)
    merged = scratch.split_kv_attention(
        q, k, v, 3, **mods(variant), enable_gqa=True, return_lse=True
    )
    monkeypatch.undo()
    assert max(gaps_over_bounds(q, k, v, variant, 3, merged)) > 1e6


# ---------------------------------------------------------------- bad input, named


def test_bad_input_is_named():
    q, k, v = problem(0, 1, 2, 2, 4)
    with pytest.raises(ValueError, match="num_splits"):
        scratch.split_kv_attention(q, k, v, 0)
    with pytest.raises(ValueError, match="mask_mod"):
        scratch.split_kv_attention(q, k, v, 2, mask_mod=Causal(1).mask_mod)
    with pytest.raises(ValueError, match="partials: expected a non-empty list"):
        merge_partials([])
    one = ([[[[1.0]]]], [[[0.0]]])
    with pytest.raises(ValueError, match=r"partials\[1\]: expected a pair"):
        merge_partials([one, [1.0]])
    with pytest.raises(ValueError, match=r"partials\[1\]: expected output"):
        merge_partials([one, ([[[[1.0, 2.0]]]], [[[0.0]]])])
    with pytest.raises(TypeError, match=r"partials\[0\] lse"):
        merge_partials([([[[[1.0]]]], "x")])
    with pytest.raises(ValueError, match="sinks"):
        merge_partials([one], sinks=[0.0, 1.0])
    with pytest.raises(TypeError, match="return_lse"):
        scratch.split_kv_attention(q, k, v, 2, return_lse=1)

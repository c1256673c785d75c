"""The variants' array forms (NumPy and torch) against their plain-Python mods, cell by cell."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from flex_cases import CASES, shapes
from hypothesis import given, settings
from hypothesis import strategies as st

from scratch.variants import (
    ALiBi,
    Causal,
    ChunkedLocal,
    LearnedSinks,
    PrefixLM,
    SinkTokens,
    SlidingWindow,
    Softcap,
    SymmetricALiBi,
    and_masks,
    compose,
    or_masks,
)
from scratch.variants.arrays import ROW_BY_ROW_FROM, as_array
from scratch.variants.base import array_form

XPS = {"numpy": np, "torch": torch}


def grid(xp, B, H, L, S):
    """Index arrays (B,1,1,1), (1,H,1,1), (L,1), (1,S) that broadcast to (B, H, L, S)."""
    ar = (lambda n: np.arange(n)) if xp is np else (lambda n: torch.arange(n))
    return (
        ar(B).reshape(B, 1, 1, 1),
        ar(H).reshape(1, H, 1, 1),
        ar(L).reshape(L, 1),
        ar(S).reshape(1, S),
    )


def as_numpy(x, shape):
    """An xp result broadcast to `shape` as a NumPy array."""
    if isinstance(x, torch.Tensor):
        x = x.numpy()
    return np.broadcast_to(np.asarray(x), shape)


def cells(B, H, L, S):
    return [(b, h, i, j) for b in range(B) for h in range(H) for i in range(L) for j in range(S)]


def scores_for(xp, seed, shape):
    """Seeded float64 scaled scores, some large (softcap's saturation)."""
    raw = np.random.default_rng(seed).normal(0, 3, shape)
    return raw if xp is np else torch.from_numpy(raw)


def compare_forms(variant, xp, shape, seed):
    """mask_mod_array, score_mod_array and score_grad_array equal the plain forms at every cell."""
    B, H, L, S = shape
    b, h, q, kv = grid(xp, *shape)
    if variant.mask_mod is None:
        assert variant.mask_mod_array is None
    else:
        seen = as_numpy(variant.mask_mod_array(b, h, q, kv, xp), shape)
        assert seen.dtype == np.bool_
        for c in cells(*shape):
            assert bool(seen[c]) == bool(variant.mask_mod(*c)), (variant, xp.__name__, c)
    if variant.score_mod is None:
        assert variant.score_mod_array is None and variant.score_grad_array is None
        return
    score = scores_for(xp, seed, shape)
    out = as_numpy(variant.score_mod_array(score, b, h, q, kv, xp), shape)
    grad = as_numpy(variant.score_grad_array(score, b, h, q, kv, xp), shape)
    s = as_numpy(score, shape)
    for c in cells(*shape):
        want = variant.score_mod(float(s[c]), *c)
        # float64 throughout: equal but for the last bits of tanh (np/torch vs math)
        assert math.isclose(out[c], want, rel_tol=1e-15, abs_tol=1e-15), (variant, c, out[c], want)
        dwant = variant.score_grad(float(s[c]), *c)  # dual numbers
        assert math.isclose(grad[c], dwant, rel_tol=1e-14, abs_tol=1e-15), (variant, c)


@settings(max_examples=40)
@given(name=st.sampled_from(list(CASES)), z=shapes(), seed=st.integers(0, 2**16))
def test_array_forms_equal_the_plain_mods(name, z, seed):
    shape = (z.B, z.H, z.L, z.S)
    variant = CASES[name](*shape).variant
    for xp in XPS.values():
        compare_forms(variant, xp, shape, seed)


@pytest.mark.parametrize("name", list(CASES))
def test_every_case_at_one_size(name):
    """Each case once at (2, 4, 5, 7) in both libraries (hypothesis may not draw them all)."""
    shape = (2, 4, 5, 7)
    for xp in XPS.values():
        compare_forms(CASES[name](*shape).variant, xp, shape, seed=3)


@pytest.mark.parametrize("name", list(CASES))
def test_zero_dim_tensors_as_flex_attention_passes_them(name):
    """FlexAttention calls the mods with 0-d tensors (vmapped): one cell at a time."""
    shape = (2, 2, 3, 4)
    variant = CASES[name](*shape).variant
    rng = np.random.default_rng(7)
    for c in cells(*shape):
        t = [torch.tensor(n) for n in c]
        if variant.mask_mod is not None:
            seen = variant.mask_mod_array(*t, torch)
            assert seen.shape == () and bool(seen) == bool(variant.mask_mod(*c)), c
        if variant.score_mod is not None:
            s = float(rng.normal(0, 3))
            out = variant.score_mod_array(torch.tensor(s, dtype=torch.float64), *t, torch)
            assert math.isclose(float(out), variant.score_mod(s, *c), rel_tol=1e-15, abs_tol=1e-15)


def test_float32_scores_stay_float32():
    """A bias meets the score in its own dtype (no silent float64 tile)."""
    variant = CASES["sink tokens + softcap + bias"](1, 2, 4, 4).variant
    for xp in XPS.values():
        b, h, q, kv = grid(xp, 1, 2, 4, 4)
        s = scores_for(xp, 0, (1, 2, 4, 4))
        s = s.astype(np.float32) if xp is np else s.float()
        assert str(variant.score_mod_array(s, b, h, q, kv, xp).dtype).endswith("float32")


def test_and_or_compose_keep_array_forms_and_user_functions_have_none():
    window, causal, cap = SlidingWindow(1, 1), Causal(), Softcap(2.0)
    both = and_masks(window.mask_mod, causal.mask_mod)
    either = or_masks(window.mask_mod, causal.mask_mod)
    chained = compose(cap.score_mod, CASES["alibi"](1, 2, 3, 3).variant.score_mod)
    for f, kind in ((both, "mask"), (either, "mask"), (chained, "score"), (chained, "grad")):
        assert array_form(f, kind) is not None
    shape = (1, 2, 4, 5)
    for xp in XPS.values():
        for mod in (both, either):
            compare_forms(mod.__self__, xp, shape, seed=1)
        compare_forms(chained.__self__, xp, shape, seed=2)

    def mine(b, h, q_idx, kv_idx):  # a user's own plain function: no array form
        return kv_idx != 1

    assert array_form(mine, "mask") is None
    assert array_form(and_masks(mine, causal.mask_mod), "mask") is None
    assert array_form(compose(lambda s, *_: 2 * s), "score") is None


def test_learned_sinks_are_not_a_mod():
    """Sinks are a denominator term: no mask_mod or score_mod, so no array form either."""
    sinks = LearnedSinks((0.5, -1.0))
    assert sinks.mask_mod is None and sinks.score_mod is None
    assert sinks.mask_mod_array is None and sinks.score_mod_array is None
    assert sinks.score_grad_array is None


@pytest.mark.parametrize("name", list(CASES))
def test_torch_flex_attention_runs_the_array_forms(name):
    """torch's FlexAttention (eager, float64) calls the array forms as its mods (vmapped 0-d
    tensors, its block mask made from mask_mod_array): output and lse equal the ground truth's."""
    import scratch
    from tests.flex_cases import Case
    from tests.flex_torch import randn, torch_flex

    B, H, Hkv, L, S = 2, 4, 2, 5, 7
    rng = random.Random(5)
    q, k, v = randn(rng, B, H, L, 3), randn(rng, B, Hkv, S, 3), randn(rng, B, Hkv, S, 2)
    variant = CASES[name](B, H, L, S).variant
    mask, score = variant.mask_mod_array, variant.score_mod_array
    case = Case(
        variant,
        None if mask is None else (lambda b, h, q_idx, kv_idx: mask(b, h, q_idx, kv_idx, torch)),
        None
        if score is None
        else (lambda s, b, h, q_idx, kv_idx: score(s, b, h, q_idx, kv_idx, torch)),
    )
    out, lse = torch_flex(case, q, k, v, enable_gqa=True)
    bm = (
        None
        if variant.mask_mod is None
        else scratch.create_block_mask(variant.mask_mod, B, H, L, S, 2)
    )
    t_out, t_lse = scratch.flex_attention(
        q, k, v, variant.score_mod, bm, None, True, return_lse=True
    )
    assert np.abs(out.numpy() - np.array(t_out)).max() < 1e-13
    t_lse = np.array(t_lse)
    empty = np.isneginf(t_lse)
    assert np.array_equal(np.isneginf(lse.numpy()), empty)
    assert np.abs(np.where(empty, 0, lse.numpy() - np.where(empty, 0, t_lse))).max() < 1e-13


SHIFTED = [
    ALiBi.for_heads(3, shift=2),
    SymmetricALiBi.for_heads(3, shift=-1),
    Causal(2),
    SlidingWindow(1, 1, shift=-1),
    ChunkedLocal(2, shift=1),
    PrefixLM(2, shift=1),
    SinkTokens(1, 1, shift=2),
]


@pytest.mark.parametrize("variant", SHIFTED, ids=[type(v).__name__ for v in SHIFTED])
def test_shifted_variants_keep_their_shift(variant):
    """Queries placed at i + shift (decode, bottom-right): the array forms shift them too."""
    for xp in XPS.values():
        compare_forms(variant, xp, (1, 3, 4, 7), seed=11)


@pytest.mark.parametrize("xp", XPS.values(), ids=list(XPS))
def test_a_rule_that_reads_no_index_is_spread_to_every_cell(xp):
    """The window (-1, -1) answers True whatever the cell: its derived array form is still one
    bool per (q_idx, kv_idx) cell, as torch's vmap and the tiles need."""
    _, _, q, kv = grid(xp, 1, 1, 3, 5)
    seen = SlidingWindow(-1, -1).mask_mod_array(0, 0, q, kv, xp)
    assert tuple(seen.shape) == (3, 5) and str(seen.dtype).endswith("bool") and bool(seen.all())
    if xp is torch:
        from scratch.backends.torch_flex_explicit import on_grid, torch_form

        grid_seen = on_grid(torch_form(SlidingWindow(-1, -1).mask_mod, "mask"), (1, 1, 3, 5), None)
        assert grid_seen.shape == (1, 1, 3, 5) and bool(grid_seen.all())


# a table past ROW_BY_ROW_FROM cells is filled a row at a time (arrays.as_array): the same array
# as one conversion gives, and anything ragged or mixed read by that one conversion
BIG = 300  # 300 x 300 = 90,000 cells >= ROW_BY_ROW_FROM
TABLES = {
    "bool grid": lambda r: tuple(tuple(r.random() < 0.5 for _ in range(BIG)) for _ in range(BIG)),
    "float rows": lambda r: [[r.gauss(0, 1) for _ in range(BIG)] for _ in range(BIG)],
    "int rows": lambda r: [[r.randrange(-9, 9) for _ in range(BIG)] for _ in range(BIG)],
    "4-D bools": lambda r: [[[[r.random() < 0.5 for _ in range(BIG)] for _ in range(BIG)]]],
    "a float among bools": lambda r: [[True] * BIG] * (BIG - 1) + [[True] * (BIG - 1) + [0.5]],
    "an int among floats": lambda r: [[1.5] * BIG] * (BIG - 1) + [[2] + [1.5] * (BIG - 1)],
}


@pytest.mark.parametrize("xp_name", sorted(XPS))
@pytest.mark.parametrize("kind", sorted(TABLES))
@pytest.mark.parametrize("seed", [0, 1])
def test_a_large_table_is_the_array_one_conversion_gives(kind, xp_name, seed):
    xp, table = XPS[xp_name], TABLES[kind](random.Random(seed))
    assert math.prod(np.shape(table)) >= ROW_BY_ROW_FROM  # the row-by-row path is taken
    one = xp.as_tensor(table) if xp is torch else np.asarray(table)
    ours = as_array(table, xp)
    assert ours.dtype == one.dtype and tuple(ours.shape) == tuple(one.shape)
    assert bool((ours == one).all())
    wide = torch.float64 if xp is torch else np.float64  # a dtype asked for is kept
    assert as_array(table, xp, wide).dtype == wide


def test_a_large_ragged_table_is_refused_as_one_conversion_refuses_it():
    ragged = [[True] * BIG] * (BIG - 1) + [[True] * (BIG - 1)]
    with pytest.raises(ValueError, match="inhomogeneous"):
        as_array(ragged, np)

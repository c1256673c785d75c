"""NumPy flex_attention (explicit, chunked) and its backward (explicit, tiled) vs the ground truth.

float64: both sides are float64 on inputs of size ~1 with at most 6 keys and 3 features, the
ground truth correctly rounded; a NumPy kernel's few dozen roundings of values below ~30 stay
below 1e-13 (output, lse) and 1e-12 (gradients, one more product and sum). float32: FlashAttention's
rule (scratch.bounds.tolerance.reference_error_rule): at most twice the error of a plain float32
softmax(scores) @ v written here with torch's dense ops and the cases' own torch mods.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flex_cases import CASES, COMBINED, random_problems
from hypothesis import given, settings
from hypothesis import strategies as st

import scratch
from scratch.backends import get
from scratch.backends import numpy_flex as nf
from scratch.bounds.tolerance import reference_error_rule
from scratch.core.options import FlexOptions
from scratch.variants import Causal, SlidingWindow, Softcap, combine

TOL, GRAD_TOL = 1e-13, 1e-12
SINKS = [0.5, -1.0, 0.2, 2.0]


def arrays(seed, B, H, Hkv, L, S, E, Ev):
    """Seeded q, k, v and grad_output (float64)."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    return n((B, H, L, E)), n((B, Hkv, S, E)), n((B, Hkv, S, Ev)), n((B, H, L, Ev))


def block_mask(variant, B, H, L, S, size, maker=nf.create_block_mask):
    """The variant's block mask (None without a mask_mod): NumPy's, keeping its partial tiles'
    cells, or the ground truth's (then the kernels ask the mask_mod on every partial tile)."""
    if variant.mask_mod is None:
        return None
    return maker(variant.mask_mod, B, H, L, S, BLOCK_SIZE=size)


def truth(variant, q, k, v, g, bm, sinks):
    """The ground truth's output, lse and gradients (float64 arrays)."""
    lists = [a.tolist() for a in (q, k, v, g)]
    out, lse = scratch.flex_attention(
        *lists[:3], variant.score_mod, bm, None, True, return_lse=True, sinks=sinks
    )
    grads = scratch.flex_attention_backward(*lists, variant.score_mod, bm, None, True, sinks=sinks)
    return np.array(out), np.array(lse), [np.array(x) for x in grads]


def assert_close(got, want, tol, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    empty = np.isneginf(want)
    assert np.array_equal(np.isneginf(got), empty), f"{what}: rows that see nothing differ"
    gap = np.max(np.abs(np.where(empty, 0, got - np.where(empty, 0, want))), initial=0)
    assert gap <= tol, f"{what}: differs by {gap:.3g}"


def check_all(variant, shapes, seed, sinks, *, size=2, chunk=3, block=4, bm=False):
    """Both forward kernels and both backward kernels against the ground truth, float64
    (bm: a block mask to use, else NumPy's for the variant)."""
    B, H, Hkv, L, S, E, Ev = shapes
    q, k, v, g = arrays(seed, *shapes)
    if bm is False:
        bm = block_mask(variant, B, H, L, S, size)
    out, lse, grads = truth(variant, q, k, v, g, bm, sinks)
    for kernel in nf.KERNELS:
        o, ls = nf.flex_attention(
            q, k, v, variant.score_mod, bm, None, True, True,
            sinks=sinks, kernel=kernel, chunk=chunk, block=block,
        )  # fmt: skip
        assert_close(o, out, TOL, f"{kernel} output")
        assert_close(ls, lse, TOL, f"{kernel} lse")
    for kernel in nf.BACKWARD_KERNELS:
        got = nf.flex_attention_backward(
            q, k, v, g, variant.score_mod, bm, None, True, sinks=sinks, kernel=kernel, block=block
        )
        assert len(got) == len(grads)
        for a, w, name in zip(got, grads, ("dq", "dk", "dv", "dsinks")):
            assert_close(a, w, GRAD_TOL, f"{kernel} {name}")


RUNS = [(name, None) for name in CASES] + [(name, SINKS) for name in COMBINED]
MAKERS = {"numpy block mask": nf.create_block_mask, "scratch block mask": scratch.create_block_mask}


@pytest.mark.parametrize("maker", list(MAKERS))
@pytest.mark.parametrize(("name", "sinks"), RUNS, ids=[f"{n}{'+sinks' * bool(s)}" for n, s in RUNS])
def test_every_variant_matches_the_ground_truth(name, sinks, maker):
    """GQA (4 query heads on 2 kv heads), L = 5 != S = 7, two batch entries, tiles of 2."""
    variant = CASES[name](2, 4, 5, 7).variant
    bm = block_mask(variant, 2, 4, 5, 7, 2, MAKERS[maker])
    check_all(variant, (2, 4, 2, 5, 7, 3, 2), seed=1, sinks=sinks, bm=bm)


@pytest.mark.parametrize("maker", list(MAKERS))
def test_a_broadcast_block_mask_asks_the_mask_for_other_heads(maker):
    """A block mask made with B = H = None serves every (b, h); the partial tiles' cells follow
    mask_mod(b, h, ...) for the real b and h, as in the ground truth (here the mask depends on
    h: the tiles come from head 0, the cells from each head)."""

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + 2 - h  # a user's own function: no array form

    B, H, L, S = 2, 3, 6, 6
    bm = MAKERS[maker](mask_mod, None, None, L, S, BLOCK_SIZE=2)
    variant = type("Mine", (), {"mask_mod": staticmethod(mask_mod), "score_mod": None})
    check_all(variant, (B, H, H, L, S, 3, 2), seed=9, sinks=None, bm=bm)


@random_problems
def test_random_problems_match_the_ground_truth(name, z, with_sinks, seed):
    sinks = [0.3 * (h - 1) for h in range(z.H)] if with_sinks else None
    shapes = (z.B, z.H, z.Hkv, z.L, z.S, z.E, z.Ev)
    variant = CASES[name](z.B, z.H, z.L, z.S).variant
    size, chunk, block = 1 + seed % 3, 1 + seed % 4, 1 + seed % 5
    check_all(variant, shapes, seed, sinks, size=size, chunk=chunk, block=block)


def test_window_softcap_gqa_sinks_at_larger_sizes():
    """Window (7, 0) + softcap 5 + GQA + sinks, L = 40, S = 48, tiles 8, chunks 16 x keys 8."""
    variant = combine(SlidingWindow.aligned(7, 0, 40, 48), Softcap(5.0))
    check_all(variant, (1, 4, 2, 40, 48, 4, 3), seed=2, sinks=SINKS, size=8, chunk=16, block=8)


MASKED = [name for name in CASES if CASES[name](1, 1, 2, 2).variant.mask_mod is not None]


@pytest.mark.parametrize("name", MASKED)
def test_block_masks_equal_the_ground_truths(name):
    """numpy_flex.create_block_mask gives scratch.create_block_mask's tiles, full flags too."""
    B, H, L, S = 2, 4, 6, 9
    mask = CASES[name](B, H, L, S).variant.mask_mod
    for size in (1, 2, (2, 3), 4):
        ours = nf.create_block_mask(mask, B, H, L, S, BLOCK_SIZE=size)
        theirs = scratch.create_block_mask(mask, B, H, L, S, BLOCK_SIZE=size)
        assert (ours.shape, ours.block_size, ours.kv_blocks) == (
            theirs.shape, theirs.block_size, theirs.kv_blocks,
        )  # fmt: skip


def test_a_users_plain_functions_are_asked_cell_by_cell():
    """A lambda mask_mod and a score_mod written with scratch.variants.dual (no array forms)."""
    from scratch.variants import dual

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx + h) % 3 != 0 or kv_idx == q_idx

    def score_mod(s, b, h, q_idx, kv_idx):
        return 2.0 * dual.tanh(s / 2.0) - 0.1 * (q_idx - kv_idx) ** 2

    B, H, L, S = 1, 2, 5, 6
    q, k, v, g = arrays(4, B, H, H, L, S, 3, 2)
    bm = nf.create_block_mask(mask_mod, B, H, L, S, BLOCK_SIZE=2)
    assert bm.kv_blocks == scratch.create_block_mask(mask_mod, B, H, L, S, 2).kv_blocks
    variant = type("Mine", (), {"mask_mod": staticmethod(mask_mod), "score_mod": score_mod})
    check_all(variant, (B, H, H, L, S, 3, 2), seed=4, sinks=[0.1, -0.2])


def tiles_listed(bm):
    """(b, h, query block, key block) of every tile the block mask lists."""
    return {
        (b, h, qb, kb)
        for b, per_b in enumerate(bm.kv_blocks)
        for h, per_h in enumerate(per_b)
        for qb, tiles in enumerate(per_h)
        for kb, _ in tiles
    }


def tiles_seen(record, size):
    """(b, h, query block, key block) of every block-mask tile that a computed tile covers."""
    return {
        (b, h, qb, kb)
        for b, h, i0, i1, j0, j1 in record
        for qb in range(i0 // size, (i1 - 1) // size + 1)
        for kb in range(j0 // size, (j1 - 1) // size + 1)
    }


@pytest.mark.parametrize(
    "variant", [SlidingWindow(5, 0), Causal(), combine(Causal(), Softcap(3.0))]
)
def test_the_kernels_visit_exactly_the_listed_tiles(variant):
    """Forward (chunks of one tile) and tiled backward compute the block mask's tiles, no more:
    with a window of 6 keys at L = S = 64 and tiles of 8 that is 15 of 64 tiles."""
    B, H, L, S, size = 1, 2, 64, 64, 8
    q, k, v, g = arrays(5, B, H, H, L, S, 4, 4)
    bm = nf.create_block_mask(variant.mask_mod, B, H, L, S, BLOCK_SIZE=size)
    listed = tiles_listed(bm)
    x = nf.FlexProblem(
        q, k, v, FlexOptions(score_mod=variant.score_mod, block_mask=bm, sinks=SINKS[:H])
    )
    x.plan.record = []
    output, lse = nf.chunked(x, size, size)
    forward = list(x.plan.record)
    assert tiles_seen(forward, size) == listed
    assert sum((i1 - i0) * (j1 - j0) for *_, i0, i1, j0, j1 in forward) <= len(listed) * size**2
    x.plan.record = []
    nf.tiled_backward(x, g, output, lse, size)
    assert tiles_seen(x.plan.record, size) == listed and len(x.plan.record) == len(listed)
    if isinstance(variant, SlidingWindow):
        assert len(listed) == H * 15  # 8 diagonal tiles + 7 below (a window of 6 keys)


def test_the_chunked_kernel_skips_tiles_at_the_bench_shape_ratio():
    """Window (255, 0) at L = S = 2048, tiles 128: the kernel computes a small share of L * S."""
    L, size = 2048, 128
    variant = SlidingWindow(255, 0)
    q, k, v, _ = arrays(6, 1, 1, 1, L, L, 8, 8)
    bm = nf.create_block_mask(variant.mask_mod, 1, 1, L, L, BLOCK_SIZE=size)
    x = nf.FlexProblem(q, k, v, FlexOptions(block_mask=bm))
    x.plan.record = []
    output, lse = nf.chunked(x, nf.FLEX_CHUNK, 256)
    cells = sum((i1 - i0) * (j1 - j0) for *_, i0, i1, j0, j1 in x.plan.record)
    assert cells <= 3 * 256 * L < L * L / 2  # fewer than 3 tiles of 256 per row: window 256
    o, ls = nf.flex_attention(q, k, v, None, bm, kernel="explicit", return_lse=True)
    assert_close(output, o, 1e-12, "output")
    assert_close(lse, ls, 1e-12, "lse")


def plain_float32(case, q, k, v, sinks):
    """softmax(score_mod(q k^T scale), masked, with the sink column) @ v in torch float32."""
    q, k, v = (torch.from_numpy(a).float() for a in (q, k, v))
    B, H, L, E = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(E)
    b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
    i, j = torch.arange(L).view(L, 1), torch.arange(k.shape[2]).view(1, -1)
    if case.score_mod is not None:
        s = case.score_mod(s, b, h, i, j).float()
    if case.mask_mod is not None:
        s = s.masked_fill(~case.mask_mod(b, h, i, j).expand(s.shape), -math.inf)
    if sinks is not None:
        s = torch.cat([s, torch.tensor(sinks).view(1, H, 1, 1).expand(B, H, L, 1)], -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)[..., : k.shape[2]]
    return (p @ v).double().numpy()


@settings(max_examples=20)
@given(name=st.sampled_from(list(CASES)), with_sinks=st.booleans(), seed=st.integers(0, 2**16))
def test_float32_within_flash_attentions_rule(name, with_sinks, seed):
    """float32 kernels: error at most twice a plain float32 computation's (+ 4 ulps)."""
    B, H, Hkv, L, S = 2, 4, 2, 6, 9
    q, k, v, _ = arrays(seed, B, H, Hkv, L, S, 8, 4)
    sinks = SINKS if with_sinks else None
    case = CASES[name](B, H, L, S)
    bm = block_mask(case.variant, B, H, L, S, 2)
    out, _, _ = truth(case.variant, q, k, v, np.zeros((B, H, L, 4)), bm, sinks)
    plain = plain_float32(case, q, k, v, sinks)
    for kernel in nf.KERNELS:
        q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
        o = nf.flex_attention(
            q32, k32, v32, case.variant.score_mod, bm, None, True, sinks=sinks, kernel=kernel,
            chunk=4, block=4,
        )  # fmt: skip
        assert o.dtype == np.float32
        rule = reference_error_rule(o.tolist(), plain.tolist(), out.tolist())
        assert rule.ok, (kernel, rule)


def test_the_numpy_backend_lists_its_flex_functions():
    backend = get("numpy")
    assert backend.flex_attention is nf.flex_attention
    assert backend.flex_attention_backward is nf.flex_attention_backward


def test_bad_arguments_are_named():
    q, k, v, g = arrays(0, 1, 2, 1, 3, 4, 2, 2)
    with pytest.raises(ValueError, match="enable_gqa"):
        nf.flex_attention(q, k, v)
    with pytest.raises(ValueError, match="kernel"):
        nf.flex_attention(q, k, v, enable_gqa=True, kernel="fast")
    with pytest.raises(TypeError, match="block_mask"):
        nf.flex_attention(q, k, v, block_mask=np.ones((3, 4), bool), enable_gqa=True)
    with pytest.raises(ValueError, match="block_mask"):
        bm = nf.create_block_mask(Causal().mask_mod, 1, 2, 4, 4)
        nf.flex_attention(q, k, v, block_mask=bm, enable_gqa=True)
    with pytest.raises(ValueError, match="sinks"):
        nf.flex_attention(q, k, v, enable_gqa=True, sinks=[0.0])
    with pytest.raises(ValueError, match="grad_output"):
        nf.flex_attention_backward(q, k, v, g[..., :1], enable_gqa=True)
    with pytest.raises(ValueError, match="output, lse"):
        nf.flex_attention_backward(q, k, v, g, enable_gqa=True, output=g)

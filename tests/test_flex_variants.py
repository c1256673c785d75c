"""Each variant's convention pinned with numbers, its key ranges and tiles against its own
mask_mod, its words, the dual numbers, and bad arguments refused by name. Standard library only.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch
from scratch.variants import (
    ALiBi,
    BiasTable,
    Causal,
    ChunkedLocal,
    Documents,
    GivenMask,
    GlobalTokens,
    LearnedSinks,
    PrefixLM,
    SinkTokens,
    SlidingWindow,
    Softcap,
    SymmetricALiBi,
    alibi_slopes,
    and_masks,
    combine,
    compose,
    dual,
    or_masks,
)


def seen(variant, L: int, S: int, b: int = 0, h: int = 0) -> list[list[int]]:
    """For each query, the keys its mask_mod lets it see."""
    return [[j for j in range(S) if variant.mask_mod(b, h, i, j)] for i in range(L)]


# ---------------------------------------------------------------- conventions, with numbers


def test_window_counts_keys_beside_the_diagonal_as_flash_attention():
    """window_size=(2, 0): the query and the 2 keys before it, 3 keys in all (not 2)."""
    assert seen(SlidingWindow(2, 0), 5, 5) == [[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert seen(SlidingWindow(1, 1), 4, 4) == [[0, 1], [0, 1, 2], [1, 2, 3], [2, 3]]
    assert seen(SlidingWindow(0, 0), 3, 3) == [[0], [1], [2]]
    assert seen(SlidingWindow(-1, 0), 3, 3) == seen(Causal(), 3, 3)  # -1: unbounded
    assert seen(SlidingWindow(0, -1), 3, 3) == [[0, 1, 2], [1, 2], [2]]
    # bottom-right (FlashAttention's default): 2 queries at positions 3 and 4 of 5 keys
    assert seen(SlidingWindow.aligned(1, 0, 2, 5), 2, 5) == [[2, 3], [3, 4]]
    assert seen(SlidingWindow.aligned(1, 0, 2, 5, "top-left"), 2, 5) == [[0], [0, 1]]


def test_causal_alignments():
    assert seen(Causal.aligned("top-left", 2, 4), 2, 4) == [[0], [0, 1]]
    assert seen(Causal.aligned("bottom-right", 2, 4), 2, 4) == [[0, 1, 2], [0, 1, 2, 3]]
    assert seen(Causal.aligned("bottom-right", 3, 2), 3, 2) == [[], [0], [0, 1]]


def test_chunked_prefix_documents_and_sink_tokens():
    assert seen(ChunkedLocal(2), 5, 5) == [[0, 1], [0, 1], [2, 3], [2, 3], [4]]
    assert seen(combine(ChunkedLocal(2), Causal()), 4, 4) == [[0], [0, 1], [2], [2, 3]]
    assert seen(PrefixLM(2), 4, 4) == [[0, 1], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert seen(PrefixLM((1, 3)), 2, 4, b=1) == [[0, 1, 2], [0, 1, 2]]  # per batch entry
    docs = Documents.from_cu_seqlens([0, 2, 5])
    assert docs.q_ids == ((0, 0, 1, 1, 1),)
    assert seen(docs, 5, 5) == [[0, 1], [0, 1], [2, 3, 4], [2, 3, 4], [2, 3, 4]]
    assert seen(combine(docs, Causal()), 5, 5) == [[0], [0, 1], [2], [2, 3], [2, 3, 4]]
    # StreamingLLM: 1 sink token + the 2 keys before each query
    assert seen(SinkTokens(1, 1), 5, 5) == [[0], [0, 1], [0, 1, 2], [0, 2, 3], [0, 3, 4]]


def test_global_tokens_and_longformer():
    # global positions 0 and 3: their rows see every key, every row sees their columns
    assert seen(GlobalTokens([3, 0]), 5, 5) == [
        [0, 1, 2, 3, 4],
        [0, 3],
        [0, 3],
        [0, 1, 2, 3, 4],
        [0, 3],
    ]
    longformer = or_masks(SlidingWindow(1, 1).mask_mod, GlobalTokens([0]).mask_mod)
    rows = [[j for j in range(6) if longformer(0, 0, i, j)] for i in range(6)]
    assert rows == [
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2],
        [0, 1, 2, 3],
        [0, 2, 3, 4],
        [0, 3, 4, 5],
        [0, 4, 5],
    ]
    shifted = GlobalTokens([4], shift=3)  # query 1 sits at position 4
    assert [j for j in range(6) if shifted.mask_mod(0, 0, 1, j)] == list(range(6))
    assert GlobalTokens([0]).explain(0, 0, 2, 1) == (
        "masked (neither key 1 nor the query's position 2 is a global token)"
    )
    with pytest.raises(ValueError, match="tokens: position 5 is past the S = 5 keys"):
        GlobalTokens([5]).check(1, 1, 5, 5)
    with pytest.raises(ValueError, match="tokens: expected an integer >= 0"):
        GlobalTokens([-1])


def test_alibi_slopes_are_the_papers_for_any_head_count():
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]  # 1/2 ... 1/256, steepest first
    assert alibi_slopes(1) == [2.0**-8]
    assert alibi_slopes(2) == [2.0**-4, 2.0**-8]
    # 6 heads: the 4-head slopes, then every other slope of 8 heads (1/2, 1/8)
    assert alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert alibi_slopes(12)[8:] == [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]


def test_alibi_penalises_past_keys():
    """bias = slope * (kv_idx - q_idx): key 2 seen from query 5 with slope 1/2 gives -1.5."""
    alibi = ALiBi.for_heads(8)
    assert alibi.score_mod(1.0, 0, 0, 5, 2) == 1.0 - 1.5
    assert alibi.score_mod(1.0, 0, 1, 5, 2) == 1.0 - 0.75  # head 1: slope 1/4
    assert alibi.score_words(1.0, 0, 0, 5, 2) == "alibi(1) = 1 + 0.5 * (2 - 5) = -0.5"


def test_symmetric_alibi_penalises_both_sides():
    """-slope * |i + shift - j|: 2 keys away on either side with slope 1/2 costs 1."""
    alibi = SymmetricALiBi.for_heads(8)
    assert [alibi.score_mod(0.0, 0, 0, 3, j) for j in (1, 3, 5)] == [-1.0, 0.0, -1.0]
    assert SymmetricALiBi.for_heads(8, 2).score_mod(0.0, 0, 0, 1, 5) == -1.0  # position 3
    assert alibi.score_words(0.0, 0, 0, 3, 5) == "alibi(0) = 0 - 0.5 * |3 + 0 - 5| = -1"


def test_softcap_and_its_derivative():
    cap = Softcap(30.0)
    assert cap.score_mod(12.4, 0, 0, 3, 1) == 30.0 * math.tanh(12.4 / 30.0)
    t = math.tanh(12.4 / 30.0)
    assert cap.score_grad(12.4, 0, 0, 3, 1) == pytest.approx(1.0 - t * t, rel=1e-15)
    assert cap.score_words(12.4, 0, 0, 3, 1) == "softcap(12.4) = 30 * tanh(12.4 / 30) = 11.74"


def test_a_given_mask_is_a_variant():
    """SDPA's attn_mask: bools select keys, floats are added (-inf also masks), broadcast."""
    mask = GivenMask([[True, False], [True, True]])
    assert mask.shape == (1, 1, 2, 2) and mask.score_mod is None
    assert seen(mask, 2, 2, b=1, h=3) == [[0], [0, 1]]
    added = GivenMask([[[[0.5, -math.inf]]], [[[1.0, 2.0]]]])  # (B=2, 1, 1, 2)
    assert seen(added, 3, 2, b=0) == [[0]] * 3 and seen(added, 1, 2, b=1) == [[0, 1]]
    assert added.score_mod(1.0, 1, 5, 0, 1) == 3.0
    assert added.explain(0, 0, 0, 0, 1.0) == (
        "seen (attn_mask[0][0] = 0.5); 1 + attn_mask[0][0] = 1 + 0.5 = 1.5"
    )
    with pytest.raises(ValueError, match="attn_mask"):
        GivenMask([True, False])
    with pytest.raises(TypeError, match="attn_mask"):
        GivenMask([[1, 0]])


def test_bias_table_clamps_distances():
    table = BiasTable([[-2.0, -1.0, 0.0, 1.0, 2.0]])  # max_distance 2
    assert [table.score_mod(0.0, 0, 0, 3, j) for j in range(7)] == [-2, -2, -1, 0, 1, 2, 2]


def test_learned_sink_is_one_more_term_of_the_denominator():
    """One key of score 0 and a sink of logit 0: weight 1/2, output half the value, lse log 2."""
    out, lse = scratch.flex_attention(
        [[[[0.0]]]], [[[[0.0]]]], [[[[4.0]]]], return_lse=True, sinks=[0.0]
    )
    assert out == [[[[2.0]]]] and lse == [[[math.log(2.0)]]]
    sinks = LearnedSinks([0.0, -1.0])
    assert scratch.flex_attention(
        [[[[0.0]]] * 2], [[[[0.0]]]] * 1, [[[[4.0]]]], enable_gqa=True, sinks=sinks
    )[0][1] == [[4.0 / (1.0 + math.exp(-1.0))]]


# ---------------------------------------------------------------- key ranges and tiles

MASKS = [
    Causal(),
    Causal(3),
    Causal(-2),
    SlidingWindow(2, 1),
    SlidingWindow(0, 0, 2),
    SlidingWindow(-1, 1),
    SlidingWindow(3, -1, -1),
    ChunkedLocal(3),
    ChunkedLocal(2, 1),
    PrefixLM(3),
    PrefixLM((0, 5), 1),
    SinkTokens(2, 1),
    SinkTokens(0, 2, 2),
    SinkTokens(4, 0),
    Documents([[0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4], [0, 1, 1, 1, 1, 1, 2, 2, 5, 5, 5]]),
]


def runs_seen(variant, b: int, q_lo: int, q_hi: int, S: int) -> list[tuple[int, int]]:
    """The keys some query of the block sees, as maximal runs [lo, hi), written out here."""
    keys = {j for i in range(q_lo, q_hi) for j in range(S) if variant.mask_mod(b, 0, i, j)}
    starts = [j for j in sorted(keys) if j - 1 not in keys]
    return [(lo, next(j for j in range(lo, S + 1) if j not in keys)) for lo in starts]


@pytest.mark.parametrize("variant", MASKS, ids=repr)
def test_key_ranges_are_exactly_what_mask_mod_says(variant):
    """Every block of queries (sizes 1-4, L = 8, S = 8 or 11): the runs of keys mask_mod sees."""
    for S in (8, 11):
        for size in (1, 2, 3, 4):
            for q_lo in range(0, 8, size):
                for b in (0, 1):
                    q_hi = min(q_lo + size, 8)
                    want = runs_seen(variant, b, q_lo, q_hi, S)
                    assert variant.key_ranges(b, 0, q_lo, q_hi, S) == want, (S, q_lo, q_hi, b)


side = st.integers(-1, 4)
shift = st.integers(-3, 3)
masks = st.one_of(
    st.builds(Causal, shift),
    st.builds(SlidingWindow, side, side, shift),
    st.builds(ChunkedLocal, st.integers(1, 4), shift),
    st.builds(PrefixLM, st.integers(0, 6), shift),
    st.builds(SinkTokens, st.integers(0, 3), st.integers(0, 3), shift),
)


@given(variant=masks, q_lo=st.integers(0, 7), size=st.integers(1, 4), S=st.integers(1, 9))
def test_hypothesis_key_ranges(variant, q_lo, size, S):
    """Random parameters (shifts either way, -1 sides): the runs of keys mask_mod sees."""
    assert variant.key_ranges(0, 0, q_lo, q_lo + size, S) == runs_seen(
        variant, 0, q_lo, q_lo + size, S
    )


def test_block_mask_broadcasts_b_and_h_of_none():
    """B = H = None: one table of tiles for every batch entry and head, as FlexAttention's."""
    block = scratch.create_block_mask(Causal().mask_mod, None, None, 4, 4, BLOCK_SIZE=2)
    assert block.shape == (1, 1, 4, 4)
    assert block.kv_blocks == [[[[(0, False)], [(0, True), (1, False)]]]]
    rng = random.Random(1)
    q = [[[[rng.gauss(0, 1)] for _ in range(4)] for _ in range(3)] for _ in range(2)]
    every = scratch.create_block_mask(Causal().mask_mod, 2, 3, 4, 4, BLOCK_SIZE=2)
    assert scratch.flex_attention(q, q, q, block_mask=block) == scratch.flex_attention(
        q, q, q, block_mask=every
    )


def test_combined_key_ranges_are_every_key_seen():
    """A combination's ranges come from its own mask_mod: exactly the keys its queries see."""
    both = combine(SlidingWindow(1, 0), Documents([0, 0, 0, 1, 1, 1, 1, 2]), Softcap(2.0))
    for size in (1, 3, 8):
        for q_lo in range(0, 8, size):
            keys = {
                j
                for lo, hi in both.key_ranges(0, 0, q_lo, min(q_lo + size, 8), 8)
                for j in range(lo, hi)
            }
            need = {
                j
                for i in range(q_lo, min(q_lo + size, 8))
                for j in range(8)
                if both.mask_mod(0, 0, i, j)
            }
            assert need == keys


@pytest.mark.parametrize("variant", MASKS[:8], ids=repr)
def test_block_mask_tiles_follow_mask_mod(variant):
    """The tiles create_block_mask keeps are those holding a seen cell; 'full' ones hold only."""
    block = scratch.create_block_mask(variant.mask_mod, 1, 1, 9, 10, BLOCK_SIZE=(2, 3))
    dense = block.to_dense()[0][0]
    for qb, tiles in enumerate(block.kv_blocks[0][0]):
        rows = dense[2 * qb : 2 * qb + 2]
        for kb in range(4):
            cells = [r[j] for r in rows for j in range(3 * kb, min(3 * kb + 3, 10))]
            listed = dict(tiles).get(kb)
            assert (listed is not None) == any(cells) and (listed is None or listed == all(cells))
    for i in range(9):
        assert block.keys(0, 0, i) == [j for j in range(10) if dense[i][j]]


def test_and_or_masks_and_compose():
    a, b = Causal().mask_mod, SlidingWindow(0, -1).mask_mod  # j <= i, j >= i
    assert [and_masks(a, b)(0, 0, 2, j) for j in range(4)] == [False, False, True, False]
    assert all(or_masks(a, b)(0, 0, 2, j) for j in range(4))
    f = compose(lambda s, *_: s * 2, lambda s, *_: s + 1)
    assert f(3.0, 0, 0, 0, 0) == 7.0  # in order: (3 * 2) + 1


# ---------------------------------------------------------------- words


def test_rules_and_hover_words():
    assert Causal().rule() == "causal: key j seen by query i iff j <= i"
    assert Causal(2).explain(0, 0, 1, 4) == "masked (causal: key 4 > 1 + 2)"
    assert SlidingWindow(2, 0).rule() == (
        "window (2, 0): key j seen by query i iff i - 2 <= j <= i"
    )
    assert SlidingWindow(2, 0).explain(0, 0, 4, 1) == "masked (window: key 1 outside [2, 4])"
    words = combine(SlidingWindow(1, 0), Softcap(30.0)).explain(0, 0, 3, 3, 12.4)
    assert words == "seen (window: key 3 in [2, 3]); softcap(12.4) = 30 * tanh(12.4 / 30) = 11.74"
    masked = combine(SlidingWindow(1, 0), Softcap(2.0)).explain(0, 0, 2, 0, 3.0)
    assert masked == "masked (window: key 0 outside [1, 2])"
    assert SinkTokens(1, 2, 3).rule() == (
        "1 sink tokens + window of 2: key j seen by query i iff j <= i + 3 and (j < 1 or "
        "j >= i + 3 - 2)"
    )
    assert Documents([0, 1]).explain(0, 0, 0, 1) == (
        "masked (query in document 0, key in document 1)"
    )


# ---------------------------------------------------------------- dual numbers


def test_dual_numbers_differentiate_a_users_score_mod():
    def score_mod(s, b, h, q_idx, kv_idx):
        return dual.exp(s / 2) * s - dual.sqrt(s * s + 1) + dual.log(2 + s) ** 2

    s = 0.7
    want = math.exp(s / 2) * (1 + s / 2) - s / math.sqrt(s * s + 1) + 2 * math.log(2 + s) / (2 + s)
    assert dual.derivative(score_mod, s, 0, 0, 0, 0) == pytest.approx(want, rel=1e-14)
    assert dual.derivative(lambda s, *_: 3.0, s, 0, 0, 0, 0) == 0.0  # a constant


def test_a_branching_score_mod_gets_the_branchs_derivative():
    """Comparisons read the value: each branch (and max, min) keeps its own derivative."""

    def score_mod(s, b, h, q_idx, kv_idx):
        return s if s < 1 else 1 + (s - 1) * 0.25

    assert dual.derivative(score_mod, 0.5, 0, 0, 0, 0) == 1.0
    assert dual.derivative(score_mod, 3.0, 0, 0, 0, 0) == 0.25
    assert dual.derivative(lambda s, *_: max(s, 2.0), 3.0, 0, 0, 0, 0) == 1.0
    assert dual.derivative(lambda s, *_: max(s, 2.0), 1.0, 0, 0, 0, 0) == 0.0


def test_math_module_functions_refuse_a_dual_loudly():
    with pytest.raises(TypeError, match="dual"):
        dual.derivative(lambda s, *_: math.tanh(s), 0.5, 0, 0, 0, 0)


# ---------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: SlidingWindow(-2, 0), "left"),
        (lambda: SlidingWindow(1, 1.5), "right"),
        (lambda: Softcap(0.0), "cap"),
        (lambda: Softcap(-1.0), "cap"),
        (lambda: ChunkedLocal(0), "chunk"),
        (lambda: ALiBi(()), "slopes"),
        (lambda: Documents.from_cu_seqlens([0, 3, 2]), "cu_seqlens_q"),
        (lambda: Documents.from_cu_seqlens([1, 3]), "cu_seqlens_q"),
        (lambda: BiasTable([1.0, 2.0]), "table"),
        (lambda: LearnedSinks([math.inf]), "sinks"),
        (lambda: SinkTokens(-1, 2), "sinks"),
        (lambda: Causal.aligned("middle", 2, 2), "align"),
    ],
)
def test_bad_variant_parameters_name_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


def test_bad_flex_arguments_name_the_argument():
    rng = random.Random(0)
    q = [[[[rng.random() for _ in range(2)] for _ in range(3)] for _ in range(2)]]  # (1, 2, 3, 2)
    k = [q[0][:1]]  # (1, 1, 3, 2)
    with pytest.raises(ValueError, match="enable_gqa"):
        scratch.flex_attention(q, k, k)
    with pytest.raises(ValueError, match="sinks"):
        scratch.flex_attention(q, q, q, sinks=[0.0])
    with pytest.raises(ValueError, match="block_mask"):
        scratch.flex_attention(
            q, q, q, block_mask=scratch.create_block_mask(Causal().mask_mod, 1, 1, 4, 3)
        )
    with pytest.raises(ValueError, match="query"):
        scratch.flex_attention(q[0], q[0], q[0])
    with pytest.raises(ValueError, match="grad_output"):
        scratch.flex_attention_backward(q, q, q, q[0])
    with pytest.raises(TypeError, match="score_mod"):
        scratch.flex_attention(q, q, q, score_mod=3)
    with pytest.raises(TypeError, match=r"score_mod: expected a number .* found NoneType"):
        scratch.flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: None)

"""decode_attention: the last L of S positions, variants at true positions (q_idx = S - L + i).

The convention pinned with numbers, the same answers as the variants' own bottom-right shift,
bad input refused by name, and planted mistakes (no offset, top-left) seen to fail.
Standard library only.
"""

from __future__ import annotations

import math

import pytest
from decode_cases import problem, rows

import scratch
import scratch.decode.attention
from scratch.variants import (
    ALiBi,
    Causal,
    ChunkedLocal,
    Documents,
    SinkTokens,
    SlidingWindow,
    Softcap,
    SymmetricALiBi,
    combine,
)

# 2 queries at the last positions (3 and 4) of 5 keys; every score 0, value j at key j, so
# the output is the mean position of the keys seen and lse = log(number of keys seen)
Q0 = [[[[0.0], [0.0]]]]  # (B, H, L, E) = (1, 1, 2, 1)
K5 = [[[[1.0] for _ in range(5)]]]  # (1, 1, 5, 1)
V5 = [[[[float(j)] for j in range(5)]]]  # (1, 1, 5, 1)


def decode_numbers(variant) -> tuple[list[float], list[float]]:
    """Output and lse of the two queries of Q0 against K5, V5."""
    out, lse = scratch.decode_attention(
        Q0, K5, V5, variant.score_mod, variant.mask_mod, return_lse=True
    )
    return [r[0] for r in out[0][0]], lse[0][0]


def test_queries_sit_at_the_last_positions_with_numbers():
    """Query 0 is at position 3, query 1 at position 4: causal sees 4 and 5 keys."""
    out, lse = decode_numbers(Causal())
    assert out == [1.5, 2.0]  # mean of 0..3, of 0..4
    assert lse == [math.log(4), math.log(5)]
    # window (1, 0) at true positions: keys 2, 3 and keys 3, 4
    out, lse = decode_numbers(SlidingWindow(1, 0))
    assert out == [2.5, 3.5] and lse == [math.log(2), math.log(2)]
    # sink token 0 plus a window of 1: keys 0, 2, 3 and keys 0, 3, 4
    out, _ = decode_numbers(SinkTokens(1, 1))
    assert out == pytest.approx([5 / 3, 7 / 3], abs=1e-15)


def test_alibi_distance_is_the_true_distance():
    """ALiBi at position 4 with slope ln 2: weights 2^(j - 4), lse = log(31 / 16).

    Row indices instead (q_idx = 0) add slope * j: the same softmax (a constant per row) but
    lse = log 31, so only the lse tells the offset was forgotten; the tests compare both.
    """
    q, k, v = [[[[0.0]]]], [[[[1.0]] * 5]], V5
    alibi = ALiBi((math.log(2.0),))
    out, lse = scratch.decode_attention(q, k, v, alibi.score_mod, return_lse=True)
    assert out[0][0][0][0] == pytest.approx(98 / 31, abs=1e-14)
    assert lse[0][0][0] == pytest.approx(math.log(31 / 16), abs=1e-14)


def test_planted_top_left_alignment_gives_other_numbers(monkeypatch):
    """Plant: the queries taken as positions 0 and 1 (top-left); the numbers above change."""
    monkeypatch.setattr(scratch.decode.attention, "query_offset", lambda L, S: 0)
    assert decode_numbers(Causal())[0] == [0.0, 0.5]
    assert decode_numbers(SlidingWindow(1, 0))[0] == [0.0, 0.5]


@pytest.mark.parametrize("seed", range(12))
def test_true_positions_equal_the_variants_bottom_right_shift(seed):
    """decode of a shift-0 variant == flex_attention of the same variant shifted by S - L."""
    B, H, S, L = 2, 4, 7, 1 + seed % 4
    q, k, v = problem(seed, B, H, 4, S)
    q = rows(q, S - L, S)
    slopes = tuple(ALiBi.for_heads(H).slopes)
    pairs = [
        (Causal(), Causal.aligned("bottom-right", L, S)),
        (SlidingWindow(2, 1), SlidingWindow.aligned(2, 1, L, S)),
        (SinkTokens(1, 2), SinkTokens(1, 2, S - L)),
        (ChunkedLocal(3), ChunkedLocal(3, S - L)),
        (SymmetricALiBi(slopes), SymmetricALiBi(slopes, S - L)),
    ]
    for at_true, shifted in pairs:
        decoded = scratch.decode_attention(q, k, v, **_mods(at_true), return_lse=True)
        block = None
        if shifted.mask_mod is not None:
            block = scratch.create_block_mask(shifted.mask_mod, B, H, L, S)
        flex = scratch.flex_attention(q, k, v, shifted.score_mod, block, return_lse=True)
        assert decoded == flex, f"{at_true!r} differs from {shifted!r} (seed {seed})"


def _mods(variant) -> dict:
    return {"score_mod": variant.score_mod, "mask_mod": variant.mask_mod}


def test_planted_no_offset_differs_from_bottom_right(monkeypatch):
    """Plant: query_offset 0; decode no longer equals the bottom-right call (the check fails)."""
    q, k, v = problem(3, 1, 2, 2, 6)
    q = rows(q, 4, 6)
    expected = scratch.flex_attention(
        q, k, v, block_mask=scratch.create_block_mask(Causal(4).mask_mod, 1, 2, 2, 6)
    )
    assert scratch.decode_attention(q, k, v, mask_mod=Causal().mask_mod) == expected
    monkeypatch.setattr(scratch.decode.attention, "query_offset", lambda L, S: 0)
    assert scratch.decode_attention(q, k, v, mask_mod=Causal().mask_mod) != expected


def test_decode_of_one_query_without_mask_sees_every_key():
    """L = 1 and mask_mod None: the last position sees all S keys (causal at L = 1)."""
    q, k, v = problem(5, 1, 2, 2, 6)
    q = rows(q, 5, 6)
    causal = scratch.decode_attention(q, k, v, mask_mod=Causal().mask_mod, return_lse=True)
    assert scratch.decode_attention(q, k, v, return_lse=True) == causal


# ---------------------------------------------------------------- bad input, named


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"mask_mod": Causal.aligned("bottom-right", 2, 6).mask_mod}, ValueError, "mask_mod"),
        (
            {"score_mod": combine(SlidingWindow(1, 0, 4), Softcap(1.0)).score_mod},
            ValueError,
            "score_mod",
        ),
        ({"score_mod": 3}, TypeError, "score_mod"),
        ({"mask_mod": "causal"}, TypeError, "mask_mod"),
        ({"mask_mod": Documents([[0, 0, 1, 1]]).mask_mod}, ValueError, "q_ids"),
        ({"return_lse": "yes"}, TypeError, "return_lse"),
        ({"sinks": [0.0]}, ValueError, "sinks"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, words):
    q, k, v = problem(0, 1, 2, 2, 6)
    with pytest.raises(error, match=words):
        scratch.decode_attention(rows(q, 4, 6), k, v, **kwargs)


def test_shifted_variant_message_says_the_convention():
    q, k, v = problem(0, 1, 2, 2, 6)
    with pytest.raises(ValueError, match="true positions.*shift 0, found shift 4"):
        scratch.decode_attention(rows(q, 4, 6), k, v, mask_mod=Causal(4).mask_mod)


def test_more_queries_than_keys_and_bad_shapes_are_refused():
    q, k, v = problem(0, 1, 2, 2, 3)
    with pytest.raises(ValueError, match="query: 3 queries cannot be the last positions of 2"):
        scratch.decode_attention(q, rows(k, 0, 2), rows(v, 0, 2))
    with pytest.raises(ValueError, match="key: 3 kv heads for 2 query heads"):
        scratch.decode_attention(q, [[k[0][0]] * 3], [[v[0][0]] * 3], enable_gqa=True)
    with pytest.raises(ValueError, match="query: expected 4 dims"):
        scratch.decode_attention(q[0], k, v)


def test_the_decode_calls_state_their_keywords_once_and_keep_their_order():
    """decode, split-KV and the paged cache: each call's arrays, then one list of keywords
    (scratch.decode.attention.decode_options), positional as before; a misspelled one names the
    call."""
    import inspect

    keywords = ["score_mod", "mask_mod", "scale", "enable_gqa", "return_lse", "sinks"]
    calls = {
        scratch.decode_attention: ["query", "key", "value"],
        scratch.split_kv_attention: ["query", "key", "value", "num_splits"],
        scratch.paged_decode_attention: ["query", "key_cache", "value_cache", "block_table",
                                         "seq_lens"],
    }  # fmt: skip
    for call, arrays in calls.items():
        params = inspect.signature(call).parameters
        assert list(params) == arrays + keywords, call.__name__
        assert params["sinks"].kind is inspect.Parameter.KEYWORD_ONLY, call.__name__
        with pytest.raises(
            TypeError, match=rf"^{call.__name__}\(\) got an unexpected keyword argument 'mask_md'"
        ):
            call(*[None] * len(arrays), mask_md=None)
    by_position = scratch.decode_attention(Q0, K5, V5, None, Causal().mask_mod, None, False, True)
    assert by_position == decode_numbers_raw(Causal()) and len(by_position) == 2


def decode_numbers_raw(variant) -> tuple[list, list]:
    """(output, lse) of Q0 against K5, V5 with the mods named."""
    return scratch.decode_attention(Q0, K5, V5, mask_mod=variant.mask_mod, return_lse=True)

"""A variant's data is checked against the call's sizes: a ValueError naming the field."""

from __future__ import annotations

import pytest

from scratch import create_block_mask, flex_attention, flex_attention_backward
from scratch.variants import (
    ALiBi,
    BiasTable,
    Causal,
    Documents,
    GivenMask,
    PrefixLM,
    SlidingWindow,
    SymmetricALiBi,
    combine,
)


def qkv(B: int, H: int, L: int = 3) -> list:
    """(B, H, L, 1) with rows 1.0, 2.0, ..."""
    return [[[[float(i + 1)] for i in range(L)] for _ in range(H)] for _ in range(B)]


def run_all(variant, B: int, H: int) -> None:
    """The forward, the backward and create_block_mask on (B, H, 3, 3) with this variant."""
    q = qkv(B, H)
    if variant.mask_mod is not None:
        create_block_mask(variant.mask_mod, B, H, 3, 3)
    mods = {"score_mod": variant.score_mod} if variant.score_mod is not None else {}
    if variant.mask_mod is not None:
        mods["block_mask"] = create_block_mask(variant.mask_mod, B, H, 3, 3)
    flex_attention(q, q, q, **mods)
    flex_attention_backward(q, q, q, q, **mods)


WRONG = [
    (lambda: Documents.from_cu_seqlens([0, 1, 2], [0, 1, 2]), 1, 1, "q_ids"),
    (lambda: Documents.from_cu_seqlens([0, 2, 5]), 1, 1, "cu_seqlens must end at Q_LEN"),
    (lambda: Documents([0, 0, 1], [0, 0]), 1, 1, "kv_ids"),
    (lambda: Documents([0, 0], [0, 0, 1]), 1, 1, "q_ids"),
    (lambda: Documents([[0, 0, 1]] * 3), 2, 1, "q_ids"),
    (lambda: ALiBi([0.5]), 1, 2, "slopes"),
    (lambda: ALiBi([0.5, 0.25, 0.125]), 1, 2, "slopes"),
    (lambda: SymmetricALiBi([0.5]), 1, 2, "slopes"),
    (lambda: BiasTable([[1, 2, 3]] * 2), 1, 3, "table"),
    (lambda: BiasTable([[1, 2, 3]] * 3), 1, 2, "table"),
    (lambda: PrefixLM([1]), 2, 1, "prefix"),
    (lambda: PrefixLM([1, 1, 1]), 2, 1, "prefix"),
    (lambda: GivenMask([[True, False]]), 1, 1, "or one that broadcasts"),
    (lambda: GivenMask([[[[0.0] * 3] * 3]] * 2), 1, 1, "or one that broadcasts"),
    (lambda: combine(Causal(), ALiBi([0.5])), 1, 2, "slopes"),
]


@pytest.mark.parametrize("make, B, H, words", WRONG)
def test_sizes_the_variant_does_not_fit_are_refused_by_every_front_door(make, B, H, words):
    variant = make()
    q = qkv(B, H)
    calls = []
    if variant.mask_mod is not None:
        calls.append(lambda: create_block_mask(variant.mask_mod, B, H, 3, 3))
        calls.append(lambda: create_block_mask(combine(variant).mask_mod, B, H, 3, 3))
    if variant.score_mod is not None:
        calls.append(lambda: flex_attention(q, q, q, score_mod=variant.score_mod))
        calls.append(lambda: flex_attention_backward(q, q, q, q, score_mod=variant.score_mod))
    for call in calls:
        with pytest.raises(ValueError, match=words):
            call()


def test_a_block_mask_made_with_b_none_is_checked_at_the_call():
    mask = create_block_mask(PrefixLM([1]).mask_mod, None, 1, 3, 3)  # B unknown: fine here
    q = qkv(2, 1)
    with pytest.raises(ValueError, match="prefix: expected one length per batch entry"):
        flex_attention(q, q, q, block_mask=mask)


RIGHT = [
    (lambda: Documents.from_cu_seqlens([0, 1, 3]), 2, 1),
    (lambda: Documents([[0, 0, 1], [0, 1, 1]]), 2, 2),
    (lambda: ALiBi([0.5, 0.25]), 2, 2),
    (lambda: BiasTable([[1, 2, 3]]), 1, 3),
    (lambda: BiasTable([[1, 2, 3]] * 2), 1, 2),
    (lambda: PrefixLM([1, 2]), 2, 1),
    (lambda: PrefixLM(1), 2, 2),
    (lambda: GivenMask([[True, False, True]]), 2, 2),
    (lambda: combine(Causal(), ALiBi([0.5, 0.25])), 1, 2),
]


@pytest.mark.parametrize("make, B, H", RIGHT)
def test_sizes_that_fit_are_accepted(make, B, H):
    run_all(make(), B, H)


@pytest.mark.parametrize("bad", [[[[1.0]]], [[[[[1.0], [2.0], [3.0]]]]]])
def test_flex_front_doors_ask_for_exactly_4_dims(bad):
    q = qkv(1, 1)
    calls = [
        lambda: flex_attention(bad, q, q),
        lambda: flex_attention(q, q, bad),
        lambda: flex_attention_backward(bad, q, q, q),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"expected 4 dims \(B, H, seq, dim\), found shape"):
            call()
    with pytest.raises(ValueError, match="grad_output: expected the output's shape"):
        flex_attention_backward(q, q, q, bad)


def test_an_unbounded_window_says_every_key_is_seen():
    assert SlidingWindow(-1, -1).rule() == "window (-1, -1): every key j seen by every query i"
    assert SlidingWindow(-1, 0).rule() == "window (-1, 0): key j seen by query i iff j <= i"
    assert SlidingWindow(1, -1).rule() == "window (1, -1): key j seen by query i iff i - 1 <= j"


@pytest.mark.parametrize("bad, found", [(3, "int"), (None, "NoneType")])
def test_create_block_mask_asks_for_a_function_only(bad, found):
    with pytest.raises(TypeError) as error:
        create_block_mask(bad, 1, 1, 3, 3)
    assert str(error.value) == (
        f"mask_mod: expected a function (b, h, q_idx, kv_idx) -> bool, found {found}"
    )

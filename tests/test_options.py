"""Options: one frozen value for what a call threads inward, each field checked once."""

import dataclasses
import math
import random

import pytest

from scratch.core.options import Options
from scratch.variants import GivenMask


def test_defaults_and_kinds():
    assert Options().mask_kind == "none"
    assert Options(is_causal=True).mask_kind == "causal"
    assert Options(attn_mask=[[True]]).mask_kind == "given"
    assert Options().scale_for(16) == 0.25
    assert Options(scale=-2).scale_for(16) == -2.0
    assert Options(scale=0.5, dropout_p=0.25, masked_rows="nan").describe() == (
        "mask=none, scale=0.5, dropout_p=0.25, masked_rows=nan"
    )


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
        Options().is_causal = True


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"is_causal": 1}, TypeError, "is_causal: expected True or False"),
        ({"enable_gqa": "yes"}, TypeError, "enable_gqa: expected True or False"),
        ({"masked_rows": "skip"}, ValueError, "masked_rows: expected one of"),
        ({"dropout_p": 1.0}, ValueError, r"dropout_p: expected a number in \[0, 1\)"),
        ({"scale": float("nan")}, ValueError, "scale: expected a finite number"),
        ({"scale": "1"}, TypeError, "scale: expected a finite number or None"),
        ({"rng": 3}, TypeError, "rng: expected a random.Random"),
        ({"is_causal": True, "attn_mask": [[True]]}, ValueError, "is_causal: cannot be combined"),
    ],
)
def test_bad_fields_are_named(fields, error, match):
    with pytest.raises(error, match=match):
        Options(**fields)


def test_rng_accepted():
    assert Options(dropout_p=0.5, rng=random.Random(0)).dropout_p == 0.5


def test_the_variant_the_call_computes():
    """is_causal and attn_mask become variants at the front door; `variant` joins them."""
    from scratch.variants import Causal, Combined, GivenMask, SlidingWindow

    assert Options().attention_variant is None
    assert Options(is_causal=True).attention_variant == Causal(0)  # top-left, as PyTorch
    given = Options(attn_mask=[[True, False], [False, True]]).attention_variant
    assert isinstance(given, GivenMask) and given.is_bool and given.score_mod is None
    assert [given.mask_mod(0, 0, 1, j) for j in range(2)] == [False, True]
    added = Options(attn_mask=[[0.5, -math.inf]]).attention_variant
    assert added.score_mod(1.0, 0, 0, 0, 0) == 1.5 and not added.mask_mod(0, 0, 0, 1)
    window = SlidingWindow(1, 0)
    assert Options(variant=window).attention_variant is window
    both = Options(is_causal=True, variant=window).attention_variant
    assert isinstance(both, Combined) and both.parts == (Causal(0), window)
    masked = Options(attn_mask=[[True, True, False]] * 3, variant=window).attention_variant
    seen = [[masked.mask_mod(0, 0, i, j) for j in range(3)] for i in range(3)]
    assert seen == [[True, False, False], [True, True, False], [False, True, False]]
    assert Options(variant=window).describe() == f"mask=none, variant={window.rule()}"


def test_a_given_mask_is_read_only_when_its_cells_are():
    """A backend reads attn_mask as its own array: the variant converts nothing until asked."""
    found = Options(attn_mask="not a mask").attention_variant  # nothing read yet
    assert found.attn_mask == "not a mask"
    with pytest.raises(TypeError, match="attn_mask: expected a matrix"):
        found.mask_mod(0, 0, 0, 0)
    with pytest.raises(TypeError, match="attn_mask: expected a matrix"):
        GivenMask("not a mask")  # made directly, it is checked at once


def test_a_variant_must_be_one():
    with pytest.raises(TypeError, match="variant: expected a scratch.variants object or None"):
        Options(variant=lambda b, h, q_idx, kv_idx: True)

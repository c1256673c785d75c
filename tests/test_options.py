"""Options: one frozen value for what a call threads inward, each field checked once."""

import dataclasses
import random

import pytest

from scratch.options import Options


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

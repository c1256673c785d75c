"""From a session to the core: the example and the one Options the window asks for. The mask is
one choice (the variant's: none, causal either alignment, every variant mask, a drawn grid) and
reaches the backends as one variant, the very mask the window draws."""

from __future__ import annotations

import dataclasses
import random

import pytest

import scratch
from gui.state import controller, variant_session
from gui.state import session as sm
from gui.state.input_modes import with_mode
from scratch.variants import VariantChoice
from scratch.variants.choice import MASKS
from tests.journey_sessions import journey_typed, with_mask

CHOICES = [  # every mask of the one control, with the fields it reads
    dict(mask="none"),
    dict(mask="causal", align="top-left"),
    dict(mask="causal", align="bottom-right"),
    dict(mask="window", left=1, right=1),
    dict(mask="chunked", chunk=2),
    dict(mask="prefix", prefix=2),
    dict(mask="documents"),  # cu_seqlens from the session's length
    dict(mask="sink_tokens", sink_tokens=1, left=1),
    dict(mask="dilated", width=2, dilation=2),
    dict(mask="drawn"),  # a seeded grid
]


def test_every_mask_of_the_variant_module_is_a_choice_here():
    """A mask added to scratch's MASKS and left out of this list would go untested."""
    assert {c["mask"] for c in CHOICES} == set(MASKS)


def chosen(s: sm.Session, fields: dict, seed: int) -> sm.Session:
    """`s` with the mask `fields` names (documents: two documents; drawn: a seeded grid)."""
    rng = random.Random(seed)
    fields = dict(fields)
    if fields["mask"] == "documents":
        cut = rng.randint(1, s.num_tokens - 1)
        fields["cu_seqlens"] = (0, cut, s.num_tokens)
    if fields["mask"] == "drawn":
        fields["drawn"] = tuple(
            tuple(rng.random() < 0.6 for _ in range(s.num_keys)) for _ in range(s.num_tokens)
        )
    return dataclasses.replace(s, variant=VariantChoice(**fields))


def test_example_and_options_map_the_session():
    s = dataclasses.replace(
        with_mask(journey_typed(), "causal-bottom-right"),
        scale_mode="custom",
        scale_value=0.5,
        masked_rows="nan",
    )
    example, options = controller.example_and_options(s)
    assert options.scale == 0.5 and options.masked_rows == "nan" and "w_q" not in example.params
    assert example.x == [list(r) for r in s.query] and example.tokens == list(s.tokens)
    # one mask, one way in: the variant; SDPA's attn_mask and is_causal stay unset
    assert options.attn_mask is None and not options.is_causal and options.dropout_p == 0.0
    assert options.variant == scratch.variants.Causal(0)  # L = S: bottom-right's diagonal is 0
    _, sqrt = controller.example_and_options(dataclasses.replace(s, scale_mode="sqrt"))
    _, none = controller.example_and_options(dataclasses.replace(s, scale_mode="none"))
    assert (sqrt.scale, none.scale) == (None, 1.0)
    _, plain = controller.example_and_options(with_mask(s, "none"))
    assert plain.variant is None and plain.attn_mask is None and not plain.is_causal
    projected = sm.random_session(1, 3, 4, 2, 3, 2, 1)
    example, _ = controller.example_and_options(projected)
    assert list(example.params) == ["w_q", "w_k", "w_v"] and example.key is None
    assert (example.num_heads, example.num_kv_heads) == (2, 1)


@pytest.mark.parametrize(
    "fields", CHOICES, ids=[f"{c['mask']}-{c.get('align', '')}" for c in CHOICES]
)
@pytest.mark.parametrize("seed", range(6))
def test_the_mask_a_backend_gets_is_the_mask_the_window_draws(fields, seed):
    """Composed once: the cells of the options' variant (what every backend and the ground truth
    compute) equal the window's picture of the mask, at every size (cross-attention too), and
    at a decode step they are the picture's row of the newest token."""
    L = 3 + seed % 4
    s = sm.random_session(seed, num_tokens=L)
    if seed % 2 and fields["mask"] != "documents":  # cross-attention: S keys of their own
        # (documents need one sequence: cu_seqlens cut the queries' and the keys' positions)
        s = sm.resized(with_mode(s, "qkv"), num_keys=L + 2)
    s = chosen(s, fields, seed)
    shown = variant_session.shown_mask(s)
    _, options = controller.example_and_options(s)
    assert options.attn_mask is None and not options.is_causal
    found = options.attention_variant
    cells = tuple(
        tuple(
            True if found is None else bool(found.mask_mod(0, 0, i, j)) for j in range(s.num_keys)
        )
        for i in range(s.num_tokens)
    )
    assert cells == shown
    if s.key is None and fields in (dict(mask="drawn"), dict(mask="causal", align="bottom-right")):
        for n in range(1, L + 1):  # decode step n: token n - 1 against the n cached tokens
            _, step = controller.example_and_options(variant_session.with_decode(s, n))
            row = tuple(bool(step.variant.mask_mod(0, 0, 0, j)) for j in range(n))
            assert row == shown[n - 1][:n], n


def test_the_mask_option_names_of_old_are_refused_when_unknown():
    with pytest.raises(sm.SessionError, match="mask: expected one of none, causal-top-left"):
        variant_session.with_mask_mode(VariantChoice(), "custom")

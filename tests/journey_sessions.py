"""Seed 003's six words as window sessions, for the window's tests."""

from __future__ import annotations

import dataclasses

from gui.state import session as sm
from gui.state import variant_session
from scratch.learn import presets


def journey_typed() -> sm.Session:
    """Seed 003's six words (typed here from the notebook, not taken from the presets)."""
    x = (
        (0.43, 0.15, 0.89),
        (0.55, 0.87, 0.66),
        (0.57, 0.85, 0.64),
        (0.22, 0.58, 0.33),
        (0.77, 0.25, 0.10),
        (0.05, 0.80, 0.55),
    )
    tokens = ("Your", "journey", "starts", "with", "one", "step")
    return sm.Session(tokens=tokens, key_tokens=tokens, query=x, scale_mode="none")


def journey_preset(**changes) -> sm.Session:
    """The journey preset as a session, with `changes` applied."""
    return dataclasses.replace(sm.from_preset(presets.get("journey")), **changes)


def with_mask(s: sm.Session, mask_mode: str, grid=None) -> sm.Session:
    """`s` with the one mask an old mask_mode name means: 'none', 'causal-top-left',
    'causal-bottom-right' (variant_session.with_mask_mode), or 'custom': the drawn `grid`
    (True = may attend)."""
    if mask_mode == "custom":
        drawn = tuple(map(tuple, grid))
        return dataclasses.replace(
            s, variant=dataclasses.replace(s.variant, mask="drawn", drawn=drawn)
        )
    return dataclasses.replace(s, variant=variant_session.with_mask_mode(s.variant, mask_mode))

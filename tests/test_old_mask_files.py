"""Session files of version 2 (two masks: Options' mask_mode with its clicked grid, and the
variant's mask) load as the one mask choice and compute what they computed before."""

from __future__ import annotations

import json
import random

import pytest

import scratch
from gui.state import controller, session_file
from gui.state import session as sm
from gui.state.input_modes import with_mode
from scratch.variants import VariantChoice

MASK_MODES = ("none", "causal-top-left", "causal-bottom-right", "custom")
VARIANTS = {  # the variant part of an old file (its mask and/or an ALiBi aligned its own way)
    "none": {},
    "window": {"mask": "window", "left": 1, "right": 0},
    "alibi": {"alibi": True},
    "chunked-alibi": {"mask": "chunked", "chunk": 2, "alibi": True, "align": "top-left"},
}


def old_file(seed: int, mask_mode: str, variant: dict, cross: bool) -> tuple[dict, tuple]:
    """A session dict as version 2 wrote it (mask_mode, mask, a variant without 'drawn'), and
    its clicked grid."""
    rng = random.Random(seed)
    s = sm.random_session(seed, num_tokens=rng.randint(2, 6))
    if cross:  # S = L + 2 keys of their own
        s = sm.resized(with_mode(s, "qkv"), num_keys=s.num_tokens + 2)
    L, S = s.num_tokens, s.num_keys
    grid = [[rng.random() < 0.6 for _ in range(S)] for _ in range(L)]
    data = s.to_dict()
    data["variant"] = {k: v for k, v in data["variant"].items() if k != "drawn"} | variant
    clicked = mask_mode == "custom" or rng.random() < 0.5  # clicked once, then another mode
    data.update(version=2, mask_mode=mask_mode, mask=grid if clicked else None)
    return data, grid


def old_options(data: dict) -> scratch.Options:
    """What version 2's window computed: its mask option as SDPA's attn_mask or is_causal, and
    the variant beside it (the old controller's translation, kept here as the expectation)."""
    L, S = len(data["query"]), len(data["key"] or data["query"])
    mode, mask = data["mask_mode"], data["mask"]
    attn_mask = None
    if mode == "causal-bottom-right":
        attn_mask = [[j <= i + S - L for j in range(S)] for i in range(L)]
    elif mode == "custom" and mask is not None:
        attn_mask = mask
    choice = VariantChoice.from_dict(data["variant"])
    return scratch.Options(
        attn_mask,
        mode == "causal-top-left",
        variant=choice.variant(L, S, data["num_heads"], length=L),
        scale={"sqrt": None, "none": 1.0, "custom": data["scale_value"]}[data["scale_mode"]],
        masked_rows=data["masked_rows"],
    )


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mask_mode", MASK_MODES)
@pytest.mark.parametrize("seed", range(3))
def test_an_old_file_loads_as_one_mask_and_computes_what_it_did(tmp_path, seed, mask_mode,
                                                               variant, cross):  # fmt: skip
    data, grid = old_file(seed, mask_mode, VARIANTS[variant], cross)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    s = session_file.load(path)
    assert not hasattr(s, "mask_mode") and json.loads(session_file.dumps(s))["version"] == 3
    # the one choice: the old file's own mask when it had one, a drawn grid when it had two
    two = mask_mode != "none" and (mask_mode != "custom" or data["mask"] is not None)
    two = two and VARIANTS[variant].get("mask", "none") != "none"
    if mask_mode == "none":
        assert s.variant.mask == VARIANTS[variant].get("mask", "none")
    elif two:
        assert s.variant.mask == "drawn"
    if data["mask"] is not None and not two:  # the clicked grid stays, to be chosen again
        assert s.variant.drawn == tuple(map(tuple, grid))
    # the same numbers: the new window's call against the old window's
    example, options = controller.example_and_options(s)
    new = scratch.trace_example(example, options)
    old = scratch.trace_example(example, old_options(data))
    for step in ("masked", "weights", "output"):
        assert new[step].value == old[step].value, step
    assert session_file.load(path) == session_file.loads(session_file.dumps(s))


def test_a_bad_mask_mode_in_an_old_file_is_named():
    data, _ = old_file(1, "custom", {}, False)
    data["mask_mode"] = "diagonal"
    with pytest.raises(sm.SessionError, match="session field 'mask_mode': expected one of"):
        session_file.validate(data)
    data.update(mask_mode="custom", mask=[[True]])
    with pytest.raises(sm.SessionError, match="'mask'"):
        session_file.validate(data)

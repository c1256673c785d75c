"""Shrinking a size and growing it back restores what it cut off (issue 33): the rows and columns
of every table, the token labels and the mask cells, exactly; zeros and t<i> only where no cell
ever was. And the undo history: exact states back, oldest dropped first."""

from __future__ import annotations

import dataclasses
import random

import pytest

from gui.state import cut_off
from gui.state import session as sm
from gui.state.edit_history import History
from gui.state.input_modes import with_mode
from tests.journey_sessions import with_mask

SEEDS = range(30)
SIZES = ("num_tokens", "num_keys", "d_model", "d_k", "d_v", "num_heads", "num_kv_heads")


def custom_session(seed: int) -> sm.Session:
    """A seeded example edited by hand (so a new size keeps its values): self, project or qkv,
    with a key input of its own or not, labelled tokens and a clicked mask."""
    rng = random.Random(seed)
    heads = rng.choice((1, 2))
    s = sm.random_session(seed, rng.randint(2, 6), 2 * rng.randint(1, 3), 2, 2, heads)
    mode = rng.choice(sm.MODES)
    s = with_mode(dataclasses.replace(s, preset="custom"), mode)
    if mode != "self" and rng.random() < 0.5:  # cross-attention: S keys of their own
        key = sm.random_matrix(rng, s.num_tokens + 1, len(s.key[0]) if s.key else s.d_model)
        if mode == "qkv":
            s = dataclasses.replace(s, key=key, value=sm.random_matrix(rng, len(key), s.d_v))
        else:
            s = dataclasses.replace(s, key=key, value=key)
        s = dataclasses.replace(s, key_tokens=sm.default_tokens(len(key), "k"))
    tokens = tuple(f"w{seed}_{i}" for i in range(s.num_tokens))
    keys = tokens if s.key is None else s.key_tokens  # no key input: the keys are the tokens
    s = dataclasses.replace(s, tokens=tokens, key_tokens=keys)
    mask = tuple(tuple(rng.random() < 0.7 for _ in range(s.num_keys)) for _ in range(s.num_tokens))
    return with_mask(s, "custom", mask)


def kept_fields(s: sm.Session) -> tuple:
    """Everything a resize may cut off."""
    return (s.tokens, s.key_tokens, s.variant.drawn) + tuple(map(s.matrix, sm.MATRICES))


def resize(s: sm.Session, kept: cut_off.CutOff | None, **sizes: int):
    """One size edit as the inputs panel makes it: (new session, what it remembers)."""
    kept = cut_off.remembered(s, kept)
    return cut_off.regrown(s, kept, **sizes), kept


def current_size(s: sm.Session, field: str) -> int:
    return getattr(s, field)


@pytest.mark.parametrize("seed", SEEDS)
def test_shrinking_and_growing_back_restores_every_cell_label_and_mask_cell(seed):
    s = custom_session(seed)
    rng = random.Random(seed)
    for field in SIZES:
        if field == "num_keys" and s.key is None:
            continue  # S follows L without a key input
        if field in ("num_heads", "num_kv_heads", "d_k", "d_v") and s.mode == "self":
            continue  # q = k = v = x: the heads split d_model
        if field == "d_model" and s.mode == "qkv":
            continue  # q's width is heads x d_k
        size = current_size(s, field)
        if size < 2:
            continue
        small, kept = resize(s, None, **{field: rng.randint(1, size - 1)})
        assert current_size(small, field) < size, field
        back, _ = resize(small, kept, **{field: size})
        assert kept_fields(back) == kept_fields(s), field


@pytest.mark.parametrize("seed", SEEDS)
def test_several_shrinks_then_an_edit_then_growing_back(seed):
    """L and d_model shrunk one after the other, a cell edited, then both grown back: the edit
    stays, every cut-off cell and label comes back, the cells never held read 0 and t<i>."""
    s = custom_session(seed)
    L, dm = s.num_tokens, s.d_model
    t, kept = resize(s, None, num_tokens=1)
    if s.mode != "qkv":
        t, kept = resize(t, kept, d_model=1)
    t = sm.with_cell(t, "query", 0, 0, 12.5)
    t, kept = resize(t, kept, num_tokens=L + 2)  # two rows past the original
    t, kept = resize(t, kept, d_model=dm)
    assert t.query[0][0] == 12.5 and t.query[0][1:] == s.query[0][1:]
    assert t.query[1:L] == s.query[1:L] and t.tokens[:L] == s.tokens
    assert t.query[L:] == ((0.0,) * dm,) * 2 and t.tokens[L:] == (f"t{L}", f"t{L + 1}")
    assert all(row[: s.num_keys] == old for row, old in zip(t.variant.drawn, s.variant.drawn))


def test_a_random_example_is_drawn_again_not_restored():
    s = sm.random_session(5, 6, 4, 2, 2, 1)
    small, kept = resize(s, None, num_tokens=3)
    assert kept is None and small.preset == "random"
    back, _ = resize(small, kept, num_tokens=6)
    assert back == s  # the same seed draws the same example at the same sizes


def test_an_edit_after_undo_drops_the_redo_and_states_come_back_exact():
    states = [sm.random_session(seed) for seed in range(4)]
    history = History(sm.cell_count)
    for before in states[:3]:
        history.record(before)
    assert history.undo(states[3]) is states[2]
    assert history.undo(states[2]) is states[1]
    assert history.redo(states[1]) is states[2]
    history.record(states[0])  # a new edit: nothing left to redo
    assert not history.can_redo() and history.redo(states[0]) is None
    assert history.undo(states[3]) is states[0] and history.undo(states[0]) is states[1]


def test_the_history_drops_its_oldest_states_past_its_limit_and_budget():
    states = [sm.random_session(seed, 8, 4, 2, 2, 1) for seed in range(6)]
    cells = sm.cell_count(states[0])
    assert cells == 8 * 4 + 3 * 4 * 2  # x (8, 4), w_q, w_k, w_v (4, 2)
    history = History(sm.cell_count, limit=4, budget=3 * cells)
    for s in states:
        history.record(s)
    kept = []
    while (s := history.undo(states[0])) is not None:
        kept.append(s)
    assert kept == states[:2:-1]  # the newest 3: the budget, under the limit of 4
    with pytest.raises(ValueError, match="limit and budget"):
        History(sm.cell_count, limit=0)

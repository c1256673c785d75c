"""The backward view's pure parts: the dO choice as a session edit and in files, dO itself."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from gui.state import backward_check, session_file
from gui.state import session as sm

SEEDS = range(30)


def sized(seed: int) -> sm.Session:
    """A random example at seeded sizes (heads, kv heads, widths)."""
    rng = random.Random(seed)
    heads = rng.choice((1, 2, 4))
    kv = rng.choice([h for h in (1, 2, 4) if heads % h == 0])
    return sm.random_session(
        seed, rng.randint(1, 7), rng.randint(2, 6), rng.randint(1, 3), rng.randint(1, 3), heads, kv
    )


# ---------------------------------------------------------------- dO itself


@pytest.mark.parametrize("seed", SEEDS)
def test_ones_is_one_everywhere_in_the_outputs_shape(seed):
    s = sized(seed)
    dO = backward_check.grad_output_for(s)
    width = s.num_heads * s.d_v  # the heads side by side: the output's width
    assert dO == [[1.0] * width for _ in range(s.num_tokens)]


@pytest.mark.parametrize("seed", SEEDS)
def test_random_draws_the_seeds_numbers_in_minus_one_to_one(seed):
    s = sm.with_grad_output(sized(seed), "random", seed * 7 + 1)
    rng = random.Random(seed * 7 + 1)  # written out here, not taken from the code under test
    width = s.num_heads * s.d_v
    want = [[round(rng.uniform(-1, 1), 2) for _ in range(width)] for _ in range(s.num_tokens)]
    assert backward_check.grad_output_for(s) == want
    other = sm.with_grad_output(s, "random", seed * 7 + 2)
    if s.num_tokens * width > 2:
        assert backward_check.grad_output_for(other) != want


@pytest.mark.parametrize("seed", SEEDS)
def test_target_is_one_hot_at_the_cell_the_seed_draws(seed):
    s = sm.with_grad_output(sized(seed), "target", seed)
    rng = random.Random(seed)
    i, c = rng.randrange(s.num_tokens), rng.randrange(s.num_heads * s.d_v)
    dO = backward_check.grad_output_for(s)
    assert len(dO) == s.num_tokens and all(len(row) == s.num_heads * s.d_v for row in dO)
    assert [(r, k) for r, row in enumerate(dO) for k, x in enumerate(row) if x != 0] == [(i, c)]
    assert dO[i][c] == 1.0
    assert f"output[{i}][{c}]" in backward_check.describe_grad_output(s)


def test_target_cells_differ_between_seeds():
    s = sm.random_session(0, 6, 4, 2, 2, 2)
    cells = {backward_check.target_cell(sm.with_grad_output(s, "target", n)) for n in range(20)}
    assert len(cells) > 5


# ---------------------------------------------------------------- the session edit


def test_the_dO_choice_is_a_pure_edit_that_keeps_everything_else():
    s = sm.random_session(3)
    edited = sm.with_grad_output(s, "random", 42)
    assert (edited.grad_output, edited.grad_seed) == ("random", 42)
    assert dataclasses.replace(edited, grad_output="ones", grad_seed=0) == s
    assert (s.grad_output, s.grad_seed) == ("ones", 0)  # the original is untouched


@pytest.mark.parametrize(
    "kind, seed, message",
    [
        ("twos", 0, "dO: expected one of ones, random, target, training, found 'twos'"),
        ("random", -1, r"dO seed: expected an integer in \[0, 2147483647\], found -1"),
        ("random", 2**31, r"dO seed: expected an integer in \[0, 2147483647\], found 2147483648"),
        ("random", True, r"dO seed: expected an integer .* found True"),
        ("target", 1.5, r"dO seed: expected an integer .* found 1.5"),
    ],
)
def test_bad_dO_choices_are_refused_with_a_message(kind, seed, message):
    with pytest.raises(sm.SessionError, match=message):
        sm.with_grad_output(sm.random_session(0), kind, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_new_example_or_seed_keeps_the_dO_choice(seed):
    s = sm.with_grad_output(sized(seed), "target", seed + 5)
    for new in (sm.reseeded(s, seed + 100), sm.with_preset(s, "random"), sm.regenerated(s, d_v=4)):
        assert (new.grad_output, new.grad_seed) == ("target", seed + 5)


# ---------------------------------------------------------------- files


@pytest.mark.parametrize("seed", SEEDS)
def test_the_dO_choice_round_trips_through_a_file(tmp_path, seed):
    kind = sm.GRAD_OUTPUTS[seed % 3]
    s = sm.with_grad_output(sized(seed), kind, seed * 1000)
    path = tmp_path / "s.json"
    session_file.save(path, s)
    data = json.loads(path.read_text())
    assert (data["grad_output"], data["grad_seed"]) == (kind, seed * 1000)
    assert session_file.load(path) == s


def test_a_file_written_before_the_dO_choice_loads_with_ones(tmp_path):
    s = sm.with_grad_output(sm.random_session(6), "random", 9)
    old = s.to_dict()
    del old["grad_output"], old["grad_seed"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    loaded = session_file.load(path)
    assert (loaded.grad_output, loaded.grad_seed) == ("ones", 0)
    assert dataclasses.replace(loaded, grad_output="random", grad_seed=9) == s


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("grad_output", "zeros", "session field 'grad_output': expected one of 'ones'"),
        ("grad_output", None, "session field 'grad_output': expected one of"),
        ("grad_seed", -3, r"session field 'grad_seed': expected an integer in \[0, 2147483647\]"),
        ("grad_seed", "7", "session field 'grad_seed': expected an integer"),
        ("grad_seed", False, "session field 'grad_seed': expected an integer"),
    ],
)
def test_a_file_with_a_bad_dO_choice_is_refused_naming_the_field(field, value, message):
    data = sm.random_session(1).to_dict()
    data[field] = value
    with pytest.raises(sm.SessionError, match=message):
        session_file.loads(json.dumps(data))


# ---------------------------------------------------------------- sizes


def test_the_backward_is_computed_up_to_512_by_512_tokens_and_refused_above():
    small = sm.random_session(0, 512, 2, 1, 1, 1)
    assert backward_check.too_large(small) == ""
    big = sm.random_session(0, 513, 2, 1, 1, 1)
    said = backward_check.too_large(big)
    assert "513 x 513 = 263,169" in said and "1.7 s at 512 tokens" in said
    assert backward_check.check_skipped(sm.random_session(0, 256, 2, 1, 1, 1)) == ""
    said = backward_check.check_skipped(small)
    assert "8.8 s at 512 tokens" in said and "512 x 512 = 262,144" in said
    assert said.startswith("Gradients are checked only up to 65,536 query-key pairs (256 x 256")

"""The window's session edits as pure functions: preset change, reseed, backend, options, labels."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

import scratch
from gui.state import controller, session_file, variant_session
from gui.state import session as sm
from gui.state.input_modes import with_mode
from scratch.learn import presets
from scratch.variants import VariantChoice
from tests.journey_sessions import journey_typed, with_mask

SEEDS = range(40)


def random_sizes(seed: int) -> sm.Session:
    """A random example at seeded sizes, with options the user might have chosen."""
    rng = random.Random(seed)
    heads = rng.choice((1, 2, 4))
    s = sm.random_session(
        seed,
        rng.randint(1, 7),
        rng.randint(2, 6),
        rng.randint(1, 4),
        rng.randint(1, 4),
        heads,
        rng.choice([h for h in (1, 2, 4) if heads % h == 0]),
    )
    mask = rng.choice(("none", "causal-top-left", "custom"))
    grid = [[rng.random() < 0.7 for _ in range(s.num_keys)] for _ in range(s.num_tokens)]
    return dataclasses.replace(
        with_mask(s, mask, grid),
        backend=rng.choice(("scratch", "numpy")),
        dtype=rng.choice(("float64", "float32")),
        masked_rows=rng.choice(sm.MASKED_ROWS),
        scale_mode="custom",
        scale_value=rng.uniform(0.1, 2.0),
        step="scores",
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_reseeding_a_random_example_draws_new_numbers_and_keeps_sizes_and_options(seed):
    s = random_sizes(seed)
    new = sm.reseeded(s, seed + 1000)
    assert new.seed == seed + 1000 and new.preset == "random"
    # the sizes stay (a random example always projects)
    for size in ("num_tokens", "d_model", "d_k", "d_v", "num_heads", "num_kv_heads"):
        assert getattr(new, size) == getattr(s, size), size
    assert new.query != s.query  # new numbers ...
    assert (
        new.query
        == sm.random_session(
            seed + 1000, s.num_tokens, s.d_model, s.d_k, s.d_v, s.num_heads, s.num_kv_heads
        ).query
    )  # ... the ones that seed draws
    # the user's options stay; a drawn mask belonged to the old numbers
    for option in ("backend", "dtype", "masked_rows", "scale_mode", "scale_value"):
        assert getattr(new, option) == getattr(s, option), option
    assert new.variant.mask == ("none" if s.variant.mask == "drawn" else s.variant.mask)
    assert new.variant.drawn == () and new.variant.align == s.variant.align
    session_file.validate(new.to_dict())


def test_reseeding_anything_but_a_random_example_only_stores_the_seed():
    s = sm.from_preset(presets.get("journey"))
    assert sm.reseeded(s, 5) == dataclasses.replace(s, seed=5)


@pytest.mark.parametrize("seed", SEEDS)
def test_choosing_a_preset_replaces_the_example_and_keeps_backend_dtype_and_rows(seed):
    s = random_sizes(seed)
    name = random.Random(seed).choice(presets.names())
    new = sm.with_preset(s, name, presets.get(name))
    expected = sm.from_preset(presets.get(name))
    kept = dict(backend=s.backend, dtype=s.dtype, masked_rows=s.masked_rows)
    assert new == dataclasses.replace(expected, **kept)
    assert new.preset == name


@pytest.mark.parametrize("seed", SEEDS)
def test_choosing_random_draws_at_the_current_sizes_and_seed(seed):
    s = dataclasses.replace(sm.from_preset(presets.get("journey")), seed=seed, dtype="float32")
    new = sm.with_preset(s, "random")
    assert new.preset == "random" and new.seed == seed and new.dtype == "float32"
    assert (new.num_tokens, new.d_model) == (s.num_tokens, s.d_model)
    assert new.num_heads == 2  # journey has no projections: a random example gets two heads
    session_file.validate(new.to_dict())


def test_choosing_custom_only_renames_and_a_missing_preset_is_refused():
    s = sm.random_session(3)
    assert sm.with_preset(s, "custom") == dataclasses.replace(s, preset="custom")
    with pytest.raises(sm.SessionError, match="preset: expected the scratch Preset for 'journey'"):
        sm.with_preset(s, "journey")


def test_another_backend_keeps_the_dtype_it_has_else_takes_its_first():
    s = dataclasses.replace(sm.random_session(1), dtype="float16")
    assert sm.with_backend(s, "torch-cpu", ("float32", "float16")).dtype == "float16"
    moved = sm.with_backend(s, "numpy", ("float64", "float32"))
    assert (moved.backend, moved.dtype) == ("numpy", "float64")


def picker_fields(choice: object, **changes: object) -> dict:
    """The Variant picker's fields showing `choice` (as VariantPanel.fields gives them): every
    registered mask's parameters as their text boxes show them (cu_seqlens left blank)."""
    params = {
        key: "" if key == "cu_seqlens" else p.text(getattr(choice, key))
        for key, p in VariantChoice.mask_params().items()
    }
    fields = dict(
        mask=choice.mask, align=choice.align, rope=choice.rope, softcap_on=False, alibi=False,
        sinks_on=False, softcap="30", slopes="", sinks="", rope_base=f"{choice.rope_base:g}",
    )  # fmt: skip
    return {**params, **fields, **changes}


def test_choosing_drawn_starts_all_true_and_a_clicked_grid_stays_through_other_masks():
    s = sm.random_session(2, num_tokens=3)
    drawn = variant_session.with_variant(s, picker_fields(s.variant, mask="drawn"))
    assert drawn.variant.mask == "drawn" and drawn.variant.drawn == ((True,) * 3,) * 3
    clicked = variant_session.toggled_mask_cell(drawn, 1, 2)
    assert clicked.variant.drawn[1] == (True, True, False)
    causal = variant_session.with_variant(clicked, picker_fields(clicked.variant, mask="causal"))
    assert variant_session.shown_mask(causal) == tuple(
        map(tuple, scratch.causal_mask(3, 3, "bottom-right"))
    )
    back = variant_session.with_variant(causal, picker_fields(causal.variant, mask="drawn"))
    assert back.variant == clicked.variant  # the clicked grid came back
    kept = sm.with_options(back, "none", 1.0, "zero", "")
    assert kept.variant == back.variant and kept.dtype == s.dtype  # no dtype chosen: kept


def test_labels_are_parsed_from_the_two_lines_and_unchanged_labels_give_the_same_session():
    s = sm.random_session(4, num_tokens=3)
    assert sm.with_labels(s, "t0, t1, t2", "ignored") is s
    new = sm.with_labels(s, "a, b, c", "")
    assert new.tokens == new.key_tokens == ("a", "b", "c")
    with pytest.raises(ValueError, match="tokens: expected 3 comma-separated labels, found 2"):
        sm.with_labels(s, "a, b", "")


def test_a_version_1_file_with_x_loads_as_the_query_table(tmp_path):
    s = sm.random_session(6)
    old = s.to_dict()
    del old["variant"]  # version 1 files had no variant, and SDPA's mask options
    old.update(version=1, mask_mode="none", mask=None)
    old["x"] = old.pop("query")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert session_file.load(path) == s
    assert json.loads(session_file.dumps(s))["version"] == sm.VERSION and "x" not in s.to_dict()


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_a_click_on_a_causal_grid_starts_the_drawn_mask_from_the_causal_one(align):
    s = with_mask(sm.random_session(5, num_tokens=3), f"causal-{align}")
    causal = tuple(tuple(r) for r in scratch.causal_mask(3, 3, align))
    assert variant_session.shown_mask(s) == causal
    clicked = variant_session.toggled_mask_cell(s, 0, 2)
    flipped = [list(r) for r in causal]
    flipped[0][2] = not flipped[0][2]
    assert clicked.variant.mask == "drawn" and clicked.variant.drawn == tuple(map(tuple, flipped))
    assert variant_session.shown_mask(with_mask(s, "none")) == ((True,) * 3,) * 3


@pytest.mark.parametrize("mode", ["none", "causal-top-left", "causal-bottom-right", "custom"])
@pytest.mark.parametrize(("L", "S"), [(5, 5), (70, 70), (90, 130), (130, 90), (200, 7)])
def test_sampled_mask_is_the_shown_mask_at_the_sampled_queries_and_keys(mode, L, S):
    s = sm.resized(with_mode(sm.random_session(seed=3, num_tokens=L), "qkv"), num_keys=S)
    assert (s.num_tokens, s.num_keys) == (L, S)
    if mode == "custom":  # a seeded pattern, so no rule could produce it by accident
        pick = random.Random(f"{L}-{S}")
        s = with_mask(s, "custom", [[pick.random() < 0.5 for _ in range(S)] for _ in range(L)])
    else:
        s = with_mask(s, mode)
    full = variant_session.shown_mask(s)
    rows, cols = variant_session.sampled_indices(L, 64), variant_session.sampled_indices(S, 64)
    assert (rows[0], rows[-1], cols[0], cols[-1]) == (0, L - 1, 0, S - 1)
    assert len(rows) == min(L, 64) and len(set(rows)) == len(rows)
    assert variant_session.sampled_mask(s, 64) == tuple(
        tuple(full[i][j] for j in cols) for i in rows
    )


def test_with_cell_refuses_non_finite_numbers():
    s = journey_typed()
    assert sm.with_cell(s, "query", 1, 2, 5.0).query[1][2] == 5.0
    for bad in (math.inf, math.nan, "3", True):
        with pytest.raises(sm.SessionError, match=r"query\[1\]\[2\]"):
            sm.with_cell(s, "query", 1, 2, bad)


@pytest.mark.parametrize("kv_heads", [2, 1])  # 1: grouped-query, k and v narrower than q
def test_mode_switches_give_valid_sessions(kv_heads):
    s = sm.random_session(2, 3, 4, 2, 3, 2, kv_heads)
    for mode in ("qkv", "self", "project", "qkv"):
        s = with_mode(s, mode)
        assert s.mode == mode
        session_file.validate(s.to_dict())
        scratch.trace_example(*controller.example_and_options(s))  # the core accepts it
        s = sm.random_session(2, 3, 4, 2, 3, 2, kv_heads) if mode == "self" else s


@pytest.mark.parametrize(("d_v", "kv_heads"), [(2, 2), (2, 1), (3, 2)])
def test_switching_to_projections_keeps_the_result(d_v, kv_heads):
    """qkv or self -> project uses identity weights: the output is exactly the same, heads,
    kv heads and cross-attention kept (K and V stay inputs when d_k == d_v)."""
    for start in ("qkv", "self"):
        s = sm.random_session(5, 3, 4, 2, d_v, 2, kv_heads if start == "qkv" else 2)
        s = with_mode(s, start)
        before = scratch.trace_example(*controller.example_and_options(s))
        after_s = with_mode(s, "project")
        session_file.validate(after_s.to_dict())
        after = scratch.trace_example(*controller.example_and_options(after_s))
        assert after_s.num_heads == s.num_heads == 2
        if start == "qkv" and d_v != 2:  # K and V widths differ: they cannot both be inputs
            assert after_s.key is None and after_s.num_kv_heads == 2
            continue
        assert after["output"].tolist() == before["output"].tolist(), (start, d_v, kv_heads)
        if start == "qkv":
            assert after_s.num_kv_heads == kv_heads and after_s.key == s.key


def test_a_cell_too_large_for_the_scores_is_refused_in_the_window_and_in_files():
    """1e200 in one cell overflowed the scores (inf - inf: a NaN row explained as "masked");
    MAX_CELL refuses it, and a session file holding it."""

    s = sm.from_preset(presets.get("journey"))
    assert sm.with_cell(s, "query", 1, 1, sm.MAX_CELL).query[1][1] == sm.MAX_CELL
    with pytest.raises(ValueError, match=r"query\[1\]\[1\]: expected a number from -1e\+50"):
        sm.with_cell(s, "query", 1, 1, 1e200)
    data = s.to_dict()
    data["query"][1][1] = -1e51
    with pytest.raises(ValueError, match="a number from -1e"):
        session_file.validate(data)


def test_an_empty_label_is_named_by_its_place():
    with pytest.raises(ValueError, match="tokens: label 2 of 6 is empty"):
        sm.parse_tokens("a,, c, d, e, f", 6, "tokens")
    with pytest.raises(ValueError, match="tokens: expected 6 comma-separated labels, found 5"):
        sm.parse_tokens("a, b, c, d, e", 6, "tokens")

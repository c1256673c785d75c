"""The window's Qt-free modules: session files, resizing, sentences, code snippets, view model."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

import scratch
from gui import atomic, codegen, controller, core_api, numbers, sentences, session_file, view_model
from gui import session as sm

EPS64 = np.finfo(np.float64).eps


def journey() -> sm.Session:
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


# ---------------------------------------------------------------- session files


def test_session_round_trip_keeps_every_field(tmp_path):
    s = dataclasses.replace(
        sm.random_session(7, 5, 4, 2, 3, 2, 1),
        mask_mode="custom",
        mask=tuple(tuple((i + j) % 3 != 0 for j in range(5)) for i in range(5)),
        masked_rows="uniform",
        scale_mode="custom",
        scale_value=-0.25,
        step="scores",
    )
    path = tmp_path / "s.json"
    session_file.save(path, s)
    assert session_file.load(path) == s
    assert json.loads(path.read_text())["version"] == sm.VERSION


def test_atomic_write_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    path = tmp_path / "shared.json"
    path.write_text("old")
    path.chmod(0o640)
    atomic.write_text(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640


def test_atomic_write_leaves_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "keep.json"
    path.write_text("old")

    def broken_replace(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        atomic.write_text(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]  # no temporary left


BAD_FIELDS = [
    ("version", 99, "version"),
    ("query", [[1.0, 2.0], [3.0]], "query[1]"),
    ("query", [[1.0, "a", 3.0]] * 6, "query[0][1]"),
    ("query", [[1.0, float("nan"), 3.0]] * 6, "query[0][1]"),
    ("query", [[1.0, True, 3.0]] * 6, "query[0][1]"),
    ("tokens", ["a", "b"], "tokens"),
    ("tokens", ["Your", "journey,", "starts", "with", "one", "step"], "without commas"),
    ("tokens", ["Your", "", "starts", "with", "one", "step"], "non-empty labels"),
    ("mask_mode", "diagonal", "mask_mode"),
    ("masked_rows", "skip", "masked_rows"),
    ("num_heads", 0, "num_heads"),
    ("num_heads", 2, "'query': query: width 3 does not split into 2 heads"),  # scratch.plan's
    ("scale_value", float("inf"), "scale_value"),
    ("mask", [[True] * 6] * 5, "mask"),
    ("w_q", [[1.0]], "w_q"),
    ("backend", "abacus", "backend"),
    ("surprise", 1, "unknown fields"),
    ("seed", 2**31, "seed"),  # a Qt spin box holds at most 2**31 - 1
    ("num_heads", 17, "num_heads.: expected an integer in [1, 16]"),  # the spin box maximum
]


@pytest.mark.parametrize(("field", "value", "named"), BAD_FIELDS)
def test_validate_rejects_a_bad_field_and_names_it(field, value, named):
    data = journey().to_dict()
    data[field] = value
    with pytest.raises(sm.SessionError, match=named.replace("[", r"\[").replace("]", r"\]")):
        session_file.validate(data, {"scratch": ("float64",)})


def test_load_rejects_broken_json_and_binary(tmp_path):
    (tmp_path / "a.json").write_text('{"version": 1, "x": [[1, 2]')
    (tmp_path / "b.json").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "c.json").write_text("[1, 2, 3]")
    for name, words in (("a", "not valid JSON"), ("b", "UTF-8"), ("c", "JSON object")):
        with pytest.raises(sm.SessionError, match=words):
            session_file.load(tmp_path / f"{name}.json")
    with pytest.raises(sm.SessionError, match="cannot read"):
        session_file.load(tmp_path / "missing.json")


def test_hand_edited_numbers_too_big_for_python_are_session_errors():
    """1e400 written out as an integer, or 5000 digits: a SessionError, not Overflow/ValueError."""
    text = session_file.dumps(journey())
    for big in ("1" + "0" * 400, "9" * 5000):
        for old in ('"scale_value": 1.0', '"seed": 0'):
            assert old in text
            with pytest.raises(sm.SessionError, match="not a usable session|not valid JSON|seed"):
                session_file.loads(text.replace(old, old.split(":")[0] + ": " + big))


# ---------------------------------------------------------------- edits


def test_resize_keeps_the_values_that_fit():
    s = sm.random_session(3, 4, 4, 2, 2, 1)
    bigger = sm.resized(s, num_tokens=6, d_model=5)
    assert all(bigger.query[i][:4] == s.query[i] for i in range(4))
    assert all(v == 0.0 for v in bigger.query[5]) and bigger.tokens[:4] == s.tokens
    assert len(bigger.w_q) == 5 and bigger.w_q[:4] == tuple(r for r in s.w_q)
    smaller = sm.resized(bigger, num_tokens=2)
    assert smaller.query == tuple(r for r in bigger.query[:2]) and smaller.tokens == s.tokens[:2]
    session_file.validate(smaller.to_dict())  # still a consistent session


def test_heads_and_kv_heads_resize_the_projection_widths():
    s = sm.resized(sm.random_session(1, 3, 4, 2, 2, 1), num_heads=4, num_kv_heads=2)
    assert (len(s.w_q[0]), len(s.w_k[0]), len(s.w_v[0])) == (8, 4, 4)
    assert (s.d_k, s.d_v) == (2, 2)
    session_file.validate(s.to_dict())


def test_with_cell_refuses_non_finite_numbers():
    s = journey()
    assert sm.with_cell(s, "query", 1, 2, 5.0).query[1][2] == 5.0
    for bad in (math.inf, math.nan, "3", True):
        with pytest.raises(sm.SessionError, match=r"query\[1\]\[2\]"):
            sm.with_cell(s, "query", 1, 2, bad)


@pytest.mark.parametrize("kv_heads", [2, 1])  # 1: grouped-query, k and v narrower than q
def test_mode_switches_give_valid_sessions(kv_heads):
    s = sm.random_session(2, 3, 4, 2, 3, 2, kv_heads)
    for mode in ("qkv", "self", "project", "qkv"):
        s = sm.with_mode(s, mode)
        assert s.mode == mode
        session_file.validate(s.to_dict())
        core_api.ground_truth(*controller.example_and_options(s))  # the core accepts it
        s = sm.random_session(2, 3, 4, 2, 3, 2, kv_heads) if mode == "self" else s


@pytest.mark.parametrize(("d_v", "kv_heads"), [(2, 2), (2, 1), (3, 2)])
def test_switching_to_projections_keeps_the_result(d_v, kv_heads):
    """qkv or self -> project uses identity weights: the output is exactly the same, heads,
    kv heads and cross-attention kept (K and V stay inputs when d_k == d_v)."""
    for start in ("qkv", "self"):
        s = sm.random_session(5, 3, 4, 2, d_v, 2, kv_heads if start == "qkv" else 2)
        s = sm.with_mode(s, start)
        before = core_api.ground_truth(*controller.example_and_options(s))
        after_s = sm.with_mode(s, "project")
        session_file.validate(after_s.to_dict())
        after = core_api.ground_truth(*controller.example_and_options(after_s))
        assert after_s.num_heads == s.num_heads == 2
        if start == "qkv" and d_v != 2:  # K and V widths differ: they cannot both be inputs
            assert after_s.key is None and after_s.num_kv_heads == 2
            continue
        assert after["output"].tolist() == before["output"].tolist(), (start, d_v, kv_heads)
        if start == "qkv":
            assert after_s.num_kv_heads == kv_heads and after_s.key == s.key


def test_validate_rejects_qkv_values_that_do_not_split_into_kv_heads():
    s = sm.with_mode(sm.random_session(2, 3, 4, 2, 2, 2), "qkv")
    data = s.to_dict()
    data["value"] = [[1.0, 2.0, 3.0]] * 3  # 3 columns, 2 kv heads
    with pytest.raises(sm.SessionError, match="'value'"):
        session_file.validate(data)


def test_validate_rejects_kv_heads_in_self_mode():
    """q = k = v = x: k has num_heads * d_k columns, so it cannot split into fewer heads."""
    data = sm.with_mode(sm.random_session(2, 3, 4, 2, 2, 2), "self").to_dict()
    session_file.validate(data)
    data["num_kv_heads"] = 1
    with pytest.raises(sm.SessionError, match="'num_kv_heads'"):
        session_file.validate(data)


# ---------------------------------------------------------------- sentences


def test_sentence_names_the_two_largest_weights():
    row = [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]  # seed 003, row 'journey'
    keys = ["Your", "journey", "starts", "with", "one", "step"]
    text = sentences.attention_sentence(row, "journey", keys)
    assert text == "'journey' attends most to 'journey' (0.24) and 'starts' (0.23)"


def test_sentences_for_masked_rows_and_uniform_rows():
    assert "nothing" in sentences.attention_sentence([0.0, 0.0], "a", ["x", "y"])
    assert "NaN" in sentences.attention_sentence([math.nan, math.nan], "a", ["x", "y"])
    assert "equally" in sentences.attention_sentence([0.25] * 4, "a", list("wxyz"))
    masked = [[0.0, -math.inf], [1.0, 2.0]]
    assert sentences.describe("mask", masked, ["a", "b"], ["x", "y"]).startswith("1 of 4")
    for row in ([0.0, 0.0], [math.nan, math.nan], [0.5, 0.5]):  # one full stop, not two
        text = sentences.describe("attention", [row], ["a"], ["x", "y"])
        assert text.endswith(".") and not text.endswith(".."), text
        text = sentences.describe("mix", [[1.0]], ["a"], ["x", "y"], weights=[row])
        assert text.endswith(".") and not text.endswith(".."), text


def test_the_registry_s_sentence_kinds_are_exactly_those_describe_knows():
    """Every kind a registry entry names has its own sentence; no other kind has one."""
    from scratch.steps import STEPS

    assert {spec.sentence for spec in STEPS} - {""} == set(sentences.KINDS)
    m, rows, cols = [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], ["a", "b"], ["x", "y", "z"]
    said = {
        kind: sentences.describe(kind, m, rows, cols, weights=m, heads=2 if kind == "heads" else 1)
        for kind in sentences.KINDS
    }
    assert said == {
        "attention": "'a' attends most to 'x' (0.70) and 'y' (0.20).",
        "match": "'a' matches 'x' best (0.70) and 'z' least (0.10).",
        "mask": "Nothing is masked: every query may attend every key.",
        "mix": "'a' takes its output mostly from the values of 'x' (0.70) and 'y' (0.20).",
        "heads": "Each query's output row is the 2 heads' outputs side by side "
        "(step head_outputs).",
    }
    for other in ("", "weights", "scores", "output"):  # a step's name is not a kind
        assert sentences.describe(other, m, rows, cols, weights=m) == "", other


def test_each_step_gets_the_sentence_of_its_kind():
    """The kinds the registry gives the forward steps: weights say where a query attends,
    scores and scaled its best and worst match, masked how much is hidden, an output what it
    mixes, several heads how they combine; nothing else gets a sentence."""
    from scratch.steps import call_of, steps_of

    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(3, 4)).round(3).tolist(), {}
    for n in ("w_q", "w_k", "w_v", "w_o"):
        w[n] = rng.normal(size=(4, 4)).round(3).tolist()
    calls = [
        scratch.trace_attention(x, is_causal=True),
        scratch.trace_attention(x, w_q=w["w_q"], w_k=w["w_k"], w_v=w["w_v"], num_heads=2),
        scratch.trace_attention(x, **w, num_heads=2),
    ]
    kinds = [[(s.name, s.number, s.sentence) for s in steps_of(call_of(t)) if s.sentence]
             for t in calls]  # fmt: skip
    forward = [("scores", 2, "match"), ("scaled", 3, "match"), ("masked", 4, "mask"),
               ("weights", 5, "attention")]  # fmt: skip
    assert kinds == [
        forward + [("output", 6, "mix")],
        forward + [("head_outputs", 6, "mix"), ("output", 7, "heads")],
        forward + [("head_outputs", 6, "mix"), ("output", 8, "heads")],
    ]


# ---------------------------------------------------------------- copy as code


def _bound(trace) -> float:
    """float64 rounding bound for the snippet vs the exact core: a few ulps per term summed."""
    q, k, v = (np.abs(np.asarray(trace[n].tolist())) for n in ("q", "k", "v"))
    terms = q.shape[1] + k.shape[0] + 8
    return 16 * terms * EPS64 * max(1.0, float(v.max())) * max(1.0, float(q.max() * k.max()))


SNIPPET_CASES = [
    ("journey", {}),
    ("cross", {"mask_mode": "causal-bottom-right"}),  # L = 2 queries, S = 4 keys
    ("random-2h", {"mask_mode": "causal-top-left"}),
    ("random-gqa", {"mask_mode": "causal-bottom-right", "masked_rows": "uniform"}),
    ("project-key-no-value", {}),  # cross-attention whose values come from the key input
] + [  # a custom mask with a fully masked row, under each masked_rows policy
    (
        "random-custom",
        {"mask_mode": "custom", "masked_rows": policy, "scale_mode": "custom", "scale_value": 0.7},
    )
    for policy in sm.MASKED_ROWS
]


@pytest.mark.parametrize("library", codegen.LIBRARIES)
@pytest.mark.parametrize(("case", "changes"), SNIPPET_CASES)
def test_copy_as_code_snippet_runs_and_matches_the_trace(library, case, changes):
    if case == "journey":
        s = journey()
    elif case == "cross":
        s = sm.Session(
            tokens=("a", "b"),
            key_tokens=("k0", "k1", "k2", "k3"),
            mode="qkv",
            query=((0.0, 1.0, 0.5), (1.0, -1.0, 2.0)),
            key=((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (0.5, 0.5, 0.5)),
            value=((1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (7.0, 8.0)),
        )
    elif case == "random-2h":
        s = sm.random_session(5, 5, 4, 2, 3, 2)
    elif case == "project-key-no-value":
        key = ((1.0, 0.5, -1.0, 2.0), (0.0, 1.0, 0.25, -0.5))  # (S=2, d_kv_in=4)
        s = dataclasses.replace(sm.random_session(7, 3), key=key, key_tokens=("k0", "k1"))
        session_file.validate(s.to_dict())
    else:
        s = sm.random_session(6, 4, 6, 3, 2, 4, 2)
    if case == "random-custom":
        changes = dict(
            changes,
            mask=(
                (True, False, True, False),
                (False,) * 4,
                (True,) * 4,
                (False, False, False, True),
            ),
        )
    s = dataclasses.replace(s, **changes)
    trace = core_api.ground_truth(*controller.example_and_options(s))
    namespace: dict = {}
    exec(compile(codegen.snippet(s, library), "<snippet>", "exec"), namespace)  # noqa: S102
    got = np.asarray(namespace["output"], dtype=np.float64)
    want = np.asarray(trace["output"].tolist(), dtype=np.float64)
    assert got.shape == want.shape, f"{library} snippet output shape {got.shape} != {want.shape}"
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN rows differ"
    diff = np.nanmax(np.abs(got - want)) if np.isfinite(want).any() else 0.0
    assert diff <= _bound(trace), f"{library} snippet output differs by {diff:.3g}"


# ---------------------------------------------------------------- view model


def _hand_trace():
    """A tiny trace typed by hand: one plain step, one with a head axis, one masked."""
    inf = math.inf
    steps = (
        scratch.Step("scores", "s", [[1.0, -2.0, 3.0], [0.5, 0.0, -4.0]], "n", ("query", "key")),
        scratch.Step("masked", "m", [[1.0, -inf, 3.0], [-inf, -inf, -inf]], "n", ("query", "key")),
        scratch.Step(
            "weights",
            "w",
            [[[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]], [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]],
            "n",
            ("head", "query", "key"),
        ),
    )
    return scratch.Trace(steps, ("a", "b"), ("x", "y", "z"), 1.0, 2, 2)


def test_panels_hold_the_step_values_row_major_float32():
    t = _hand_trace()
    (p,) = view_model.panels(t, "scores")
    assert p.image.dtype == np.float32 and p.image.flags["C_CONTIGUOUS"]
    assert p.image.tolist() == [[1.0, -2.0, 3.0], [0.5, 0.0, -4.0]]
    assert (p.row_labels, p.col_labels) == (["a", "b"], ["x", "y", "z"])
    assert p.levels == (-4.0, 4.0) and p.kind == "signed"
    (m,) = view_model.panels(t, "masked")
    assert np.isnan(m.image).tolist() == [[False, True, False], [True, True, True]]
    heads = view_model.panels(t, "weights", view_model.HEAD_ALL)
    assert [h.image.tolist() for h in heads] == [
        [[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]],
        [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
    ]
    assert heads[0].levels == (0.0, 1.0)
    (avg,) = view_model.panels(t, "weights", view_model.HEAD_AVERAGE)
    assert avg.image.tolist() == [[0.375, 0.625, 0.0], [0.5, 0.0, 0.5]]
    (one,) = view_model.panels(t, "weights", "1")
    assert one.head == 1 and one.image.tolist() == heads[1].image.tolist()


def test_the_head_average_panel_shows_the_traces_own_head_average(monkeypatch):
    """The window computes no number: the average panel is trace.head_average, as given."""
    t = scratch.trace_attention(x=[[1.0, 0.0, 0.5, 2.0], [0.0, 1.0, -1.0, 0.5]], num_heads=2)
    marked = [[0.125, 0.875], [0.625, 0.375]]  # no mean of the heads: only the trace says so
    asked: list[str] = []

    def head_average(self, name):
        asked.append(name)
        return marked

    monkeypatch.setattr(type(t), "head_average", head_average)
    (avg,) = view_model.panels(t, "weights", view_model.HEAD_AVERAGE)
    assert asked == ["weights"] and avg.raw.tolist() == marked


def test_the_window_writes_numbers_one_way_per_room():
    """A cell is narrow (3 digits from 10 up), a sentence keeps 2 decimals up to 1000."""
    assert [numbers.cell(v) for v in (12.3456, 0.4567, 3.0, -math.inf, 2.5e-5)] == [
        "12.3", "0.46", "3", "-inf", "0.00",
    ]  # fmt: skip
    assert [numbers.prose(v) for v in (12.3456, 0.4567, 3.0, math.nan, 2.5e-5)] == [
        "12.35", "0.46", "3", "nan", "2.5e-05",
    ]  # fmt: skip
    assert (numbers.weight(1.0), numbers.error(math.nan), numbers.error(3.14159e-7)) == (
        "1.00", "-", "3.14e-07",
    )  # fmt: skip
    assert numbers.significant(3.14159, 4) == "3.142"


def test_example_and_options_map_the_session():
    s = dataclasses.replace(
        journey(),
        scale_mode="custom",
        scale_value=0.5,
        mask_mode="causal-bottom-right",
        masked_rows="nan",
    )
    example, options = controller.example_and_options(s)
    assert options.scale == 0.5 and options.masked_rows == "nan" and "w_q" not in example.params
    assert example.x == [list(r) for r in s.query] and example.tokens == list(s.tokens)
    assert options.attn_mask.tolist() == [[j <= i for j in range(6)] for i in range(6)]
    assert not options.is_causal and options.dropout_p == 0.0
    _, sqrt = controller.example_and_options(dataclasses.replace(s, scale_mode="sqrt"))
    _, none = controller.example_and_options(dataclasses.replace(s, scale_mode="none"))
    assert (sqrt.scale, none.scale) == (None, 1.0)
    _, top = controller.example_and_options(dataclasses.replace(s, mask_mode="causal-top-left"))
    assert top.is_causal is True and top.attn_mask is None
    projected = sm.random_session(1, 3, 4, 2, 3, 2, 1)
    example, _ = controller.example_and_options(projected)
    assert list(example.params) == ["w_q", "w_k", "w_v"] and example.key is None
    assert (example.num_heads, example.num_kv_heads) == (2, 1)


def test_output_sentence_with_several_heads_says_how_they_combine():
    out = [[0.1, 0.2, 0.3, 0.4]]
    text = sentences.describe("heads", out, ["a"], list("wxyz"), heads=2, w_o=True)
    assert (
        text == "Each query's output row is the 2 heads' outputs side by side "
        "(step head_outputs), then @ W_o."
    )
    assert sentences.describe("heads", out, ["a"], list("wxyz"), heads=2).endswith("outputs).")
    one_head = sentences.describe("mix", out, ["a"], list("xy"), weights=[[0.8, 0.2]])
    assert "takes its output mostly from" in one_head


def test_saving_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    folder = tmp_path / "real"
    folder.mkdir()
    target = folder / "session.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    try:
        link.symlink_to(Path("real") / "session.json")  # relative, as `ln -s` makes them
    except OSError as exc:
        pytest.skip(f"no symlinks here: {exc}")
    atomic.write_text(link, "new")
    assert link.is_symlink(), "the link was replaced by a regular file"
    assert os.readlink(link) == os.path.join("real", "session.json")
    assert target.read_text() == "new", "the link's target still holds the old contents"
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real"]
    assert os.listdir(folder) == ["session.json"], "a temporary file was left behind"


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_the_causal_mask_array_is_the_ground_truths_grid(align):
    """core_api.causal_mask_array (what a backend gets) equals scratch.causal_mask, any shape."""
    for L, S in [(1, 1), (4, 4), (3, 7), (7, 3), (1, 5), (5, 1)]:
        found = core_api.causal_mask_array(L, S, align)
        assert found.dtype == bool and found.tolist() == scratch.causal_mask(L, S, align)
    with pytest.raises(ValueError, match="align: expected 'top-left' or 'bottom-right'"):
        core_api.causal_mask_array(2, 2, "middle")

"""Session files: a round trip keeps every field, a bad file or field is a SessionError naming it,
and writes are atomic (permissions kept, the old file left on failure, symlinks followed)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from gui.state import session as sm
from gui.state import session_file
from gui.state.input_modes import with_mode
from scratch.ops import atomic
from tests.journey_sessions import journey_typed, with_mask


def test_session_round_trip_keeps_every_field(tmp_path):
    grid = [[(i + j) % 3 != 0 for j in range(5)] for i in range(5)]
    s = dataclasses.replace(
        with_mask(sm.random_session(7, 5, 4, 2, 3, 2, 1), "custom", grid),
        masked_rows="uniform",
        scale_mode="custom",
        scale_value=-0.25,
        step="scores",
    )
    path = tmp_path / "s.json"
    session_file.save(path, s)
    assert session_file.load(path) == s
    assert json.loads(path.read_text())["version"] == sm.VERSION


BAD_FIELDS = [
    ("version", 99, "version"),
    ("query", [[1.0, 2.0], [3.0]], "query[1]"),
    ("query", [[1.0, "a", 3.0]] * 6, "query[0][1]"),
    ("query", [[1.0, float("nan"), 3.0]] * 6, "query[0][1]"),
    ("query", [[1.0, True, 3.0]] * 6, "query[0][1]"),
    ("tokens", ["a", "b"], "tokens"),
    ("tokens", ["Your", "journey,", "starts", "with", "one", "step"], "without commas"),
    ("tokens", ["Your", "", "starts", "with", "one", "step"], "non-empty labels"),
    ("mask_mode", "causal-top-left", "unknown fields: mask_mode"),  # version 2's, now a variant
    ("masked_rows", "skip", "masked_rows"),
    ("num_heads", 0, "num_heads"),
    ("num_heads", 2, "'query': query: width 3 does not split into 2 heads"),  # scratch.ops.plan's
    ("scale_value", float("inf"), "scale_value"),
    ("variant", {"mask": "drawn", "drawn": [[True] * 6] * 5}, "variant.drawn"),
    ("variant", {"mask": "drawn", "drawn": [[True] * 6] * 5 + [[1] * 6]}, "drawn: expected"),
    ("variant", {"mask": "drawn"}, "drawn: expected a grid of 6 rows of 6"),
    ("w_q", [[1.0]], "w_q"),
    ("backend", "abacus", "backend"),
    ("surprise", 1, "unknown fields"),
    ("seed", 2**31, "seed"),  # a Qt spin box holds at most 2**31 - 1
    ("num_heads", 17, "num_heads.: expected an integer in [1, 16]"),  # the spin box maximum
]


@pytest.mark.parametrize(("field", "value", "named"), BAD_FIELDS)
def test_validate_rejects_a_bad_field_and_names_it(field, value, named):
    data = journey_typed().to_dict()
    data[field] = value
    with pytest.raises(sm.SessionError, match=named.replace("[", r"\[").replace("]", r"\]")):
        session_file.validate(data, {"scratch": ("float64",)})


def test_validate_rejects_qkv_values_that_do_not_split_into_kv_heads():
    s = with_mode(sm.random_session(2, 3, 4, 2, 2, 2), "qkv")
    data = s.to_dict()
    data["value"] = [[1.0, 2.0, 3.0]] * 3  # 3 columns, 2 kv heads
    with pytest.raises(sm.SessionError, match="'value'"):
        session_file.validate(data)


def test_validate_rejects_kv_heads_in_self_mode():
    """q = k = v = x: k has num_heads * d_k columns, so it cannot split into fewer heads."""
    data = with_mode(sm.random_session(2, 3, 4, 2, 2, 2), "self").to_dict()
    session_file.validate(data)
    data["num_kv_heads"] = 1
    with pytest.raises(sm.SessionError, match="'num_kv_heads'"):
        session_file.validate(data)


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
    text = session_file.dumps(journey_typed())
    for big in ("1" + "0" * 400, "9" * 5000):
        for old in ('"scale_value": 1.0', '"seed": 0'):
            assert old in text
            with pytest.raises(sm.SessionError, match="not a usable session|not valid JSON|seed"):
                session_file.loads(text.replace(old, old.split(":")[0] + ": " + big))


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


def test_a_write_into_a_missing_folder_or_onto_a_folder_names_the_path(tmp_path):
    """Not mkstemp's own '.xxxx.part' name: the folder that is missing, or the folder given."""
    with pytest.raises(FileNotFoundError, match=f"the folder {tmp_path / 'nowhere'} does not"):
        atomic.write_text(tmp_path / "nowhere" / "s.json", "{}")
    with pytest.raises(IsADirectoryError, match="is a folder; expected a file name"):
        atomic.write_text(tmp_path, "{}")
    assert not list(tmp_path.iterdir())  # nothing left behind

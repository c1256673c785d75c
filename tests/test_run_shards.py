"""The shard runner behind `make test`: balanced shards; a failed or lost shard fails the run."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_shards  # noqa: E402  (a script in tests/, imported by path)

PASSING = "def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    assert 'a' < 'b'\n"
FAILING = "def test_fails():\n    assert 1 + 1 == 3\n"
NO_TEST = "def helper():\n    return 1\n"
EXTRA_MISSING = "import pytest\n\npytest.importorskip('no_such_extra_xyz', reason='no extra')\n"
VANISHES = "import os\n\ndef test_exits():\n    os._exit(0)  # status 0, and no report\n"


@pytest.fixture(autouse=True)
def _no_plugin_autoload(monkeypatch):
    """The fake suites' pytest processes load no installed plugin: they need none, and loading
    them (PyQt6, hypothesis, the project's own) took about 2 of each process's 2.5 s here."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def fake_suite(tmp_path: Path, files: dict[str, str]) -> list[run_shards.Shard]:
    """Write tests/<name> files under tmp_path; one shard per file, in the given order."""
    (tmp_path / "tests").mkdir()
    for name, text in files.items():
        (tmp_path / "tests" / name).write_text(text)
    return [run_shards.Shard(i + 1, [f"tests/{name}"]) for i, name in enumerate(files)]


def test_split_balances_by_time_longest_first():
    times = {"a": 10.0, "b": 7.0, "c": 5.0, "d": 4.0, "e": 1.0}
    shards = run_shards.split(sorted(times), times, 2)
    assert [s.files for s in shards] == [["a", "d"], ["b", "c", "e"]]
    assert [s.expected_s for s in shards] == [14.0, 13.0]
    assert sorted(f for s in shards for f in s.files) == sorted(times)  # each file exactly once
    assert run_shards.split(["new"], {}, 2)[0].expected_s == run_shards.UNKNOWN_FILE_S
    with pytest.raises(ValueError, match="shards must be at least 1"):
        run_shards.split(["a"], times, 0)


def test_two_passing_shards_pass_and_are_counted(tmp_path, capsys):
    shards = fake_suite(tmp_path, {"test_a.py": PASSING, "test_b.py": PASSING})
    assert run_shards.run(shards, [], root=tmp_path) == 0
    assert [s.counts["passed"] for s in shards] == [2, 2]
    out = capsys.readouterr().out
    assert "[1] " in out and "[2] " in out  # both shards' lines, each marked
    assert "passed: 2 shards, 4 tests in all" in out


def test_one_failing_shard_fails_the_run(tmp_path, capsys):
    shards = fake_suite(tmp_path, {"test_a.py": PASSING, "test_b.py": FAILING})
    assert run_shards.run(shards, [], root=tmp_path) == 1
    assert shards[1].counts["failed"] == 1
    out = capsys.readouterr().out
    assert "shard 2 (1 files): 1 tests: 0 passed, 1 failed" in out
    summary = out.split("==== shards ====")[1]  # the failed test is named again at the very end
    assert "failed tests.test_b::" in summary and "assert" in summary


def test_a_shard_that_runs_no_test_fails_the_run(tmp_path, capsys):
    shards = fake_suite(tmp_path, {"test_a.py": PASSING, "test_b.py": NO_TEST})
    assert run_shards.run(shards, [], root=tmp_path) == 1
    assert "exited with status 5" in capsys.readouterr().out  # pytest: nothing collected


def test_a_file_that_runs_no_test_fails_the_run(tmp_path, capsys):
    shards = fake_suite(tmp_path, {"test_a.py": PASSING, "test_b.py": NO_TEST})
    shards = [run_shards.Shard(1, shards[0].files + shards[1].files)]
    assert run_shards.run(shards, [], root=tmp_path) == 1
    assert "no test ran from tests/test_b.py" in capsys.readouterr().out


def test_a_file_skipped_whole_for_a_missing_extra_has_run(tmp_path, capsys):
    """`make test` without the triton/docs extras: such a file reports one skip, and passes."""
    shards = fake_suite(tmp_path, {"test_a.py": PASSING, "test_b.py": EXTRA_MISSING})
    shards = [run_shards.Shard(1, shards[0].files + shards[1].files)]
    assert run_shards.run(shards, [], root=tmp_path) == 0
    assert shards[0].counts["skipped"] == 1 and "tests/test_b.py" in shards[0].seconds_per_file
    assert "passed: 1 shards, 3 tests in all" in capsys.readouterr().out


def test_a_lost_report_fails_the_run(tmp_path, capsys):
    """A shard whose process ends early with status 0 and no report cannot pass."""
    shards = fake_suite(tmp_path, {"test_a.py": PASSING, "test_b.py": VANISHES})
    assert run_shards.run(shards, [], root=tmp_path) == 1
    assert shards[1].returncode == 0
    assert "no readable test report" in capsys.readouterr().out


def test_a_path_argument_is_refused_not_run_twice(capsys, monkeypatch):
    def no_run(shards, pytest_args):
        raise AssertionError(f"the suite would have run with {pytest_args}")

    monkeypatch.setattr(run_shards, "run", no_run)  # a broken guard fails here, runs nothing
    assert run_shards.main(["tests/test_run_shards.py"]) == 2
    assert run_shards.main(["tests/test_run_shards.py::test_a_lost_report_fails_the_run"]) == 2
    assert run_shards.main(["tests/"]) == 2
    assert "python -m pytest tests/test_run_shards.py" in capsys.readouterr().out
    assert not run_shards._is_test_path("tests")  # `-k tests` is an expression, not a path

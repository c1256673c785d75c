"""Each shell block of README.md and docs/ marked runnable runs and exits 0.

The mark is an HTML comment on the line right before a ```sh (or ```bash) fence:
`<!-- runnable -->`, which the repository host and the site both leave unseen. Each marked block
runs with bash -e -o pipefail (the first failing command fails it) in a fresh temporary folder,
the repository first on PYTHONPATH and this interpreter's folder first on PATH (so `python` is
the venv's). Mark only cheap, safe commands (seconds each; no installs, no `make test`)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import ROOT, name, pages

MARKER = "<!-- runnable -->"
BLOCK = re.compile(r"^<!-- runnable -->\n```(?:sh|bash)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def runnable_blocks(text: str, page: str = "page") -> list[tuple[int, str]]:
    """(the fence's line, body) of every marked block; ValueError for a mark that is not right
    before a ```sh or ```bash fence."""
    found = [(text[: m.start()].count("\n") + 2, m.group(1)) for m in BLOCK.finditer(text)]
    marks = re.findall(rf"^{re.escape(MARKER)}$", text, re.MULTILINE)  # a line of its own
    if len(marks) != len(found):
        raise ValueError(f"{page}: {MARKER} must stand right before a ```sh or ```bash fence")
    return found


def run_block(body: str, folder: Path) -> subprocess.CompletedProcess:
    """The block run by bash in `folder` with the repository importable and the venv's python."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", body], cwd=folder, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def every_block() -> list:
    """One param per marked block of every page, its id the page and the fence's line."""
    return [
        pytest.param(body, id=f"{name(page)} line {line}")
        for page in pages()
        for line, body in runnable_blocks(page.read_text(encoding="utf-8"), name(page))
    ]


def test_the_marker_finds_only_marked_shell_blocks():
    text = (
        "x\n<!-- runnable -->\n```sh\necho one\n```\n```sh\necho unmarked\n```\n"
        "<!-- runnable -->\n```bash\necho two\n```\n"
    )
    assert runnable_blocks(text) == [(3, "echo one\n"), (10, "echo two\n")]
    with pytest.raises(ValueError, match="right before"):
        runnable_blocks("<!-- runnable -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="right before"):
        runnable_blocks("<!-- runnable -->\n\n```sh\necho gap\n```\n")
    assert runnable_blocks("the mark is `<!-- runnable -->`, on a line of its own\n") == []


def test_a_failing_command_fails_the_block(tmp_path):
    assert run_block("python -c 'import scratch'\n", tmp_path).returncode == 0
    assert run_block("false\necho after\n", tmp_path).returncode != 0  # -e: the first one
    assert run_block("false | cat\n", tmp_path).returncode != 0  # pipefail
    assert run_block("python -m scratch no-such-preset\n", tmp_path).returncode != 0


def test_the_venvs_python_comes_first(tmp_path):
    done = run_block("python -c 'import sys; print(sys.executable)'\n", tmp_path)
    assert Path(done.stdout.strip()).parent == Path(sys.executable).parent


def test_the_pages_mark_runnable_blocks():
    assert len(every_block()) >= 3


@pytest.mark.parametrize("body", every_block())
def test_each_runnable_block_runs(body, tmp_path):
    done = run_block(body, tmp_path)
    assert done.returncode == 0, (
        f"exit status {done.returncode}:\n{body}\n{(done.stdout + done.stderr)[-2000:]}"
    )

"""docs/reference/cli.md shows each command line's --help as the code prints it today.
`python tests/test_docs_cli.py` writes the page again after a command's options change."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"
COMMANDS = [  # (what it does, the command as a reader types it)
    ("The window", "python main.py"),
    ("The terminal trace", "python -m scratch"),
    ("Check your kernel", "python -m scratch.check"),
    ("A real model's next tokens", "python -m scratch.models"),
    ("Train the tiny transformer", "python -m scratch.train"),
    ("The benchmark", "python -m scratch.bench"),
]
WRITTEN_BY = (3, 11)  # argparse's layout changes between Pythons (3.13 words its options anew)
INTRO = (
    "# Command lines\n\nEach entry point's `--help`, as it prints at 100 columns on Python 3.11 "
    "(tests/test_docs_cli.py keeps this page equal to it; `python tests/test_docs_cli.py` "
    "writes it again).\n"
)
SAME_PYTHON = pytest.mark.skipif(
    sys.version_info[:2] != WRITTEN_BY,
    reason="docs/reference/cli.md holds Python 3.11's --help layout; this is another Python",
)


def help_text(command: str) -> str:
    """What `command --help` prints, run from the repository root at 100 columns."""
    argv = [sys.executable, *command.split()[1:], "--help"]
    env = {**os.environ, "COLUMNS": "100", "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout.rstrip() + "\n"


def section(title: str, command: str, text: str) -> str:
    """One command's part of the page."""
    return f"\n## {title}\n\n```text\n$ {command} --help\n{text}```\n"


def page() -> str:
    """The whole page, every command's --help run now."""
    return INTRO + "".join(section(t, c, help_text(c)) for t, c in COMMANDS)


@SAME_PYTHON
def test_a_changed_option_shows_as_a_difference():
    shown = section("The terminal trace", "python -m scratch", help_text("python -m scratch"))
    assert shown in PAGE.read_text(encoding="utf-8")
    assert section("The terminal trace", "python -m scratch", "usage: planted\n") != shown


@SAME_PYTHON
@pytest.mark.parametrize("title, command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_the_page_shows_each_commands_help(title, command):
    want = section(title, command, help_text(command))
    assert want in PAGE.read_text(encoding="utf-8"), (
        f"docs/reference/cli.md differs from `{command} --help`: run python tests/test_docs_cli.py"
    )


if __name__ == "__main__":
    PAGE.write_text(page(), encoding="utf-8")
    print(f"wrote {PAGE}")

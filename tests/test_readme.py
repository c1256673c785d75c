"""Every ```python block of the README runs as printed, top to bottom, in one namespace."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fences, in order."""
    return BLOCK.findall(text)


def test_the_readme_has_python_blocks_and_the_extractor_finds_them():
    text = "intro\n```python\na = 1\n```\n```sh\nls\n```\n```python\nb = a + 1\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = a + 1\n"]
    readme = README.read_text(encoding="utf-8")
    assert len(python_blocks(readme)) >= 3
    # an indented fence (inside a list item) is skipped by the extractor, so none may exist
    assert readme.count("```python") == len(python_blocks(readme)), "an indented ```python fence"


def test_every_python_block_runs_in_order(tmp_path, monkeypatch):
    pytest.importorskip("numpy")  # the backends and checker blocks use NumPy
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    namespace: dict = {"__name__": "readme"}
    for n, block in enumerate(python_blocks(README.read_text(encoding="utf-8")), 1):
        try:
            exec(compile(block, f"README.md python block {n}", "exec"), namespace)
        except Exception as exc:  # name the block that broke, with its first line
            first = block.strip().splitlines()[0]
            pytest.fail(f"README python block {n} ({first!r}) raised {type(exc).__name__}: {exc}")

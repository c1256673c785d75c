"""Every ```python block of README.md and of each docs/**/*.md page runs as printed and on its own:
each in a fresh namespace, as a reader pastes it into a new interpreter (its imports and names its
own). A block followed
directly by a ```text block prints that text: words exactly, each number to the last digit shown
(give or take one unit of it: another host's BLAS may round a float32 sum the other way)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import DOCS, README, ROOT, name, pages

BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
TRITON = re.compile(r"^(import|from) triton\b", re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fences, in order."""
    return BLOCK.findall(text)


def test_the_pages_have_python_blocks_and_the_extractor_finds_them():
    text = "intro\n```python\na = 1\n```\n```sh\nls\n```\n```python\nb = a + 1\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = a + 1\n"]
    docs = [page.read_text(encoding="utf-8") for page in pages() if page != README]
    assert sum(len(python_blocks(text)) for text in docs) >= 20
    for page in pages():
        # an indented fence (inside a list item) is skipped by the extractor, so none may exist
        text = page.read_text(encoding="utf-8")
        assert text.count("```python") == len(python_blocks(text)), f"{name(page)}: indented"


def numbered_blocks(page: Path) -> list[tuple[int, int, str, str | None]]:
    """(block number, the page's line of its fence, body, the ```text block right after or
    None)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for n, m in enumerate(BLOCK.finditer(text), 1):
        shown = OUTPUT.match(text, m.end())
        line = text[: m.start()].count("\n") + 1
        found.append((n, line, m.group(1), shown.group(1) if shown else None))
    return found


def every_block() -> list:
    """One pytest param per python block of every page, its id the page and the fence's line."""
    return [
        pytest.param(name(page), n, b, o, id=f"{name(page)} line {line}")
        for page in pages()
        for n, line, b, o in numbered_blocks(page)
    ]


OUTPUT = re.compile(r"\n*```text\n(.*?)^```", re.DOTALL | re.MULTILINE)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def same_output(printed: str, shown: str) -> str | None:
    """None when `printed` reads as `shown` (words equal, numbers within one unit of the last
    digit shown); else what differs."""
    words_p, words_s = NUMBER.split(printed.strip()), NUMBER.split(shown.strip())
    if words_p != words_s:
        return f"the words differ:\nprinted: {printed.strip()!r}\nshown:   {shown.strip()!r}"
    for got, want in zip(NUMBER.findall(printed), NUMBER.findall(shown)):
        digits = len(want.split(".")[1]) if "." in want else 0
        unit = 10.0**-digits
        if abs(float(got.replace(",", "")) - float(want.replace(",", ""))) > unit * 1.0001:
            return f"printed {got} where the page shows {want}"
    return None


def run_alone(n: int, block: str, tmp_path, monkeypatch, page: str = "README.md") -> None:
    """exec one block in a fresh namespace named __main__, in tmp_path (a file it writes goes
    there); a failure names the page, the block and its first line."""
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(block, f"{page} python block {n}", "exec"), {"__name__": "__main__"})
    except Exception as exc:
        first = block.strip().splitlines()[0]
        pytest.fail(f"{page} python block {n} ({first!r}) raised {type(exc).__name__}: {exc}")


def run_in_a_child(n: int, block: str, tmp_path, page: str = "README.md") -> str:
    """Run one block as a script in a child process: a block that imports triton sets
    TRITON_INTERPRET before triton's first import (here it would stay on for every later test)
    and needs its kernels in a file (Triton reads their source). Returns what it printed."""
    path = tmp_path / f"page_block_{n}.py"
    path.write_text(block, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        first = block.strip().splitlines()[0]
        pytest.fail(f"{page} python block {n} ({first!r}) failed:\n{done.stderr[-2000:]}")
    return done.stdout


def test_a_block_that_leans_on_an_earlier_one_fails_alone(tmp_path, monkeypatch):
    """The runner's own check: a name an earlier block defined is not there for the next."""
    run_alone(1, "x = 1\n", tmp_path, monkeypatch)
    with pytest.raises(pytest.fail.Exception, match=r"block 2 \('y = x'\) raised NameError"):
        run_alone(2, "y = x\n", tmp_path, monkeypatch)


def test_a_block_run_in_a_child_fails_when_it_raises(tmp_path):
    """The child runner's own check: its exit status counts, and a block is matched by import."""
    run_in_a_child(1, "import os\n", tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"block 2 \('x = 1'\) failed"):
        run_in_a_child(2, "x = 1\nraise ValueError('planted')\n", tmp_path)
    assert TRITON.search("import os\nimport triton\n") and not TRITON.search("# import triton")


def test_the_output_comparison_reads_numbers_to_their_last_digit():
    assert same_output("loss 1.91 at step 375\n", "loss 1.92 at step 375") is None
    assert "printed 1.89 where the page shows 1.91" in same_output(
        "loss 1.89 at step 375", "loss 1.91 at step 375"
    )
    assert same_output("loss 1.91 at step 377", "loss 1.91 at step 375") is not None
    assert "the words differ" in same_output("loss 1.91 at stop 375", "loss 1.91 at step 375")


def test_a_failure_names_the_page(tmp_path, monkeypatch):
    with pytest.raises(pytest.fail.Exception, match=r"docs/x.md python block 3 \('y = x'\)"):
        run_alone(3, "y = x\n", tmp_path, monkeypatch, page="docs/x.md")
    assert DOCS.is_dir() and README.is_file()


@pytest.mark.parametrize("page, n, block, shown", every_block())
def test_each_python_block_runs_on_its_own(page, n, block, shown, tmp_path, monkeypatch, capsys):
    pytest.importorskip("numpy")  # the backends and checker blocks use NumPy
    pytest.importorskip("torch")
    capsys.readouterr()
    if TRITON.search(block):  # the optional extra: `make triton`
        pytest.importorskip("triton", reason="the optional triton extra is not installed")
        printed = run_in_a_child(n, block, tmp_path, page)
    else:
        run_alone(n, block, tmp_path, monkeypatch, page)
        printed = capsys.readouterr().out
    if shown is not None:
        differs = same_output(printed, shown)
        assert differs is None, f"{page} python block {n} prints other than its text: {differs}"

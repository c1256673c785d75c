"""Every ```python block of the README runs as printed and on its own: each in a fresh namespace,
as a reader pastes it into a new interpreter (its imports and names its own). A block followed
directly by a ```text block prints that text: words exactly, each number to the last digit shown
(give or take one unit of it: another host's BLAS may round a float32 sum the other way)."""

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


def numbered_blocks() -> list[tuple[int, int, str, str | None]]:
    """(block number, README line of its fence, body, the ```text block right after or None)."""
    text = README.read_text(encoding="utf-8")
    found = []
    for n, m in enumerate(BLOCK.finditer(text), 1):
        shown = OUTPUT.match(text, m.end())
        line = text[: m.start()].count("\n") + 1
        found.append((n, line, m.group(1), shown.group(1) if shown else None))
    return found


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
            return f"printed {got} where the README shows {want}"
    return None


def run_alone(n: int, block: str, tmp_path, monkeypatch) -> None:
    """exec one block in a fresh namespace named __main__, in tmp_path (a file it writes goes
    there); a failure names the block and its first line."""
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(block, f"README.md python block {n}", "exec"), {"__name__": "__main__"})
    except Exception as exc:
        first = block.strip().splitlines()[0]
        pytest.fail(f"README python block {n} ({first!r}) raised {type(exc).__name__}: {exc}")


def test_a_block_that_leans_on_an_earlier_one_fails_alone(tmp_path, monkeypatch):
    """The runner's own check: a name an earlier block defined is not there for the next."""
    run_alone(1, "x = 1\n", tmp_path, monkeypatch)
    with pytest.raises(pytest.fail.Exception, match=r"block 2 \('y = x'\) raised NameError"):
        run_alone(2, "y = x\n", tmp_path, monkeypatch)


def test_the_output_comparison_reads_numbers_to_their_last_digit():
    assert same_output("loss 1.91 at step 375\n", "loss 1.92 at step 375") is None
    assert "printed 1.89 where the README shows 1.91" in same_output(
        "loss 1.89 at step 375", "loss 1.91 at step 375"
    )
    assert same_output("loss 1.91 at step 377", "loss 1.91 at step 375") is not None
    assert "the words differ" in same_output("loss 1.91 at stop 375", "loss 1.91 at step 375")


@pytest.mark.parametrize(
    "n, block, shown",
    [pytest.param(n, b, o, id=f"block {n} line {line}") for n, line, b, o in numbered_blocks()],
)
def test_each_python_block_runs_on_its_own(n, block, shown, tmp_path, monkeypatch, capsys):
    pytest.importorskip("numpy")  # the backends and checker blocks use NumPy
    pytest.importorskip("torch")
    capsys.readouterr()
    run_alone(n, block, tmp_path, monkeypatch)
    if shown is not None:
        differs = same_output(capsys.readouterr().out, shown)
        assert differs is None, f"README python block {n} prints other than its text: {differs}"

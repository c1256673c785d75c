"""Every public function and class has a docstring the Reference can show: a one-line summary,
and every argument of its signature under `Args:` (a record's fields under `Attributes:`),
parsed as mkdocs.yml's docstring_style (google) by griffe, the parser mkdocstrings uses; no
entry names an argument the signature lacks; and each `Examples:` block runs (doctest).
The public names: scratch.__all__, and scratch.models', scratch.variants' and scratch.checker's
__all__ (the Reference's pages). Skipped without griffe (the docs extra: `make docs`)."""

import doctest
import importlib
import inspect
import logging
from collections.abc import Callable

import pytest
from docs_pages import ROOT

griffe = pytest.importorskip("griffe", reason="the docs extra is not installed")

PUBLIC_MODULES = ("scratch", "scratch.models", "scratch.variants", "scratch.checker")
STYLE = "google"  # mkdocs.yml: docstring_style
ARGUMENTS = {"parameters", "other parameters"}
FIELDS = {"attributes"}


def test_the_style_is_the_sites():
    assert f"docstring_style: {STYLE}" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def public_objects() -> dict[str, object]:
    """{module.name: object} of every public function and class, each object once."""
    found: dict[str, object] = {}
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not callable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            found[f"{module_name}.{name}"] = obj
    return found


def arguments(obj: object) -> list[str]:
    """The names of obj's arguments (a class's: its constructor's), `*args` and `**kw` bare;
    none for a class that keeps a builtin's constructor (an exception)."""
    try:
        signature = inspect.signature(obj)
    except ValueError:  # a builtin's constructor: nothing of the project's to document
        return []
    return [name for name in signature.parameters if name not in ("self", "cls")]


def sections(doc: str) -> list:
    """griffe's google sections of a docstring (warnings off: the names are checked here)."""
    logging.getLogger("griffe").disabled = True
    try:
        return griffe.Docstring(inspect.cleandoc(doc), parser=STYLE).parse()
    finally:
        logging.getLogger("griffe").disabled = False


def documented(doc: str, kinds: set[str]) -> list[str]:
    """The names the docstring's sections of these kinds document, `*` and `**` stripped."""
    names = []
    for section in sections(doc):
        if section.kind.value in kinds:
            names += [entry.name.lstrip("*") for entry in section.value]
    return names


def problems(name: str, obj: object) -> list[str]:
    """What the Reference would lack for obj: its docstring, its one-line summary, an argument
    undocumented, or an entry naming no argument."""
    doc = obj.__doc__
    if not doc or not doc.strip():
        return [f"{name}: no docstring"]
    lines = inspect.cleandoc(doc).splitlines()
    found = []
    if len(lines) > 1 and lines[1].strip():
        found.append(f"{name}: the first line is not a one-line summary")
    kinds = ARGUMENTS | FIELDS if inspect.isclass(obj) else ARGUMENTS
    have, want = documented(doc, kinds), arguments(obj)
    found += [f"{name}: argument {arg!r} is not documented" for arg in want if arg not in have]
    found += [f"{name}: documents {arg!r}, not an argument" for arg in have if arg not in want]
    return found


def test_a_planted_gap_is_found():
    def f(query: object, key: object, *more: object) -> None:
        """One line.

        Args:
            query: q (L, E).
            *more: the rest.
        """

    assert problems("f", f) == ["f: argument 'key' is not documented"]
    f.__doc__ = f.__doc__.replace("*more", "*others")
    assert "f: documents 'others', not an argument" in problems("f", f)
    f.__doc__ = "Two lines\nof summary."
    assert problems("f", f)[0] == "f: the first line is not a one-line summary"
    f.__doc__ = None
    assert problems("f", f) == ["f: no docstring"]


def test_a_records_fields_count_as_attributes():
    class Record:
        """One line.

        Attributes:
            x: the input (L, d_model).
        """

        def __init__(self, x: object) -> None:
            self.x = x

    assert problems("Record", Record) == []
    assert problems("f", lambda x: x) == ["f: no docstring"]


def test_the_walk_finds_the_public_api():
    pytest.importorskip("numpy")
    found = public_objects()
    for expected in ("scratch.scaled_dot_product_attention", "scratch.models.load",
                     "scratch.variants.SlidingWindow", "scratch.checker.Case"):  # fmt: skip
        assert expected in found
    assert len(found) > 90


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_documents_its_arguments(module_name):
    pytest.importorskip("numpy")  # scratch.models and scratch.checker need it
    found = [
        problem
        for name, obj in public_objects().items()
        if name.rpartition(".")[0] == module_name
        for problem in problems(name, obj)
    ]
    assert not found, f"{len(found)} gaps in the Reference:\n" + "\n".join(found)


def examples(obj: Callable) -> list[doctest.DocTest]:
    """The doctests of obj's own docstring (its Examples: block)."""
    finder = doctest.DocTestFinder(recurse=False)
    return [test for test in finder.find(obj, obj.__name__, globs={}) if test.examples]


def test_the_examples_run():
    pytest.importorskip("numpy")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [test for obj in public_objects().values() for test in examples(obj)]
    assert len(tests) >= 10, "the public API's Examples: blocks"
    for test in tests:
        result = runner.run(test, out=lambda text: None)
        assert result.failed == 0, f"{test.name}: {result.failed} example(s) failed"


def test_a_wrong_example_fails():
    def f() -> None:
        """One line.

        Examples:
            >>> 1 + 1
            3
        """

    runner = doctest.DocTestRunner()
    (test,) = examples(f)
    assert runner.run(test, out=lambda text: None).failed == 1

"""Every public function and class has a docstring the Reference can show: a one-line summary,
and every argument of its signature under `Args:` (a record's fields under `Attributes:`),
parsed as mkdocs.yml's docstring_style (google) by griffe, the parser mkdocstrings uses; no
entry names an argument the signature lacks; and each `Examples:` block runs (doctest).
The public names: scratch.__all__, and scratch.models', scratch.variants' and scratch.checker's
__all__ (the Reference's pages). Their classes' public methods too (those defined in the class's
own body; a staticmethod or classmethod unwrapped; a property: a docstring only). A method that
overrides one a project base class documents (a variant's `rule`, `why`, `check`, ...: Variant's)
may have no docstring of its own when the base's entry documents its arguments (inspect.getdoc
inherits it, the Reference shows the base's entry): the words are written once, not per variant.
Variant's `mask_mod` and `score_mod` are None there ("no such mod"): their entries are those of
the protocols they are annotated with (MaskMod, ScoreMod). A method with a docstring of its own
documents every argument itself. Skipped without griffe (the docs extra: `make docs`)."""

import doctest
import importlib
import inspect
import logging
import typing
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


def public_methods() -> dict[str, object]:
    """{module.Class.method: function or property} of the public classes' public methods, each
    defined in the class's own body."""
    found: dict[str, object] = {}
    for name, obj in public_objects().items():
        if not inspect.isclass(obj):
            continue
        for method_name, member in vars(obj).items():
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if not method_name.startswith("_") and (
                inspect.isfunction(member) or isinstance(member, property)
            ):
                found[f"{name}.{method_name}"] = member
    return found


def base_entry(cls: type, name: str) -> Callable | None:
    """The nearest project base of cls that documents `name`: its method of that name, or the
    documented `__call__` of the protocol it annotates `name` with (Variant.mask_mod: MaskMod)."""
    for base in cls.__mro__[1:]:
        if not base.__module__.startswith("scratch") or name not in vars(base):
            continue
        member = vars(base)[name]
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) and member.__doc__:
            return member
        hint = typing.get_type_hints(base).get(name)
        for kind in typing.get_args(hint) or (hint,):
            call = vars(kind).get("__call__") if isinstance(kind, type) else None
            if inspect.isfunction(call) and call.__doc__:
                return call
    return None


def method_problems(name: str, method: object, owner: type) -> list[str]:
    """problems() of a method (a property: its docstring only); one without a docstring uses
    its base's entry (base_entry), which must document the same arguments."""
    if isinstance(method, property):

        def getter() -> None: ...

        getter.__doc__ = method.__doc__
        return problems(name, getter)
    if method.__doc__:
        return problems(name, method)
    short = name.rpartition(".")[2]
    entry = base_entry(owner, short)
    if entry is None:
        return [f"{name}: no docstring (and no project base documents {short!r})"]
    have, want = documented(entry.__doc__, ARGUMENTS), arguments(method)
    return [
        f"{name}: argument {arg!r} is not in its base's entry" for arg in want if arg not in have
    ]


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


def test_an_override_uses_its_bases_entry():
    class Base:
        def why(self, q_idx: int, kv_idx: int) -> str:
            """One line.

            Args:
                q_idx: the query's row i.
                kv_idx: the key's column j.
            """
            return ""

    class Override(Base):
        def why(self, q_idx: int, kv_idx: int) -> str:
            return ""

        def rule(self) -> str:
            return ""

    Base.__module__ = Override.__module__ = "scratch.planted"
    assert method_problems("Override.why", Override.why, Override) == []
    assert method_problems("Override.rule", Override.rule, Override) == [
        "Override.rule: no docstring (and no project base documents 'rule')"
    ]
    Base.why.__doc__ = Base.why.__doc__.replace("kv_idx: the", "key: the")
    assert method_problems("Override.why", Override.why, Override) == [
        "Override.why: argument 'kv_idx' is not in its base's entry"
    ]


def test_the_variants_mods_have_entries():
    pytest.importorskip("numpy")
    from scratch.variants import Causal, Softcap

    assert base_entry(Causal, "mask_mod").__qualname__ == "MaskMod.__call__"
    assert base_entry(Softcap, "score_mod").__qualname__ == "ScoreMod.__call__"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_method_documents_its_arguments(module_name):
    pytest.importorskip("numpy")
    objects = public_objects()
    found = [
        problem
        for name, method in public_methods().items()
        if name.split(".")[0 : name.count(".") - 1] == module_name.split(".")
        for problem in method_problems(name, method, objects[name.rpartition(".")[0]])
    ]
    assert not found, f"{len(found)} gaps in the Reference's methods:\n" + "\n".join(found)


def examples(obj: Callable) -> list[doctest.DocTest]:
    """The doctests of obj's own docstring (its Examples: block)."""
    finder = doctest.DocTestFinder(recurse=False)
    return [test for test in finder.find(obj, obj.__name__, globs={}) if test.examples]


def test_the_examples_run():
    pytest.importorskip("numpy")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    methods = [m for m in public_methods().values() if inspect.isfunction(m)]
    objects = [*public_objects().values(), *methods]
    tests = [test for obj in objects for test in examples(obj)]
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

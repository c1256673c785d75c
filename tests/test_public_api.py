"""The window (gui/, main.py) imports only scratch's public API, read from the sources (ast).

Public: the names in `scratch.__all__` and in the `__all__` of scratch's public modules: its
subpackages (backends, bench, checker, models, variants), the presets, the registry of steps,
and the modules the README names for the window's bounds and the Learn tab (weights_tolerance,
variant_rows, why, online_softmax, mistakes). Anything else is scratch's inside: the window
asks scratch to make a name public rather than reaching in.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = (
    "scratch",
    "scratch.backends",
    "scratch.bench",
    "scratch.checker",
    "scratch.models",
    "scratch.learn.presets",
    "scratch.trace.steps",
    "scratch.variants",
    "scratch.bounds.weights_tolerance",
    "scratch.trace.variant_rows",
    "scratch.learn.why",
    "scratch.learn.online_softmax",
    "scratch.learn.mistakes",
    "scratch.ops.atomic",
    "scratch.train",
    "scratch.train.words",
    "scratch.train.run_file",
    "scratch.train.tasks",
)
# the benchmark's plugin (`python -m scratch.bench --plugin gui.app.bench_window`), not the window:
# it measures the window with scratch.bench's own host and statistics
NOT_THE_WINDOW = {"gui/app/bench_window.py"}


def public_names(module: str) -> set[str]:
    """The names `module` makes public: its __all__ plus its public submodules."""
    found = importlib.import_module(module)
    names = getattr(found, "__all__", None)
    if names is None:
        raise AssertionError(f"{module}: a public module needs an __all__")
    subs = {m.rpartition(".")[2] for m in PUBLIC_MODULES if m.rpartition(".")[0] == module}
    return set(names) | subs


def private_uses(source: str, where: str = "<source>") -> list[str]:
    """'line: what' for every use of scratch outside its public API in `source`: a private
    module imported, a name not in a public module's __all__ imported or read as an attribute."""
    tree = ast.parse(source, where)
    bound: dict[str, str] = {}  # local name -> the public module it is
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "scratch":
                    continue
                if alias.name not in PUBLIC_MODULES:
                    found.append(f"{node.lineno}: import {alias.name}")
                elif alias.asname or "." not in alias.name:
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scratch":
            modules = {f"{node.module}.{alias.name}" for alias in node.names}
            if not node.level and modules <= set(PUBLIC_MODULES):  # `from scratch.learn import why`
                bound.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
                continue
            if node.level or node.module not in PUBLIC_MODULES:
                found.append(f"{node.lineno}: from {node.module} import ...")
                continue
            public = public_names(node.module)
            for alias in node.names:
                if alias.name not in public:
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                elif f"{node.module}.{alias.name}" in PUBLIC_MODULES:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = bound.get(node.value.id)
            if module is not None and node.attr not in public_names(module):
                found.append(f"{node.lineno}: {node.value.id}.{node.attr} ({module})")
    return found


def window_sources() -> list[Path]:
    """Every module of the window: gui/ and main.py."""
    return [ROOT / "main.py", *sorted((ROOT / "gui").rglob("*.py"))]


def test_the_window_imports_only_scratch_s_public_api():
    bad = {}
    for path in window_sources():
        where = str(path.relative_to(ROOT))
        if where in NOT_THE_WINDOW:
            continue
        uses = private_uses(path.read_text(encoding="utf-8"), where)
        if uses:
            bad[where] = uses
    assert not bad, "the window reaches into scratch:\n" + "\n".join(
        f"{w}: {u}" for w, found in bad.items() for u in found
    )


@pytest.mark.parametrize(
    "source, named",
    [
        ("from scratch.trace.compare import StepCheck\n", "from scratch.trace.compare import"),
        ("import scratch.ops.plan\n", "import scratch.ops.plan"),
        ("import scratch\nscratch.plan.plan_multi_head\n", "scratch.plan (scratch)"),
        ("from scratch import backends\nbackends.numpy_backend\n", "backends.numpy_backend"),
        ("def f():\n    from scratch.variants import causal\n", "import causal"),
        ("from scratch import trace_example_private\n", "import trace_example_private"),
    ],
)
def test_a_planted_private_use_is_found(source, named):
    found = private_uses(source)
    assert len(found) == 1 and named in found[0], found


def test_public_uses_pass():
    source = (
        "import scratch\nfrom scratch import backends, Options\nfrom scratch.variants import "
        "VariantChoice\nscratch.explain\nbackends.get\nimport scratch.models as m\nm.load\n"
    )
    assert private_uses(source) == []

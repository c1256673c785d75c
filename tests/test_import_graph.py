"""Who imports whom, read from the sources (ast): no import cycle among scratch's and gui's
modules, lazy imports inside functions included (a lazy import hides a cycle, it does not
remove one); imports under `if TYPE_CHECKING:` are left out (they never run: annotations only).
What of scratch the window may import: tests/test_public_api.py."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scratch", "gui")


def module_name(path: Path) -> str:
    """scratch/backends/numpy_backend.py -> scratch.backends.numpy_backend; an __init__.py names
    its package; main.py -> main."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    """{module name: path} of every module of scratch and gui, and main.py."""
    found = {"main": ROOT / "main.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` reads from (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        name = getattr(test, "id", None) or getattr(test, "attr", None)
        if isinstance(node, ast.If) and name == "TYPE_CHECKING":
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def imports_of(module: str, path: Path, known: set[str], annotations: bool = False) -> set[str]:
    """The project modules `module` imports anywhere in its source (functions included; those
    under `if TYPE_CHECKING:` too when `annotations`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped = set() if annotations else _type_checking_only(tree)
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(node, module, path.name == "__init__.py")
            # `from scratch import backends` reads the submodule; `from scratch import x` the
            # package's name x
            subs = (f"{base}.{alias.name}" for alias in node.names)
            targets = [sub if sub in known else base for sub in subs]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.name`: the module a.b
                target = target.rpartition(".")[0]
            if target and target != module:
                out.add(target)
    return out


def import_graph(annotations: bool = False) -> dict[str, set[str]]:
    """{module: the project modules it imports} (type-checking imports too when `annotations`)."""
    found = sources()
    known = set(found)
    return {name: imports_of(name, path, known, annotations) for name, path in found.items()}


def reached(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module `module` imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, sorted for a stable
    answer)."""
    state: dict[str, str] = {}  # "open" on the current path, "done" when fully explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# A model's text: the forward, a run, the one decode step, generation, the model; each imports
# only modules before it. An import made for annotations alone counts here: run.py's
# `if TYPE_CHECKING: from .model import Model` closed the circle run -> model -> generate -> run.
MODEL_LAYERS = ("llama", "run", "decoding", "model")


def test_run_decoding_generate_and_model_are_layers_annotations_included():
    graph = import_graph(annotations=True)
    names = [f"scratch.models.{name}" for name in MODEL_LAYERS]
    for i, low in enumerate(names):
        up = reached(graph, low) & set(names[i + 1 :])
        assert not up, f"{low} imports {sorted(up)}, above it (layers: {', '.join(MODEL_LAYERS)})"
    models = {m: graph[m] for m in graph if m.startswith("scratch.models")}
    cycle = find_cycle(models)
    assert cycle is None, "import cycle in scratch.models: " + " -> ".join(cycle)


def test_the_graph_reads_relative_lazy_and_package_imports(tmp_path):
    graph = import_graph()
    assert "scratch.learn.why" in graph["gui.present.learn_model"]  # lazy, in a function
    assert "scratch.ops.plan" in graph["scratch.backends.numpy_backend"]  # `from a.b import`
    assert "scratch.backends" in graph["gui.state.controller"]  # `from scratch import backends`
    # the project's imports are absolute; a relative one is read all the same
    known = {"pkg", "pkg.sub", "pkg.sub.one", "pkg.sub.two", "pkg.other"}
    path = tmp_path / "one.py"
    path.write_text("from .two import x\nfrom ..other import y\nfrom . import two\n")
    assert imports_of("pkg.sub.one", path, known) == {"pkg.sub.two", "pkg.other"}
    init = tmp_path / "__init__.py"
    init.write_text("from .one import z\n")
    assert imports_of("pkg.sub", init, known) == {"pkg.sub.one"}


def test_find_cycle_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_imports_for_type_checking_only_are_left_out(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nimport typing\nif TYPE_CHECKING:\n    import a\n"
        "if typing.TYPE_CHECKING:\n    from b import x\nelse:\n    import c\nimport d\n"
    )
    assert imports_of("m", path, {"a", "b", "c", "d"}) == {"c", "d"}
    assert imports_of("m", path, {"a", "b", "c", "d"}, annotations=True) == {"a", "b", "c", "d"}


# The folders are the layers, lowest first (README, Layout): a module imports only from its own
# folder and the folders below it. "scratch" is the package's top (__init__, __main__, check).
LAYERS = (
    "scratch.ops",
    "scratch.variants",
    "scratch.core",
    "scratch.bounds",
    "scratch.backward",
    "scratch.flex",
    "scratch.decode",
    "scratch.trace",
    "scratch.backends",
    "scratch.checker",
    "scratch.testing",
    "scratch.models",
    "scratch.learn",
    "scratch.train",
    "scratch",
    "scratch.bench",
    "gui.state",
    "gui.present",
    "gui.work",
    "gui.widgets",
    "gui.views",
    "gui.app",
    "gui",
    "main",
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the folder `module` lives in (its longest matching prefix)."""
    found = [i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")]
    if not found:
        raise AssertionError(f"{module} lives in no layer of LAYERS")
    return max(found, key=lambda i: len(LAYERS[i]))


def imports_back_up(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import from a lower layer to a higher one."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def test_no_import_runs_back_up_a_layer():
    up = imports_back_up(import_graph())
    assert not up, "imports back up a layer:\n" + "\n".join(up)


def test_every_module_lives_in_a_layer_and_every_layer_holds_modules():
    modules = set(sources())
    for module in modules:
        layer_of(module)
    empty = [name for name in LAYERS if not any(layer_of(m) == LAYERS.index(name) for m in modules)]
    assert not empty, f"layers without a module: {empty}"


def test_a_planted_import_back_up_is_found():
    assert imports_back_up({"scratch.ops.nested": {"scratch.core.attention"}}) == [
        "scratch.ops.nested -> scratch.core.attention"
    ]
    assert imports_back_up({"gui.state.session": {"gui.widgets.heatmap"}}) == [
        "gui.state.session -> gui.widgets.heatmap"
    ]
    assert imports_back_up({"scratch.core.attention": {"scratch.ops.nested"}}) == []

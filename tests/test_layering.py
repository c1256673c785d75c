"""scratch never imports the app (gui): not at the top, not inside a function, not by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORTERS = {"import_module", "__import__"}  # importlib.import_module("gui..."), __import__


def _is_gui(module: str | None) -> bool:
    return module is not None and module.split(".")[0] == "gui"


def gui_imports(root: Path) -> list[str]:
    """'path:line: what' for every import of gui in the Python sources under root."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module] if node.level == 0 else []
            elif isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                first = node.args[0]
                text = first.value if isinstance(first, ast.Constant) else None
                names = [text] if called in IMPORTERS and isinstance(text, str) else []
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names if _is_gui(n)]
    return found


def test_scratch_never_imports_gui():
    """The library stands alone: the app's bench goals come in by --plugin, not by import."""
    assert (ROOT / "scratch" / "bench").is_dir()  # the scan sees the package, subfolders too
    assert gui_imports(ROOT / "scratch") == []


@pytest.mark.parametrize(
    "source",
    [
        "import gui.app.bench_window\n",
        "import os, gui\n",
        "from gui import bench_window\n",
        "from gui.work.worker import TraceWorker\n",
        "def later():\n    from gui import bench_window\n",  # lazily, inside a function
        "import importlib\nimportlib.import_module('gui.app.bench_window')\n",
        "__import__('gui')\n",
    ],
)
def test_the_scan_finds_every_way_of_importing_gui(tmp_path, source):
    """A planted import of gui in a nested module is found, with its file and line."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n" + source)
    found = gui_imports(tmp_path)
    assert len(found) == 1 and found[0].startswith("pkg/mod.py:"), found


def test_the_scan_leaves_other_imports_and_text_alone(tmp_path):
    """Names that only start like gui, relative imports and strings are not imports of gui."""
    (tmp_path / "mod.py").write_text(
        "import guide\nfrom guitar import x\nfrom . import gui\n"
        "HINT = 'pass --plugin gui.app.bench_window'\nprint('gui')\n"
    )
    assert gui_imports(tmp_path) == []

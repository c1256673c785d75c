"""The window keeps no domain rules of its own: no causal grid built by hand (a comparison of a
query index with a key index, np.tri / tril) in any gui module; scratch.causal has the rule."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID_CALLS = {"tri", "tril", "triu"}
# the benchmark's plugin builds a user's edited mask by hand (it is the benchmark's, not the window)
NOT_THE_WINDOW = {"bench_window.py"}


QUERY, KEY = {"i", "rows"}, {"j", "keys"}  # names of query and key indices


def _names(node: ast.AST) -> set[str]:
    """Names an operand computes with; an index inside brackets only picks (mask[i] is not i)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Subscript):
        return _names(node.value)
    return set().union(*(_names(child) for child in ast.iter_child_nodes(node)))


def causal_rules(source: str) -> list[int]:
    """Lines that compare a query index with a key index or build a triangle grid."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops
        ):
            sides = [node.left, *node.comparators]
            names = [_names(side) for side in sides]
            if any(n & QUERY for n in names) and any(n & KEY for n in names):
                found.append(node.lineno)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in GRID_CALLS:
                found.append(node.lineno)
    return found


def test_no_gui_module_writes_the_causal_rule():
    found = {
        path.name: lines
        for path in sorted((ROOT / "gui").glob("*.py"))
        if path.name not in NOT_THE_WINDOW
        and (lines := causal_rules(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"the causal rule written in gui (file: lines): {found}"


def test_the_scan_sees_each_form_and_leaves_other_code_alone():
    assert causal_rules("m = [[j <= i + s for j in c] for i in r]\n") == [1]
    assert causal_rules("m = keys[None, :] <= np.asarray(rows)[:, None]\n") == [1]
    assert causal_rules("m = mask[i][j] if i < len(mask) and j < len(mask[i]) else 1\n") == []
    assert causal_rules("import numpy as np\nm = np.tri(3, 4, 1)\nn = torch.tril(x)\n") == [2, 3]
    assert causal_rules("ok = 0 <= i < rows and 0 <= j < cols\ntext = 'np.tril(ones)'\n") == []

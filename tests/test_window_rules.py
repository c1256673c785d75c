"""The window keeps no domain rules of its own: no causal grid built by hand (a comparison of a
query index with a key index, np.tri / tril, diagonal arithmetic) in any gui module;
scratch.variants.causal has the rule."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID_CALLS = {"tri", "tril", "triu"}

# names of query and key indices (and of a query's diagonal position)
QUERY = {"i", "i0", "i1", "q_idx", "q_lo", "q_hi", "row", "rows", "diagonal", "d", "position"}
KEY = {"j", "j0", "j1", "kv_idx", "kv_lo", "kv_hi", "col", "cols", "keys"}
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _names(node: ast.AST) -> set[str]:
    """Names an operand computes with; an index inside brackets only picks (mask[i] is not i)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Subscript):
        return _names(node.value)
    return set().union(*(_names(child) for child in ast.iter_child_nodes(node)))


def _query_against_key(sides: list[ast.AST]) -> bool:
    """One side computes with a query index only, another with a key index only."""
    names = [_names(side) for side in sides]
    return any(n & QUERY and not n & KEY for n in names) and any(
        n & KEY and not n & QUERY for n in names
    )


def causal_rules(source: str, *, shift_arithmetic: bool = True) -> list[int]:
    """Lines that compare a query index with a key index, build a triangle grid, or (with
    `shift_arithmetic`) add a causal shift to an index (`i1 + shift`, `j0 - p.shift`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, ORDER) for op in node.ops):
            if _query_against_key([node.left, *node.comparators]):
                found.append(node.lineno)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in GRID_CALLS:
                found.append(node.lineno)
        elif (
            shift_arithmetic
            and isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.Add, ast.Sub))
        ):
            sides = [_names(node.left), _names(node.right)]
            if any("shift" in n for n in sides) and any(n & (QUERY | KEY) for n in sides):
                found.append(node.lineno)
    return sorted(set(found))


def test_no_gui_module_writes_the_causal_rule():
    found = {
        path.name: lines
        for path in sorted((ROOT / "gui").glob("*.py"))
        if (lines := causal_rules(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"the causal rule written in gui (file: lines): {found}"


def test_the_scan_sees_each_form_and_leaves_other_code_alone():
    assert causal_rules("m = [[j <= i + s for j in c] for i in r]\n") == [1]
    assert causal_rules("m = keys[None, :] <= np.asarray(rows)[:, None]\n") == [1]
    assert causal_rules("m = mask[i][j] if i < len(mask) and j < len(mask[i]) else 1\n") == []
    assert causal_rules("import numpy as np\nm = np.tri(3, 4, 1)\nn = torch.tril(x)\n") == [2, 3]
    assert causal_rules("ok = 0 <= i < rows and 0 <= j < cols\ntext = 'np.tril(ones)'\n") == []
    assert causal_rules("stop = min(S, i1 + self.shift)\nfirst = max(0, j0 - p.shift)\n") == [1, 2]
    assert causal_rules("stop = i1 + self.shift\n", shift_arithmetic=False) == []
    assert causal_rules("seen = kv_idx <= diagonal + self.right\n") == [1]
    assert causal_rules("fits = len(rows) * len(cols) <= most\nn = shift + 1\n") == []

"""docs/project/layout.md draws the layers from the imports: its block under the `layers` marker
equals the drawing made here from LAYERS and the sources' import graph (tests/test_import_graph.py),
so a new layer, a new import between layers or a layer gone shows up as a difference.
`python tests/test_docs_layout.py` writes the block again."""

import functools
import sys
import textwrap

from docs_pages import DOCS
from test_import_graph import LAYERS, import_graph, layer_of

PAGE = DOCS / "project" / "layout.md"
MARKER = "<!-- layers: drawn from the imports by tests/test_docs_layout.py -->"
HEAD = "  #  layer              imports from (the layers below it)"
WIDTH = 100


@functools.cache
def graph_of_sources() -> dict[str, set[str]]:
    """The sources' import graph, read once per run (its sets are not changed here)."""
    return import_graph()


def layer_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """{layer: the other layers its modules import}."""
    found: dict[str, set[str]] = {name: set() for name in LAYERS}
    for module, targets in graph.items():
        for target in targets:
            if layer_of(target) != layer_of(module):
                found[LAYERS[layer_of(module)]].add(LAYERS[layer_of(target)])
    return found


def drawing(graph: dict[str, set[str]]) -> str:
    """One line per layer, highest first: its number (1: lowest), its name and the layers it
    imports, highest first, wrapped at WIDTH columns."""
    lines = [HEAD]
    for name, below in reversed(list(layer_imports(graph).items())):
        number = LAYERS.index(name) + 1
        targets = ", ".join(sorted(below, key=LAYERS.index, reverse=True)) or "(none)"
        lead = f"{number:>3}  {name:<17}  "
        lines += textwrap.wrap(targets, WIDTH, initial_indent=lead,
                               subsequent_indent=" " * len(lead))  # fmt: skip
    return "\n".join(lines) + "\n"


def page_block(text: str) -> str:
    """The fenced block right after the marker."""
    after = text[text.index(MARKER) + len(MARKER) :].lstrip("\n")
    if not after.startswith("```text\n"):
        raise AssertionError(f"{PAGE.name}: no ```text block right after {MARKER}")
    body = after[len("```text\n") :]
    return body[: body.index("```")]


def test_the_page_draws_the_layers_from_the_imports():
    shown, drawn = page_block(PAGE.read_text(encoding="utf-8")), drawing(graph_of_sources())
    assert shown == drawn, (
        f"{PAGE.name}'s layers differ from the imports; `python tests/test_docs_layout.py` draws "
        f"them again.\npage:\n{shown}\nimports:\n{drawn}"
    )


def test_the_drawing_has_every_layer_once_and_only_imports_down():
    drawn = drawing(graph_of_sources())
    named = [line.split()[1] for line in drawn.splitlines()[1:] if line[:3].strip()]
    assert named == list(reversed(LAYERS))
    for name, below in layer_imports(graph_of_sources()).items():
        assert all(LAYERS.index(b) < LAYERS.index(name) for b in below), name


def test_a_planted_layer_or_import_changes_the_drawing():
    graph = graph_of_sources()
    planted = {**graph, "scratch.ops.nested": graph["scratch.ops.nested"] | {"scratch.core.masks"}}
    assert drawing(planted) != drawing(graph)  # an import up a layer shows
    text = f"x\n{MARKER}\n```text\n{HEAD}\n 25  gui.extra          (none)\n```\n"
    assert page_block(text) != drawing(graph)  # a layer that is not in LAYERS shows


def write() -> None:
    """Replace the page's block with the drawing."""
    text = PAGE.read_text(encoding="utf-8")
    old = page_block(text)
    start = text.index("```text\n", text.index(MARKER)) + len("```text\n")
    PAGE.write_text(text[:start] + drawing(graph_of_sources()) + text[start + len(old) :], "utf-8")


if __name__ == "__main__":
    sys.exit(write())

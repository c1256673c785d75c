"""README.md, the front page: its table of contents lists every ## and ### heading, in order, with
GitHub's anchors; it stays short and links every page of the docs' two paths and project."""

import re

from docs_pages import DOCS, README, anchor, headings, links, name

TOC_TITLE = "**Contents**"
MAX_LINES = 250  # issue 36: the README is a front page; the rest lives in docs/


def expected_toc(text: str) -> list[str]:
    """The TOC lines the headings ask for: ## at the left, ### indented by two spaces."""
    seen: dict[str, int] = {}
    lines = []
    for level, title in headings(text):
        slug = anchor(title, seen)  # every level counts toward the repeats, as on GitHub
        if level in (2, 3):
            lines.append(f"{'  ' * (level - 2)}- [{title}](#{slug})")
    return lines


def written_toc(text: str) -> list[str]:
    """The list under the README's Contents line, up to the first blank line after it."""
    lines = text.splitlines()
    assert TOC_TITLE in lines, f"README.md has no {TOC_TITLE} line"
    start = lines.index(TOC_TITLE) + 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    return lines[start:end]


def test_anchors_are_githubs():
    seen: dict[str, int] = {}
    assert anchor("The desktop app", seen) == "the-desktop-app"
    assert anchor("Learn: why, mistakes, tiles", seen) == "learn-why-mistakes-tiles"
    assert anchor("The ground truth: `scratch`", seen) == "the-ground-truth-scratch"
    assert (
        anchor("Log-sum-exp per row: `return_lse=True`", seen)
        == "log-sum-exp-per-row-return_lsetrue"
    )
    assert anchor("Backends: NumPy and PyTorch", seen) == "backends-numpy-and-pytorch"
    assert anchor("A decoder: SmolLM2-135M-Instruct (Llama family, GGUF)", seen) == (
        "a-decoder-smollm2-135m-instruct-llama-family-gguf"
    )
    assert [anchor("Backward", seen) for _ in range(3)] == ["backward", "backward-1", "backward-2"]


def test_headings_skip_code_blocks():
    text = "# Top\n## One\n```sh\n# a comment\n## not a heading\n```\n### Two\n"
    assert headings(text) == [(1, "Top"), (2, "One"), (3, "Two")]


def test_the_table_of_contents_lists_every_heading():
    text = README.read_text(encoding="utf-8")
    want, have = expected_toc(text), written_toc(text)
    missing = [line for line in want if line not in have]
    extra = [line for line in have if line not in want]
    assert not missing and not extra, (
        "README.md's Contents differ from its headings; "
        f"add: {missing}, remove: {extra} (the whole list, in order: {want})"
    )
    assert have == want, f"README.md's Contents are out of order; expected {want}"


def test_every_anchor_in_the_contents_names_a_heading():
    text = README.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    anchors = {anchor(title, seen) for _, title in headings(text)}
    for line in written_toc(text):
        target = re.search(r"\]\(#([^)]*)\)$", line)
        assert target and target.group(1) in anchors, line


def test_the_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES}"


def test_the_readme_links_every_page_of_learn_check_and_project():
    linked = {
        (README.parent / target.partition("#")[0]).resolve()
        for _, target in links(README.read_text(encoding="utf-8"))
    }
    pages = [p for d in ("learn", "check", "project") for p in sorted((DOCS / d).glob("*.md"))]
    assert len(pages) > 10
    unlinked = [name(p) for p in pages if p.resolve() not in linked]
    assert not unlinked, f"README.md links none of {unlinked}"

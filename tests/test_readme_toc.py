"""README.md's table of contents lists every ## and ### heading, in order, with GitHub's anchors."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
TOC_TITLE = "**Contents**"


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every ATX heading outside fenced code blocks."""
    found, fence = [], None
    for line in text.splitlines():
        marker = re.match(r"\s*(```+|~~~+)", line)
        if marker:
            token = marker.group(1)[0] * 3
            fence = None if fence == token else (fence or token)
            continue
        heading = re.match(r"(#{1,6}) +(.+?) *#* *$", line)
        if fence is None and heading:
            found.append((len(heading.group(1)), heading.group(2)))
    return found


def rendered(title: str) -> str:
    """The heading's text as GitHub shows it: links by their text, no code backticks."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return title.replace("`", "")


def anchor(title: str, seen: dict[str, int]) -> str:
    """GitHub's anchor: lowercase, punctuation but - and _ gone, spaces to -, -1, -2 on repeats."""
    slug = re.sub(r"[^\w\- ]", "", rendered(title).lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


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
    text = open(README, encoding="utf-8").read()
    want, have = expected_toc(text), written_toc(text)
    missing = [line for line in want if line not in have]
    extra = [line for line in have if line not in want]
    assert not missing and not extra, (
        "README.md's Contents differ from its headings; "
        f"add: {missing}, remove: {extra} (the whole list, in order: {want})"
    )
    assert have == want, f"README.md's Contents are out of order; expected {want}"


def test_every_anchor_in_the_contents_names_a_heading():
    text = open(README, encoding="utf-8").read()
    seen: dict[str, int] = {}
    anchors = {anchor(title, seen) for _, title in headings(text)}
    for line in written_toc(text):
        target = re.search(r"\]\(#([^)]*)\)$", line)
        assert target and target.group(1) in anchors, line

"""Every relative link and picture in README.md and docs/**/*.md resolves on the repository host:
the file exists relative to its page, and a #anchor names a heading of the page it points to."""

from pathlib import Path

import pytest
from docs_pages import anchors, links, name, pages

PAGES = pages()


def broken(page: Path, text: str) -> list[str]:
    """Each relative link of `text` (read as `page`) whose file or anchor is missing."""
    found = []
    for line, target in links(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, fragment = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            found.append(f"line {line}: {target} (no file {goal})")
        elif fragment and goal.suffix == ".md":
            if fragment not in anchors(goal.read_text(encoding="utf-8")):
                found.append(f"line {line}: {target} (no heading #{fragment} in {goal.name})")
    return found


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.png").write_bytes(b"")
    text = (
        "# Top\n![a](there.png) ![b](gone.png) [c](#top) [d](#nowhere) [e](page.md#top)\n"
        '<img src="gone2.png"> `[f](gone3.png)`\n```\n![g](gone4.png)\n```\n'
    )
    page.write_text(text, encoding="utf-8")
    found = broken(page, text)
    assert [f.split(" (")[0] for f in found] == [
        "line 2: gone.png",
        "line 2: #nowhere",
        "line 3: gone2.png",
    ]


def test_there_are_pages_with_pictures():
    assert len(PAGES) > 10
    assert any("../images/" in target for p in PAGES for _, target in links(p.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=[name(p) for p in PAGES])
def test_every_link_and_picture_resolves(page):
    found = broken(page, page.read_text(encoding="utf-8"))
    assert not found, f"{name(page)} has broken links: {found}"

"""The project's Markdown pages (README.md and docs/**/*.md), read the way the repository host
reads them: headings outside fenced code, GitHub's anchors, relative links and pictures."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """README.md, then every docs/**/*.md page, sorted."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def name(page: Path) -> str:
    """The page's path from the repository root, as a test id says it."""
    return page.relative_to(ROOT).as_posix()


def outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks (``` or ~~~)."""
    found, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"\s*(```+|~~~+)", line)
        if marker:
            token = marker.group(1)[0] * 3
            fence = None if fence == token else (fence or token)
            continue
        if fence is None:
            found.append((n, line))
    return found


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every ATX heading outside fenced code blocks."""
    found = []
    for _, line in outside_fences(text):
        heading = re.match(r"(#{1,6}) +(.+?) *#* *$", line)
        if heading:
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


def anchors(text: str) -> set[str]:
    """Every heading's anchor on a page."""
    seen: dict[str, int] = {}
    return {anchor(title, seen) for _, title in headings(text)}


LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?: \"[^\"]*\")?\)|<img [^>]*src=\"([^\"]+)\""
)


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link, picture and <img src> outside code (fenced or
    `inline`)."""
    found = []
    for n, line in outside_fences(text):
        line = re.sub(r"`[^`]*`", "", line)
        for m in LINK.finditer(line):
            found.append((n, m.group(1) or m.group(2)))
    return found

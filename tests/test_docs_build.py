"""The docs site builds with `mkdocs build --strict` (no broken link or anchor, no missing API
object, no page left out of the nav) and its Reference shows every name of scratch.__all__; a
browser engine (QtWebEngine) draws one of its pages and a trace's notebook HTML. Skipped where
the docs extra is not installed (`make docs` installs it)."""

import html as html_lib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import browser
import pytest
from docs_pages import DOCS, ROOT, links
from screenshots import notebook_page, png_size

import scratch

NOT_IN_THE_SITE = {"notes"}  # measurement notes the code cites by path; mkdocs.yml excludes them


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built once into a tmp folder; the build's output when it fails."""
    pytest.importorskip(
        "mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')"
    )
    pytest.importorskip("material", reason="mkdocs-material (the docs extra) is not installed")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings (the docs extra) is not installed")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return out, done


def test_the_site_builds_strict_with_no_warning(site):
    out, done = site
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log[-4000:]}"
    assert "WARNING" not in log, log[-4000:]


def test_every_page_is_in_the_site(site):
    out, _ = site
    pages = [p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] not in NOT_IN_THE_SITE]
    assert len(pages) > 20
    missing = [str(p.relative_to(DOCS)) for p in pages
               if not (out / p.relative_to(DOCS)).with_suffix(".html").is_file()]  # fmt: skip
    assert not missing, f"pages with no HTML in the site: {missing}"


def documented(html: str) -> set[str]:
    """The last part of every object id the reference page renders (scratch.x.y -> y)."""
    return {i.rsplit(".", 1)[-1] for i in re.findall(r'id="(scratch(?:\.\w+)+)"', html)}


def test_the_reference_shows_every_public_name(site):
    out, _ = site
    html = (out / "reference" / "scratch.html").read_text(encoding="utf-8")
    missing = [n for n in scratch.__all__ if n not in documented(html)]
    assert not missing, f"names of scratch.__all__ missing from reference/scratch.md: {missing}"


def rendered(files: list, out) -> dict:
    """{file name: its facts} from tests/browser.py (QtWebEngine in a process of its own)."""
    if importlib.util.find_spec("PyQt6.QtWebEngineWidgets") is None:  # not imported here: it
        # must come before any QApplication, and this process may have made one already
        pytest.skip("PyQt6-WebEngine (the docs extra) is not installed")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "browser.py"), str(out), *map(str, files)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(found) == len(files), done.stdout + done.stderr[-3000:]
    return {Path(f["file"]).name: f for f in found}


def test_a_page_and_a_notebook_trace_render_in_a_browser(site, tmp_path):
    """QtWebEngine draws the tour page with the site's style and every picture, and a trace's
    notebook HTML with one table per step; neither picture is blank."""
    out, done = site
    assert done.returncode == 0, done.stderr[-2000:]
    notebook = tmp_path / "trace.html"
    notebook.write_text(notebook_page(), encoding="utf-8")  # docs/learn/notebook.md's trace
    tour = out / "learn" / "first-five-minutes.html"
    facts = rendered([tour, notebook], tmp_path / "png")
    page = facts[tour.name]
    assert page["title"] == "First five minutes - scratch-attention", page["title"]
    assert page["heading"].startswith("First five minutes"), page["heading"]
    assert page["header"] not in (None, "rgba(0, 0, 0, 0)"), "the theme's style sheet is missing"
    pictures = [t for _, t in links((DOCS / "learn" / "first-five-minutes.md").read_text())
                if t.endswith(".png")]  # fmt: skip
    assert [i["src"] for i in page["images"]] == pictures
    unloaded = [i["src"] for i in page["images"] if not (i["complete"] and i["width"] > 0)]
    assert not unloaded, f"pictures the browser could not load: {unloaded}"
    shown = facts[notebook.name]
    assert len(shown["tables"]) == 9, shown["tables"]  # x, q, k, v, scores ... output
    drawn = [0 < width <= shown["body_width"] for width in shown["tables"]]
    assert all(drawn), f"tables not drawn or wider than the page: {shown['tables']}"
    for facts_of in (page, shown):
        assert not facts_of["blank"], f"{facts_of['file']}: the picture is blank"
        assert png_size(Path(facts_of["png"])) == (browser.WIDTH, browser.HEIGHT)


def test_the_doors_show_their_arguments(site):
    """A door-made function (`name = forward_door(impl)`, `@decode_door`, the checker's `@door`)
    shows the door's signature and its Parameters (docs/griffe_doors.py), not an attribute."""
    out, _ = site
    html = (out / "reference" / "scratch.html").read_text(encoding="utf-8")
    for name in ("scaled_dot_product_attention", "flex_attention_backward", "trace_attention",
                 "decode_attention", "checker.doors.check"):  # fmt: skip
        start = html.index(f'id="scratch.{name}"')
        part = html[start : html.find('class="doc doc-heading"', start + 100)]
        assert "module-attribute" not in part, f"{name} shows as an attribute"
        assert 'doc-section-title">Parameters' in part, f"{name} shows no Parameters"
        text = html_lib.unescape(re.sub(r"<[^>]+>", "", part))
        signature = text[text.index(name.rpartition(".")[2] + "(") :].split(")")[0]
        assert "options" not in signature, f"{name}: the impl's signature {signature})"

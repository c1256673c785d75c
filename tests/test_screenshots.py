"""The docs' pictures are made, not pasted, and none is older than the code that draws it.

How staleness is found: a manifest, not a redraw. `make screenshots` (tests/screenshots.py)
records per picture its main.py command, its size, the PNG's sha256 and the sha256 of each
source file that draws it (main.py and the gui modules its tab's view and the window's frame
import); this test recomputes them and names the files changed since. Redrawing in the test
and comparing coarse image hashes was the other choice, refused: the window's text is drawn in
the host's fonts (DejaVu, Noto or Liberation), so a picture's pixels differ by host, a hash
tolerant enough for that would let a moved widget pass, and one redraw takes 10-30 s. The
manifest is fast (well under a second here) and exact about the code; it cannot see a change in
scratch/ that changes the numbers drawn (the math's own tests check those), only in the code
that draws. Also: every picture a page uses is in the list, and every PNG in docs/images/ is
used by a page.
"""

import hashlib
import json

import pytest
import screenshots
from docs_pages import ROOT, links, name, pages
from test_import_graph import import_graph


@pytest.fixture(scope="module")
def manifest() -> dict:
    assert screenshots.MANIFEST.is_file(), "docs/images/manifest.json is missing: make screenshots"
    return json.loads(screenshots.MANIFEST.read_text())


@pytest.fixture(scope="module")
def graph() -> dict:
    return import_graph()


def used_pictures() -> dict[str, list[str]]:
    """{picture path from the root: [page:line, ...]} of every local .png a page shows."""
    found: dict[str, list[str]] = {}
    for page in pages():
        for line, target in links(page.read_text(encoding="utf-8")):
            if target.endswith(".png") and "://" not in target:
                path = (page.parent / target).resolve().relative_to(ROOT).as_posix()
                found.setdefault(path, []).append(f"{name(page)}:{line}")
    return found


@pytest.mark.parametrize("picture", screenshots.PICTURES, ids=lambda p: p.name)
def test_the_picture_was_made_by_its_command_from_todays_code(picture, manifest, graph):
    made = manifest.get(picture.name)
    redo = f"run: python tests/screenshots.py {picture.name} (or make screenshots)"
    assert made is not None, f"{picture.name} is not in the manifest; {redo}"
    path = screenshots.IMAGES / picture.name
    assert path.is_file(), f"docs/images/{picture.name} is missing; {redo}"
    assert made["command"] == screenshots.entry_command(picture), (
        f"{picture.name}: its command changed since it was made; {redo}"
    )
    assert made["png_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest(), (
        f"{picture.name} is not the picture its command made (changed by hand?); {redo}"
    )
    assert tuple(made["size"]) == screenshots.png_size(path) == picture.size, (
        f"{picture.name}: {screenshots.png_size(path)}, expected {picture.size}; {redo}"
    )
    then, now = made["sources_sha256"], screenshots.sources_sha256(picture, graph)
    changed = sorted(m for m in then.keys() | now.keys() if then.get(m) != now.get(m))
    assert not changed, (
        f"{picture.name} is older than the code that draws it (changed since: "
        f"{', '.join(changed)}); {redo}"
    )


def test_every_picture_a_page_shows_is_made_by_the_list():
    listed = {f"docs/images/{p.name}" for p in screenshots.PICTURES}
    unlisted = {path: where for path, where in used_pictures().items() if path not in listed}
    assert not unlisted, f"pictures shown but not in tests/screenshots.py's PICTURES: {unlisted}"


def test_every_png_in_docs_images_is_shown_by_a_page():
    used = used_pictures()
    orphans = sorted(
        p.name
        for p in screenshots.IMAGES.glob("*.png")
        if p.relative_to(ROOT).as_posix() not in used
    )
    assert not orphans, f"PNGs in docs/images/ no page shows (remove them or show them): {orphans}"
    names = [p.name for p in screenshots.PICTURES]
    assert len(names) == len(set(names)), "a picture is listed twice in PICTURES"


def test_each_picture_is_drawn_by_its_tab_s_modules(graph):
    """The sources are the picture's own: its tab's view is in them, another tab's is not."""
    by_name = {p.name: p for p in screenshots.PICTURES}
    overview = screenshots.drawing_modules(by_name["overview_view.png"], graph)
    model = screenshots.drawing_modules(by_name["model_view.png"], graph)
    assert {"main", "gui.views.overview", "gui.views.inputs_panel"} <= set(overview)
    assert "gui.views.model_panel" not in overview
    assert "gui.views.model_panel" in model and "gui.views.inputs_panel" not in model
    # the window that lays the tabs out draws every picture of main.py, itself only
    assert "gui.app.main_window" in overview and "gui.app.main_window" in model
    assert "gui.views.train_tab" not in overview  # main_window's imports are not followed

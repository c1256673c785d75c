"""Render HTML files in a real browser engine (QtWebEngine, the docs extra) to PNGs.

`python tests/browser.py [--size WxH] OUT_FOLDER FILE.html...` loads each file offscreen (at
1280 x 1800 without --size), waits for its load to finish and for a drawn frame, writes
OUT_FOLDER/<name>.png and prints one JSON line per file with what the page holds (title, first
heading, every picture's natural width, style sheets, tables' widths).
It runs in a process of its own: QtWebEngine must be imported before any QApplication exists,
which a test process that already ran Qt tests cannot promise. As root Chromium refuses to start
without --no-sandbox ("Running as root without --no-sandbox is not supported"); --disable-gpu
skips its OpenGL attempt, which fails offscreen (it then draws in software, as it would anyway).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

WIDTH, HEIGHT = 1280, 1800  # the picture: a page's top 1800 pixels
TIMEOUT_S = 120.0  # generous: a loaded 2-core machine can take seconds to start Chromium

FACTS = """(() => ({
  title: document.title,
  heading: (document.querySelector('h1') || {textContent: ''}).textContent.trim(),
  images: Array.from(document.images).map(i => ({src: i.getAttribute('src'),
    width: i.naturalWidth, complete: i.complete})),
  sheets: document.styleSheets.length,
  height: document.documentElement.scrollHeight,
  header: document.querySelector('.md-header') ?
    getComputedStyle(document.querySelector('.md-header')).backgroundColor : null,
  tables: Array.from(document.querySelectorAll('table')).map(t => t.getBoundingClientRect().width),
  body_width: document.body.clientWidth,
  probes: Array.from(document.querySelectorAll('h1, table, img'))
    .map(e => e.getBoundingClientRect())
    .filter(r => r.width > 2 && r.height > 2 && r.top >= 0 && r.bottom <= window.innerHeight)
    .slice(0, 8).map(r => [r.left, r.top, r.width, r.height].map(Math.floor)),
}))()"""


def chromium_flags() -> str:
    """The flags QtWebEngine needs here: no sandbox as root; no GPU (none offscreen)."""
    flags = os.environ.get("QTWEBENGINE_CHROMIUM_FLAGS", "").split()
    wanted = ["--disable-gpu", *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    return " ".join([*flags, *(f for f in wanted if f not in flags)])


def blank(image, box: list[int] | None = None) -> bool:
    """True when every sampled pixel of `box` ([x, y, w, h]; the whole image without it) is
    the colour of its first: nothing drawn there yet."""
    x0, y0, w, h = box or (0, 0, image.width(), image.height())
    step = max(1, min(w, h) // 12, 3)
    first = image.pixel(x0, y0)
    return all(
        image.pixel(x, y) == first
        for x in range(x0, min(x0 + w, image.width()), step)
        for y in range(y0, min(y0 + h, image.height()), step)
    )


def render_all(files: list[Path], out: Path, size: tuple[int, int] = (WIDTH, HEIGHT)) -> list[dict]:
    """Each file's facts (see FACTS) with its PNG's path; 'error' says what failed."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["QTWEBENGINE_CHROMIUM_FLAGS"] = chromium_flags()
    from PyQt6.QtWebEngineWidgets import QWebEngineView  # before the QApplication
    from PyQt6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0]])
    results = []
    for path in files:
        view = QWebEngineView()  # a new one each time: no frame of the last page is left in it
        view.resize(*size)
        view.show()
        results.append(render(app, view, path, out))
        view.close()
        view.deleteLater()  # its page goes before the profile does, at the end
    from PyQt6.QtCore import QEvent

    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # the pages, before the profile
    return results


def waited(signal, start) -> list:
    """Run start(), then handle events until `signal` fires (its arguments, in a list) or
    TIMEOUT_S passes (an empty list)."""
    from PyQt6.QtCore import QEventLoop, QTimer

    loop, got = QEventLoop(), []

    def done(*args) -> None:
        got.append(args)
        loop.quit()

    signal.connect(done)
    QTimer.singleShot(int(TIMEOUT_S * 1000), loop.quit)
    start()
    if not got:
        loop.exec()
    signal.disconnect(done)
    return got


def render(app, view, path: Path, out: Path) -> dict:
    """Load `path` in `view`, read its facts, write its picture to out/<name>.png."""
    from PyQt6.QtCore import QObject, QUrl, pyqtSignal

    class Answer(QObject):
        said = pyqtSignal(object)

    loaded = waited(view.loadFinished, lambda: view.load(QUrl.fromLocalFile(str(path))))
    if not loaded or not loaded[0][0]:
        return {"file": str(path), "error": "did not load" if loaded else "timed out loading"}
    answer = Answer()
    facts = waited(answer.said, lambda: view.page().runJavaScript(FACTS, 0, answer.said.emit))
    if not facts:
        return {"file": str(path), "error": "the page's facts timed out"}
    image = drawn(app, view, facts[0][0]["probes"])
    png = out / (path.stem + ".png")
    image.save(str(png))
    return dict(facts[0][0], file=str(path), png=str(png), blank=blank(image))


def drawn(app, view, probes: list[list[int]]):
    """The view's picture once every probe (the page's heading, tables and pictures in view)
    shows something drawn in it and the next grab is the same: Chromium draws a page in
    pieces (the header first), so one drawn pixel is not a drawn page. The last grab after
    TIMEOUT_S otherwise."""
    from PyQt6.QtCore import QEventLoop

    deadline = time.monotonic() + TIMEOUT_S
    last = view.grab().toImage()
    while time.monotonic() < deadline:
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        now = view.grab().toImage()
        done = not blank(now) and not any(blank(now, box) for box in probes)
        if done and now == last:
            return now
        last = now
    return last


def main(argv: list[str]) -> int:
    """Render the files into the folder (argv: [--size WxH] OUT_FOLDER FILE.html...); one JSON
    line per file; 1 if one failed, 2 on a usage error."""
    size = (WIDTH, HEIGHT)
    if argv[:1] == ["--size"] and len(argv) > 1:
        try:
            size = tuple(int(side) for side in argv[1].lower().split("x"))
        except ValueError:
            size = ()
        argv = argv[2:] if len(size) == 2 and min(size) > 0 else []
    if len(argv) < 2:
        print(
            "usage: python tests/browser.py [--size WxH] OUT_FOLDER FILE.html...", file=sys.stderr
        )
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    results = render_all([Path(a).resolve() for a in argv[1:]], out, size)
    for found in results:
        print(json.dumps(found))
    return 1 if any("error" in found for found in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

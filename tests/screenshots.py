"""The docs' pictures, each made by one command: `make screenshots` (this file) remakes them.

PICTURES is the one list: a picture's file name in docs/images/ and the `main.py --screenshot`
options that draw it, or NOTEBOOK: a trace's notebook HTML drawn by a browser engine
(tests/browser.py; PyQt6-WebEngine, the docs extra). `python tests/screenshots.py` makes all
of them, `python tests/screenshots.py tour_mask.png` the ones named. Each run rewrites
docs/images/manifest.json: per picture its command, its size, the PNG's sha256 and the sha256
of each source file that draws it (main.py and the window's modules its tab reaches; for the
notebook, the HTML's module and the browser script), which tests/test_screenshots.py
recomputes to find a picture older than its code. It lives in tests/ (beside run_shards.py,
another tool `make` runs) so the test reads the same list and nothing but pages sits in docs/.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
MANIFEST = IMAGES / "manifest.json"
RUN = "{run}"  # stands for the training run file TRAIN_RUN makes (once, for every picture)
NOTEBOOK = "notebook"  # a picture of notebook_page() drawn by tests/browser.py, not main.py
FOLDER = "{folder}"  # stands for the folder the notebook page is written to
TRAIN_RUN = ("induction", "--steps", "1500", "--seed", "0")  # python -m scratch.train's options
# What every picture shows around its tab: the Inputs and Variant panels (the Model tab hides
# them) and the PNG export; and the window that lays the tabs out, gui.app.main_window, its own
# file only (it imports every tab's view: their edits stale only their own tab's pictures).
FRAME = ("gui.views.inputs_panel", "gui.views.variant_panel", "gui.widgets.export")
WINDOW = "gui.app.main_window"
NO_INPUTS = ("model",)
TAB_VIEWS = {  # main.py's --tab -> the module that draws that tab
    "pipeline": "gui.views.pipeline_view",
    "backward": "gui.views.backward_view",
    "overview": "gui.views.overview",
    "check": "gui.views.check_panel",
    "kernel": "gui.views.kernel_check",
    "model": "gui.views.model_panel",
    "learn": "gui.views.learn_tab",
    "train": "gui.views.train_tab",
}
TEXT_512 = " ".join(["the cat sat on the mat and saw a dog"] * 51)  # 510 words, 512 tokens


@dataclass(frozen=True)
class Picture:
    """One picture of the docs: its file name, main.py's options, the window's size."""

    name: str
    args: tuple[str, ...]
    size: tuple[int, int] = (1024, 700)

    def command(self) -> list[str]:
        """main.py's command line (without the interpreter), output path as docs/images/NAME;
        for a NOTEBOOK picture, tests/browser.py's on the page notebook_page() writes."""
        width, height = self.size
        if self.args == (NOTEBOOK,):
            page = f"{FOLDER}/{Path(self.name).stem}.html"
            return ["tests/browser.py", "--size", f"{width}x{height}", "docs/images", page]
        shot = ("--screenshot", f"docs/images/{self.name}", "--size", f"{width}x{height}")
        return ["main.py", *self.args, *shot]

    def tab(self) -> str:
        """The tab the picture shows, as main.py chooses it (NOTEBOOK: not the window)."""
        args = list(self.args)
        if args == [NOTEBOOK]:
            return NOTEBOOK
        if "--tab" in args:
            return args[args.index("--tab") + 1]
        if "--run" in args:
            return "train"
        if "--generate" in args and "--layer" not in args and "--head" not in args:
            return "model"
        return "pipeline"


# 1024 x 700 unless a page prints the picture's command without --size (main.py's default
# 1400 x 900 then: screenshot, backward_view, model_view) or the picture needs the room (the
# mistakes' four heatmaps, the tiles' three plots, the variant's Inputs, the head view's lines,
# the Train tab after the change, which issue 37 asks for at both sizes).
PICTURES = (
    Picture("screenshot.png", ("--preset", "journey", "--step", "weights", "--hover", "1,2"),
            (1400, 900)),
    Picture("tour_mask.png", ("--preset", "journey", "--mask", "causal-top-left", "--step",
                              "masked", "--hover", "1,2")),
    Picture("backward_view.png", ("--tab", "backward", "--grad-output", "target", "--grad-seed",
                                  "3", "--step", "grad_scores", "--hover", "1,2"), (1400, 900)),
    Picture("overview_view.png", ("--preset", "random", "--seed", "3", "--mask",
                                  "causal-top-left", "--tab", "overview")),
    Picture("check_view.png", ("--preset", "random", "--seed", "3", "--tokens", "512", "--mask",
                               "causal-top-left", "--backend", "numpy", "--tab", "check")),
    Picture("variant_view.png", ("--preset", "journey", "--mask", "window", "--step", "weights",
                                 "--hover", "3,2"), (1400, 900)),
    Picture("decode_view.png", ("--preset", "journey", "--mask", "window", "--decode", "5",
                                "--step", "weights")),
    Picture("learn_why.png", ("--preset", "journey", "--mask", "causal-top-left", "--step",
                              "masked", "--tab", "learn")),
    Picture("learn_mistakes.png", ("--preset", "journey", "--mask", "causal-top-left", "--tab",
                                   "learn", "--page", "mistakes", "--mistake",
                                   "causal off by one"), (1400, 900)),
    Picture("learn_tiles.png", ("--preset", "random", "--tokens", "64", "--mask",
                                "causal-top-left", "--tab", "learn", "--page", "tiles"),
            (1400, 900)),
    Picture("kernel_check_view.png", ("--tab", "kernel", "--kernel",
                                      "tests.kernels_for_checker:scale_1_d")),
    Picture("model_view.png", ("--model", "default", "--tab", "model"), (1400, 900)),
    Picture("model_view_512.png", ("--text", TEXT_512, "--tab", "model")),
    Picture("head_view.png", ("--text", "The animal didn't cross the street because it was too "
                              "tired, so it lay down and slept there all afternoon.", "--layer",
                              "1", "--tab", "model"), (1400, 900)),
    Picture("generation_view.png", ("--model", "smollm2", "--text", "The capital of France is",
                                    "--generate", "3")),
    Picture("model_block.png", ("--model", "smollm2", "--text", "the cat sat on the mat",
                                "--layer", "3", "--tab", "model", "--page", "block")),
    Picture("train_before.png", ("--run", RUN, "--snapshot", "500")),
    Picture("train_during.png", ("--run", RUN, "--snapshot", "900")),
    Picture("train_after.png", ("--run", RUN), (1400, 900)),
    Picture("notebook_trace.png", (NOTEBOOK,), (860, 980)),  # its widest line; nine tables
)  # fmt: skip


def notebook_page() -> str:
    """docs/learn/notebook.md's trace as Jupyter shows it (its _repr_html_), as a web page."""
    import scratch

    trace = scratch.trace_attention(
        [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], tokens=["the", "cat", "sat"], is_causal=True
    )
    return f"<!doctype html><meta charset='utf-8'><title>trace</title>{trace._repr_html_()}"


def drawing_modules(picture: Picture, graph: dict[str, set[str]]) -> list[str]:
    """main.py and the window's modules (gui.*) that draw the picture's tab and its frame, with
    every gui module they import."""
    from test_import_graph import reached

    if picture.tab() == NOTEBOOK:  # the HTML, what it reaches in scratch.trace, the browser
        found = {"scratch.trace.html_view", *reached(graph, "scratch.trace.html_view")}
        return sorted({m for m in found if m.startswith("scratch.trace.")} | {"tests.browser"})
    frame = FRAME[-1:] if picture.tab() in NO_INPUTS else FRAME
    roots = (*frame, TAB_VIEWS[picture.tab()])
    found = {"main", WINDOW, *roots}
    for root in roots:
        found |= reached(graph, root)
    return sorted(m for m in found if m == "main" or m.startswith("gui."))


def sources_sha256(picture: Picture, graph: dict[str, set[str]] | None = None) -> dict[str, str]:
    """{drawing module: the sha256 of its file (16 hex digits)}: any edit to one changes it."""
    from test_import_graph import import_graph, sources

    graph = import_graph() if graph is None else graph
    paths = {**sources(), "tests.browser": ROOT / "tests" / "browser.py"}
    return {
        module: hashlib.sha256(paths[module].read_bytes()).hexdigest()[:16]
        for module in drawing_modules(picture, graph)
    }


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def entry_command(picture: Picture) -> str:
    """The picture's command as the manifest records it (a long text named, not written)."""
    return " ".join(["python", *picture.command()]).replace(TEXT_512, "TEXT_512")


def entry(picture: Picture, graph: dict[str, set[str]]) -> dict:
    """The manifest's record of a picture just made."""
    path = IMAGES / picture.name
    return {
        "command": entry_command(picture),
        "size": list(png_size(path)),
        "png_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "sources_sha256": sources_sha256(picture, graph),
    }


def make_run(folder: str) -> str:
    """The training run file the Train tab pictures open (python -m scratch.train)."""
    out = os.path.join(folder, "run.npz")
    subprocess.run([sys.executable, "-m", "scratch.train", *TRAIN_RUN, "--out", out],
                   cwd=ROOT, check=True)  # fmt: skip
    return out


def make(pictures: list[Picture]) -> None:
    """Draw each picture into docs/images/ and record it in the manifest."""
    from test_import_graph import import_graph

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    with tempfile.TemporaryDirectory(prefix="screenshots-") as folder:
        run = make_run(folder) if any(RUN in p.args for p in pictures) else ""
        for picture in pictures:
            start = time.monotonic()
            if picture.tab() == NOTEBOOK:
                page = Path(folder) / f"{Path(picture.name).stem}.html"
                page.write_text(notebook_page(), encoding="utf-8")
            asked = (a.replace(RUN, run).replace(FOLDER, folder) for a in picture.command())
            command = [sys.executable, *asked]
            subprocess.run(command, cwd=ROOT, env=env, check=True)
            print(f"  {picture.name}: {time.monotonic() - start:.1f} s", flush=True)
    graph = import_graph()
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    manifest.update({p.name: entry(p, graph) for p in pictures})
    names = {p.name for p in PICTURES}
    manifest = {name: manifest[name] for name in sorted(manifest) if name in names}
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: list[str]) -> int:
    """Make the pictures named in argv (all of them without names); 2 on an unknown name."""
    sys.path.insert(0, str(ROOT))  # this checkout's scratch (notebook_page), not an installed one
    by_name = {p.name: p for p in PICTURES}
    unknown = [name for name in argv if name not in by_name]
    if unknown:
        print(f"screenshots: unknown {unknown}; pictures: {', '.join(by_name)}", file=sys.stderr)
        return 2
    make([by_name[name] for name in argv] if argv else list(PICTURES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

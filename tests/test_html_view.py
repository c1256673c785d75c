"""A trace and a model run show themselves in Jupyter: coloured HTML tables with token labels."""

from __future__ import annotations

import math
import subprocess
import sys
import types
from html.parser import HTMLParser

import pytest

import scratch
from scratch.trace import html_view


class _Tables(HTMLParser):
    """Each table's header labels and, per row, its label and cells (text, background, title)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._cell: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"head": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append({"label": None, "cells": []})
        elif tag in ("th", "td") and self.tables:
            style = a.get("style") or ""
            bg = style.split("background:")[1].split(";")[0] if "background:" in style else ""
            self._cell = {"tag": tag, "text": "", "bg": bg, "title": a.get("title", "")}
        elif self._cell is not None:
            self._cell["text"] += f"[a {tag} tag]"  # markup inside a cell: an unescaped label

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            cell, self._cell = self._cell, None
            row = self.tables[-1]["rows"][-1]
            if cell["tag"] == "td":
                row["cells"].append(cell)
            elif len(self.tables[-1]["rows"]) == 1:
                self.tables[-1]["head"].append(cell["text"])
            else:
                row["label"] = cell["text"]


def _parse(text: str) -> list[dict]:
    parser = _Tables()
    parser.feed(text)
    for table in parser.tables:  # the header row is not a row of cells; its corner is empty
        table["rows"] = table["rows"][1:]
        table["head"] = table["head"][1:]
    return parser.tables


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[k : k + 2], 16) for k in (1, 3, 5))


TOKENS = ["<b>", "a&b", "it's"]


def _trace(**kwargs):
    x = [[1.0, 0.5, -1.0], [0.0, 2.0, 0.5], [-1.5, 0.25, 1.0]]
    return scratch.trace_attention(x, tokens=TOKENS, **kwargs)


def test_each_step_is_a_table_with_one_cell_per_entry_and_the_tokens_as_labels():
    trace = _trace(is_causal=True)
    tables = _parse(trace._repr_html_())
    assert len(tables) == len(trace.steps)
    for step, table in zip(trace.steps, tables):
        value = step.tolist()
        if step.axes[0] == "head":
            value = value[0]
        if len(step.axes) - (step.axes[0] == "head") == 1:
            value = [value]
        assert [len(r["cells"]) for r in table["rows"]] == [len(row) for row in value], step.name
        shown = [[float(c["title"].split(" = ")[1]) for c in r["cells"]] for r in table["rows"]]
        assert shown == value, step.name  # each cell's exact value, in its place
    weights = tables[trace.names().index("weights")]
    assert weights["head"] == TOKENS and [r["label"] for r in weights["rows"]] == TOKENS
    masked = tables[trace.names().index("masked")]
    assert masked["rows"][0]["cells"][2]["bg"] == html_view.GREY  # -inf: masked, grey


def test_labels_are_escaped_not_markup():
    text = _trace()._repr_html_()
    assert "&lt;b&gt;" in text and "a&amp;b" in text
    labels = _parse(text)[-1]["rows"]
    assert [r["label"] for r in labels] == TOKENS  # no <b> tag parsed inside a label


@pytest.mark.parametrize("seed", range(5))
def test_colours_darken_with_the_value_and_signed_ones_take_the_sign_hue(seed):
    import random

    rng = random.Random(seed)
    values = sorted(rng.random() for _ in range(30))
    darkness = [-sum(_rgb(html_view.colour(v, "weights", 1.0))) for v in values]
    assert darkness == sorted(darkness) and darkness[0] < darkness[-1]
    signed = sorted((rng.uniform(-3, 3) for _ in range(30)), key=abs)
    top = max(map(abs, signed))
    shades = [_rgb(html_view.colour(v, "signed", top)) for v in signed]
    for sign in (1, -1):  # each side darker with |value| (each side its own hue)
        side = [-sum(c) for v, c in zip(signed, shades) if v * sign > 0]
        assert side == sorted(side) and side[0] < side[-1]
    for v, (r, _g, b) in zip(signed, shades):  # near 0 both are white
        assert (r > b) == (v > 0) or r == b == 255
    assert html_view.colour(-math.inf, "signed", top) == html_view.GREY


def test_a_long_input_is_thinned_with_a_note():
    n = 100
    x = [[math.sin(i * j + 1) for j in range(4)] for i in range(n)]
    trace = scratch.trace_attention(x, tokens=[f"w{i}" for i in range(n)])
    text = trace._repr_html_()
    weights = _parse(text)[trace.names().index("weights")]
    every = html_view.every(n)
    assert len(weights["rows"]) == len(range(0, n, every)) <= html_view.MAX_SIDE
    assert weights["head"] == [f"w{i}" for i in range(0, n, every)]
    assert all(c["text"] == "" for r in weights["rows"] for c in r["cells"])  # no numbers
    assert f"100 x 100, thinned: every {every}-th row and every {every}-th column" in text


def test_a_model_run_shows_its_first_and_last_layers_heads():
    np = pytest.importorskip("numpy")
    from scratch.models.run import Run

    rng = np.random.default_rng(0)
    attentions = rng.random((3, 10, 4, 4))
    attentions /= attentions.sum(-1, keepdims=True)  # (layers, heads, T, T) rows sum to 1
    model = types.SimpleNamespace(name="tiny <model>")
    run = Run(model, "a <b> c d", ["a", "<b>", "c", "d"], [1, 2, 3, 4], attentions, [])
    text = run._repr_html_()
    tables = _parse(text)
    assert len(tables) == 2 * html_view.MAX_HEADS  # layers 0 and 2, the first 8 of 10 heads
    assert "tiny &lt;model&gt;" in text and "the first 8 of 10 heads" in text
    first = tables[0]
    assert first["head"] == ["a", "<b>", "c", "d"]
    shown = [[float(c["title"].split(" = ")[1]) for c in r["cells"]] for r in first["rows"]]
    assert shown == attentions[0, 0].tolist()
    last = tables[html_view.MAX_HEADS]
    assert [float(c["title"].split(" = ")[1]) for c in last["rows"][1]["cells"]] == (
        attentions[2, 0, 1].tolist()
    )


def test_import_scratch_and_a_traces_html_need_no_numpy():
    code = (
        "import sys, scratch; t = scratch.trace_attention([[1.0, 2.0], [3.0, 4.0]]); "
        "h = t._repr_html_(); assert 'numpy' not in sys.modules, 'numpy'; print(len(h))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("is_causal", [False, True])
def test_each_step_s_heading_names_its_step_once(is_causal):
    """A step's formula names its step ('q = x (no projection)'): the heading says it once,
    not 'q = q = x' (as it read in a browser)."""
    page = _trace(is_causal=is_causal)._repr_html_()
    for name in ("q", "scores", "weights", "output"):
        assert f"{name} = {name} = " not in page, name
    assert "scores = q @ k^T" in page and "weights = softmax(masked) along each row" in page

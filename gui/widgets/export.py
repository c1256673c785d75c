"""Export: the view as PNG/SVG, the trace as JSON, each matrix as CSV; every write is atomic."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re

from gui.present import view_model
from scratch.ops import atomic


def _plain(v: object) -> object:
    """JSON has no infinities or NaN: those become the strings '-inf', 'inf', 'nan'."""
    if isinstance(v, list):
        return [_plain(x) for x in v]
    v = float(v)
    return v if math.isfinite(v) else str(v)


def trace_dict(trace: object) -> dict:
    """Every step with its formula, note, axes, shape and values, plus labels and options."""
    return {
        "format": "scratch-attention trace",
        "version": 1,
        "nonfinite": "written as the strings '-inf', 'inf', 'nan'",
        "tokens": list(trace.tokens),
        "key_tokens": list(trace.key_tokens),
        "scale": trace.scale,
        "num_heads": trace.num_heads,
        "num_kv_heads": trace.num_kv_heads,
        "allowed": None if trace.allowed is None else [list(r) for r in trace.allowed],
        "options": trace.described(),
        "steps": [
            {
                "name": s.name,
                "formula": s.formula,
                "note": s.note,
                "axes": list(s.axes),
                "shape": list(s.shape),
                "value": _plain(view_model.step_array(s).tolist()),
            }
            for s in trace
        ],
    }


def save_trace_json(path: str | os.PathLike, trace: object) -> None:
    """The whole trace as JSON, written atomically."""
    atomic.write_text(path, json.dumps(trace_dict(trace), indent=1, allow_nan=False))


def matrix_csv(panel: view_model.Panel) -> str:
    """One 2-D panel as CSV: a header row of column labels, each row led by its label."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f"{panel.row_axis}\\{panel.col_axis}", *panel.col_labels])
    for label, row in zip(panel.row_labels, panel.raw.tolist()):
        writer.writerow([label, *(repr(float(v)) for v in row)])
    return out.getvalue()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def save_csvs(folder: str | os.PathLike, trace: object) -> list[str]:
    """One CSV per matrix (per head for head steps) in `folder`; returns the paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for n, name in enumerate(trace.names()):
        heads = [c for c in view_model.head_choices(trace, name) if c.isdigit()] or ["0"]
        for head in heads:
            panel = view_model.panels(trace, name, head)[0]
            suffix = f"_head{head}" if panel.head is not None else ""
            path = os.path.join(os.fspath(folder), f"{n:02d}_{_safe(name)}{suffix}.csv")
            atomic.write_text(path, matrix_csv(panel))
            paths.append(path)
    return paths


def widget_png(widget: object) -> bytes:
    """The widget as PNG bytes (QWidget.grab)."""
    from PyQt6.QtCore import QBuffer, QIODevice

    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not widget.grab().save(buffer, "PNG"):
        raise OSError("Qt could not encode the PNG")
    return bytes(buffer.data())


def save_png(path: str | os.PathLike, widget: object) -> None:
    """The widget as a PNG file, written atomically."""
    atomic.write_bytes(path, widget_png(widget))


def pixelated(svg: bytes) -> bytes:
    """Ask every SVG viewer to draw embedded images nearest-neighbour (no smoothing)."""
    return svg.replace(b"<image ", b'<image style="image-rendering:pixelated" ')


def widget_svg(widget: object, title: str = "attention") -> bytes:
    """The widget painted into an SVG document (QSvgGenerator); heatmap cells stay sharp."""
    from contextlib import ExitStack

    from PyQt6.QtCore import QBuffer, QIODevice, QRect
    from PyQt6.QtGui import QPainter
    from PyQt6.QtSvg import QSvgGenerator

    from gui.widgets.heatmap import Heatmap

    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    gen = QSvgGenerator()
    gen.setOutputDevice(buffer)
    gen.setSize(widget.size())
    gen.setViewBox(QRect(0, 0, widget.width(), widget.height()))
    gen.setTitle(title)
    with ExitStack() as stack:
        for heatmap in widget.findChildren(Heatmap):
            stack.enter_context(heatmap.crisp())
        painter = QPainter(gen)
        widget.render(painter)
        painter.end()
    return pixelated(bytes(buffer.data()))


def save_svg(path: str | os.PathLike, widget: object) -> None:
    """The widget as an SVG file, written atomically."""
    atomic.write_bytes(path, widget_svg(widget))

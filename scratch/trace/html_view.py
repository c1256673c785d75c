"""A trace or a model run as HTML for Jupyter (`_repr_html_`): heatmaps as coloured tables.

Plain Python, no dependency: each matrix is a <table> whose cells are coloured by value (weights
from white to dark blue over 0..1; signed steps blue below 0 and red above, darker with |value|,
on a scale symmetric about 0; masked -inf cells grey), with the tokens as row and column headers
and each cell's exact value in its tooltip. A matrix longer than MAX_SIDE along an axis is
thinned to every n-th row or column (the first always, the last when it falls on the step) and
a note under it says which; a step with heads shows head 0 and says how many there are. Labels
are escaped, so a token such as "<b>" is shown as typed.
"""

from __future__ import annotations

import html
import math

MAX_SIDE = 24  # rows or columns of one table; a longer axis is thinned to every n-th
NUMBERS_UP_TO = 12  # numbers are written in the cells while both sides are at most this
MAX_HEADS = 8  # a model run shows at most this many heads per layer
WHITE = (255, 255, 255)
DARK = {"weights": (8, 48, 107), "negative": (33, 102, 172), "positive": (178, 24, 43)}
GREY = "#d7d7d7"  # masked (-inf) cells, as in the window


def every(n: int, most: int = MAX_SIDE) -> int:
    """Every how many-th index of an axis of `n` is shown: 1 up to `most`."""
    return max(1, math.ceil(n / most))


def _mix(t: float, dark: tuple[int, int, int]) -> tuple[int, int, int]:
    """White at t = 0 to `dark` at t = 1 (t clamped): every channel moves one way."""
    t = min(max(t, 0.0), 1.0)
    return tuple(round(w + (d - w) * t) for w, d in zip(WHITE, dark))


def colour(value: float, kind: str, top: float) -> str:
    """The cell's background: weights over 0..1; signed over -top..top."""
    if value == -math.inf:
        return GREY
    if value != value:  # NaN
        return "#ffffff"
    if kind == "weights":
        rgb = _mix(value, DARK["weights"])
    else:
        rgb = _mix(
            abs(value) / top if top > 0 else 0.0, DARK["positive" if value > 0 else "negative"]
        )
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _number(v: float) -> str:
    if v in (math.inf, -math.inf) or v != v:
        return str(v)
    return f"{v:.2g}" if abs(v) < 0.01 and v != 0 else f"{v:.2f}"


def matrix_table(
    matrix: object, row_labels: list[str], col_labels: list[str], kind: str, title: str = ""
) -> str:
    """One matrix (anything indexable as matrix[i][j]) as a coloured table with a note."""
    n_rows, n_cols = len(row_labels), len(col_labels)
    row_step, col_step = every(n_rows), every(n_cols)
    rows, cols = range(0, n_rows, row_step), range(0, n_cols, col_step)
    cells = [[float(matrix[i][j]) for j in cols] for i in rows]
    finite = [abs(v) for row in cells for v in row if math.isfinite(v)]
    top = max(finite, default=0.0)
    write = len(rows) <= NUMBERS_UP_TO and len(cols) <= NUMBERS_UP_TO
    style = "border-collapse:collapse;font-size:10px;margin:2px 8px 2px 0"
    out = [f"<table style='{style}'>"]
    if title:
        out.append(f"<caption style='caption-side:top'>{html.escape(title)}</caption>")
    head = "".join(f"<th title='{j}'>{html.escape(col_labels[j])}</th>" for j in cols)
    out.append(f"<tr><th></th>{head}</tr>")
    for i, row in zip(rows, cells):
        tds = []
        for j, v in zip(cols, row):
            bg = colour(v, kind, top)
            dark = bg != GREY and sum(int(bg[k : k + 2], 16) for k in (1, 3, 5)) < 384
            text = _number(v) if write else ""
            tds.append(
                f"<td title='[{i}][{j}] = {v!r}' style='background:{bg};"
                f"color:{'white' if dark else 'black'};min-width:14px;height:14px;"
                f"text-align:center;padding:1px 3px'>{text}</td>"
            )
        out.append(f"<tr><th style='text-align:right'>{html.escape(row_labels[i])}</th>")
        out.append("".join(tds) + "</tr>")
    out.append("</table>")
    notes = []
    if row_step > 1 or col_step > 1:
        notes.append(
            f"{n_rows} x {n_cols}, thinned: every {row_step}-th row and every {col_step}-th "
            f"column shown ({len(rows)} x {len(cols)})"
        )
    if kind != "weights":
        notes.append(f"colour: blue &lt; 0 &lt; red, up to |value| {_number(top)}")
    note = "; ".join(notes)
    return "".join(out) + (f"<div style='font-size:9px;color:#555'>{note}</div>" if note else "")


def step_html(trace: object, step: object) -> str:
    """One step: its name, formula and shape, and its matrix (head 0 of a step with heads)."""
    value, axes = step.value, step.axes
    shape = step.shape
    said = step.formula  # 'q = x (no projection)': it names its step already ('x' is 'x')
    formula = html.escape(said if said.split(" = ")[0] == step.name else f"{step.name} = {said}")
    about = f"{formula} &nbsp; <span style='color:#555'>{' x '.join(map(str, shape))}"
    if axes and axes[0] == "head":
        value, axes = value[0], axes[1:]
        about += f" (head 0 of {shape[0]} shown)"
    about += "</span>"
    if len(axes) == 1:  # one number per token or feature: drawn as one row
        value, axes = [value], ("", axes[0])
    rows = trace.axis_labels(axes[0], len(value)) if axes[0] else [step.name]
    cols = trace.axis_labels(axes[1], len(value[0]))
    kind = "weights" if step.name == "weights" else "signed"
    return f"<div><b>{about}</b>{matrix_table(value, rows, cols, kind)}</div>"


def trace_html(trace: object) -> str:
    """Every step of a trace, in order, as coloured tables."""
    s = trace.source
    head = (
        f"<b>Trace</b>: {len(trace.tokens)} query and {len(trace.key_tokens)} key tokens, "
        f"{trace.num_heads} head(s), scale {trace.scale:.4g}, mask {html.escape(s.mask)}; "
        f"backend {html.escape(s.backend)} ({html.escape(s.dtype)}, {html.escape(s.kernel)})"
    )
    body = "".join(step_html(trace, step) for step in trace.steps)
    return f"<div style='font-family:sans-serif'>{head}{body}</div>"


def run_html(run: object) -> str:
    """A model run: the text, its tokens, the next-token guesses, the weights of the first and
    last layers' heads (at most MAX_HEADS each), and how to open any head's trace."""
    layers, heads = len(run.attentions), len(run.attentions[0])
    head = (
        f"<b>{html.escape(run.model.name)}</b> on {html.escape(repr(run.text))}: "
        f"{len(run.tokens)} tokens, {layers} layers x {heads} heads"
    )
    parts = [head]
    if run.logits is not None:
        guesses = ", ".join(f"{html.escape(repr(t))} {p:.2f}" for t, p in run.next_tokens(5))
        parts.append(f"<div>next token: {guesses}</div>")
    shown_layers = sorted({0, layers - 1})
    for layer in shown_layers:
        tables = "".join(
            matrix_table(run.attentions[layer][h], run.tokens, run.tokens, "weights", f"head {h}")
            for h in range(min(heads, MAX_HEADS))
        )
        more = f" (the first {MAX_HEADS} of {heads} heads)" if heads > MAX_HEADS else ""
        parts.append(f"<div><b>layer {layer} weights</b>{more}</div>")
        parts.append(f"<div style='display:flex;flex-wrap:wrap'>{tables}</div>")
    parts.append(
        "<div style='font-size:9px;color:#555'>every head: run.trace(layer, head) (its whole "
        "computation), or the window's Model tab</div>"
    )
    return f"<div style='font-family:sans-serif'>{''.join(parts)}</div>"

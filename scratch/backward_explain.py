"""How one entry of each backward step is explained, with the numbers that produced it.

The backward steps' counterpart of `scratch.step_explain` (same `Cell`, same `Explanation`):
`grad_scores[1][2] = weights[1][2] * (grad_weights[1][2] - row_dot[1]) = 0.21 * (0.4 - 0.1) =
0.063`. Sums show their terms, cut after MAX_TERMS like the forward's. A source (step, axis,
index) lights up row (axis 0) or column (axis 1) `index` of a step (of a one-axis step such as
row_dot or a bias: entry `index`).
"""

from __future__ import annotations

from math import exp, inf

from .step_explain import (
    MAX_TERMS,
    Cell,
    Explanation,
    column,
    head_block,
    listed,
    number,
    row_sums,
    terms,
)


def _in_head(cell: Cell, name: str, h: int) -> tuple[str, list]:
    """(label, rows) of step `name` in head h: 'grad_head_outputs[1]' and its rows with a head
    axis, else the whole step under its own name."""
    hs = f"[{h}]" if cell.trace[name].axes[:1] == ("head",) else ""
    return name + hs, cell.head(name, h)


def given(cell: Cell) -> Explanation:
    """dO: given, the gradient of the loss with respect to one output entry."""
    token = cell.trace.tokens[cell.i]
    return Explanation(
        f"{cell.label} = {number(cell.value)}: given, d loss / d output[{cell.i}][{cell.j}] "
        f"(token '{token}', feature {cell.j})"
    )


def weight(cell: Cell) -> Explanation:
    """A weight's gradient: column m of its input times column c of the output's gradient."""
    src, grad = cell.reads
    m, c = cell.i, cell.j
    a, b = column(cell.rows(src), m), column(cell.rows(grad), c)
    text = (
        f"{cell.label} = sum_i {src}[i][{m}] * {grad}[i][{c}] = {terms(a, b)}"
        f" = {number(cell.value)}"
    )
    return Explanation(text, ((src, 1, m), (grad, 1, c)))


def bias(cell: Cell) -> Explanation:
    """A bias's gradient: the column sum of the gradient of what it was added to."""
    (grad,) = cell.reads
    c = cell.i
    values = column(cell.rows(grad), c)
    shown = listed([number(x) for x in values[:MAX_TERMS]], len(values))
    text = f"{cell.label} = sum_i {grad}[i][{c}] = {shown} = {number(cell.value)}"
    return Explanation(text, ((grad, 1, c),))


def head_outputs(cell: Cell) -> Explanation:
    """dO of head h: a row of grad_output times a row of w_o (or grad_output's own column)."""
    h, i, c = cell.h, cell.i, cell.j
    grad, *w_o = cell.reads  # grad_output, and w_o when the heads were mixed by it
    d_v = len(cell.rows(cell.step)[0][0])
    col = h * d_v + c
    if not w_o:
        text = f"{cell.label} = {grad}[{i}][{col}] = {number(cell.value)} (head {h}'s columns)"
        return Explanation(text, ((grad, 0, i),))
    (w,) = w_o
    text = (
        f"{cell.label} = sum_n {grad}[{i}][n] * {w}[{col}][n] = "
        f"{terms(cell.rows(grad)[i], cell.rows(w)[col])} = {number(cell.value)}"
    )
    return Explanation(text, ((grad, 0, i), (w, 0, col)))


def value(cell: Cell) -> Explanation:
    """dV: key j's weights down every query row (of every head reading it) times dO's column."""
    t, j, col = cell.trace, cell.i, cell.j
    p_name, grad = cell.reads
    d_v = len(cell.rows("v")[0]) // t.num_kv_heads
    g, c = divmod(col, d_v)
    a, b = [], []
    for h in cell.group(g):
        a += column(cell.head(p_name, h), j)
        b += column(cell.head(grad, h), c)
    if cell.trace[grad].axes[:1] != ("head",):
        where = f"sum_i {p_name}[i][{j}] * {grad}[i][{c}]"
    else:
        where = (
            f"sum over heads h in {cell.group(g)}, rows i of "
            f"{p_name}[h][i][{j}] * {grad}[h][i][{c}]"
        )
    text = f"{cell.label} = {where} = {terms(a, b)} = {number(cell.value)}"
    return Explanation(text, ((p_name, 1, j), (grad, 1, c)))


def weights(cell: Cell) -> Explanation:
    """dP: head h's dO row i dotted with value row j (of its kv head)."""
    t, h, i, j = cell.trace, cell.h, cell.i, cell.j
    grad, v_name = cell.reads
    label, dO = _in_head(cell, grad, h)
    v = cell.rows(v_name)
    d_v = len(v[0]) // t.num_kv_heads
    g = cell.kv_head
    vj = head_block(v[j], g, t.num_kv_heads)
    cols = f"[{g * d_v}:{(g + 1) * d_v}]" if t.num_kv_heads > 1 else ""
    text = (
        f"{cell.label} = {label}[{i}] . {v_name}[{j}]{cols} = {terms(dO[i], vj)}"
        f" = {number(cell.value)}"
    )
    return Explanation(text, ((grad, 0, i), (v_name, 0, j)))


def row_dot(cell: Cell) -> Explanation:
    """D_i: head h's dO row i dotted with its output row i."""
    h, i = cell.h, cell.i
    grad, out = cell.reads
    label, dO = _in_head(cell, grad, h)
    text = (
        f"{cell.label} = {label}[{i}] . {out}{cell.hs}[{i}] = {terms(dO[i], cell.row(out))}"
        f" = {number(cell.value)}"
    )
    return Explanation(text, ((grad, 0, i), (out, 0, i)))


def scores(cell: Cell) -> Explanation:
    """dS = P * (dP - D) for one entry; 0 on a row whose keys are all masked ('zero', 'uniform')."""
    hs, i, j = cell.hs, cell.i, cell.j
    sources = (("weights", 0, i), ("grad_weights", 0, i), ("row_dot", 0, i))
    policy = cell.trace.options.masked_rows
    fully_masked = all(x == -inf for x in cell.row("masked"))
    if fully_masked and policy != "nan":
        return Explanation(
            f"{cell.label} = {number(cell.value)}: every key is masked for query "
            f"'{cell.trace.tokens[i]}', so masked_rows={policy!r} makes the row's weights a "
            f"constant and no gradient reaches its scores",
            sources,
        )
    p = cell.row("weights")[j]
    dp = cell.row("grad_weights")[j]
    d = cell.row("row_dot")
    dropout = cell.trace.options.dropout_p
    if dropout:  # P before dropout (from masked), dP after dropout's factor
        keep = 1 / (1 - dropout) if p != 0 else 0  # NaN (masked_rows="nan") counts as kept
        row = cell.row("masked")
        if row[j] != -inf:
            top, total, _ = row_sums(row)
            p = exp(row[j] - top) / total
        elif not fully_masked:
            p = 0.0  # a masked key: no weight before dropout either
        text = (
            f"{cell.label} = softmax(masked{hs}[{i}])[{j}] * (grad_weights{hs}[{i}][{j}] * keep"
            f" - row_dot{hs}[{i}]) = {number(p)} * ({number(dp)} * {number(keep)} - {number(d)})"
            f" = {number(cell.value)}"
        )
        return Explanation(text, (("masked", 0, i), *sources))
    text = (
        f"{cell.label} = weights{hs}[{i}][{j}] * (grad_weights{hs}[{i}][{j}] - row_dot{hs}[{i}])"
        f" = {number(p)} * ({number(dp)} - {number(d)}) = {number(cell.value)}"
    )
    return Explanation(text, sources)


def _scaled_sum(cell: Cell, where: str, a: list[float], b: list[float]) -> str:
    """'label = scale * where = scale * (terms) = value'."""
    s = number(cell.trace.scale)
    return f"{cell.label} = scale * {where} = {s} * ({terms(a, b)}) = {number(cell.value)}"


def query(cell: Cell) -> Explanation:
    """dQ: scale times row i of head h's dS times a column of k (its kv head's)."""
    t, i, col = cell.trace, cell.i, cell.j
    grad, k = cell.reads
    d = len(cell.rows("q")[0]) // t.num_heads
    h, c = divmod(col, d)
    kcol = cell.kv_of(h) * d + c
    label, dS = _in_head(cell, grad, h)
    where = f"sum_j {label}[{i}][j] * {k}[j][{kcol}]"
    text = _scaled_sum(cell, where, dS[i], column(cell.rows(k), kcol))
    return Explanation(text, ((grad, 0, i), (k, 1, kcol)))


def key(cell: Cell) -> Explanation:
    """dK: scale times column j of dS (every head reading this kv head) times a column of q."""
    t, j, col = cell.trace, cell.i, cell.j
    grad, q_name = cell.reads
    d = len(cell.rows("k")[0]) // t.num_kv_heads
    g, c = divmod(col, d)
    q = cell.rows(q_name)
    a, b = [], []
    for h in cell.group(g):
        a += column(cell.head(grad, h), j)
        b += column(q, h * d + c)
    if t[grad].axes[:1] == ("head",):
        where = (
            f"sum over heads h in {cell.group(g)}, rows i of "
            f"{grad}[h][i][{j}] * {q_name}[i][h*{d}+{c}]"
        )
    else:
        where = f"sum_i {grad}[i][{j}] * {q_name}[i][{c}]"
    text = _scaled_sum(cell, where, a, b)
    sources = ((grad, 1, j), *((q_name, 1, h * d + c) for h in cell.group(g)))
    return Explanation(text, sources)


def inputs(cell: Cell) -> Explanation:
    """An input's gradient: every projection it fed, carried back (grad @ w^T, or grad itself)."""
    i, m = cell.i, cell.j
    reads = list(cell.reads)
    parts, a, b, sources = [], [], [], []
    while reads:
        grad = reads.pop(0)
        w = reads.pop(0) if reads and reads[0].startswith("w_") else None
        row = cell.rows(grad)[i]
        sources.append((grad, 0, i))
        if w is None:  # no projection: the gradient passes straight through
            parts.append(f"{grad}[{i}][{m}]")
            a.append(row[m])
            b.append(1.0)
            continue
        parts.append(f"sum_c {grad}[{i}][c] * {w}[{m}][c]")
        a += row
        b += cell.rows(w)[m]
        sources.append((w, 0, m))
    text = f"{cell.label} = {' + '.join(parts)} = {terms(a, b)} = {number(cell.value)}"
    return Explanation(text, tuple(sources))

"""How one entry of each step is explained: one function per kind of step, read by the registry.

Each function takes a `Cell` (the entry, where it sits and the trace it sits in) and returns an
`Explanation`; `scratch.trace.steps` names which function explains which step. A variant's steps are
explained by the same functions: RoPE's angles, the score change, the rule's reason for a masked
key and the learned sink's term are the variant's own words (`Variant.explain`, `score_words`,
`Rotary.words`): nothing here restates a rule. The backward steps' texts show the numbers that
produced them the same way: `grad_scores[1][2] = weights[1][2] * (grad_weights[1][2] -
row_dot[1]) = 0.21 * (0.4 - 0.1) = 0.063`. A source (step, axis, index) lights up row (axis 0)
or column (axis 1) `index` of a step (of a one-axis step such as row_dot or a bias: entry
`index`).
"""

from __future__ import annotations

from collections.abc import Callable
from math import exp, fsum, inf

from scratch.trace.mask_words import MASK_WORDS
from scratch.trace.trace_types import Cell, Explanation

MAX_TERMS = 6  # longer sums show the first terms and a count of the rest


Explainer = Callable[[Cell], Explanation]


def number(x: float) -> str:
    """A number as the notebooks print it: short, no trailing zeros."""
    if x == inf or x == -inf or x != x:
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"


def listed(parts: list[str], n: int) -> str:
    """The first MAX_TERMS of n parts joined by ' + ', then a count of the rest."""
    text = " + ".join(parts[:MAX_TERMS])
    if n > MAX_TERMS:
        text += f" + ... ({n - MAX_TERMS} more terms)"
    return text


def terms(a: list[float], b: list[float], op: str = "*") -> str:
    """'a0*b0 + a1*b1 + ...', cut after MAX_TERMS terms."""
    return listed([f"{number(x)}{op}{number(y)}" for x, y in zip(a[:MAX_TERMS], b)], len(a))


def summed(cell: Cell, where: str, a: list, b: list, scaled: bool = False) -> str:
    """'label = where = a0*b0 + ... = value'; scaled: 'scale * where = s * (...)'."""
    if scaled:
        s = number(cell.trace.scale)
        return f"{cell.label} = scale * {where} = {s} * ({terms(a, b)}) = {number(cell.value)}"
    return f"{cell.label} = {where} = {terms(a, b)} = {number(cell.value)}"


def column(matrix: list[list[float]], c: int) -> list[float]:
    """Column c of a matrix."""
    return [row[c] for row in matrix]


def head_block(row: list[float], h: int, heads: int) -> list[float]:
    """Columns of head h in a (.., heads * d) row."""
    d = len(row) // heads
    return row[h * d : (h + 1) * d]


def why_masked(cell: Cell) -> str:
    """Why the mask hides this cell: a variant rule's own words ('masked (window: key 0 outside
    ...)', or 'seen (...)' for a cell it sees), else the trace's mask kind's reason."""
    t = cell.trace
    if t.source.mask == "variant":
        return cell.pieces.rule.explain(0, cell.h, cell.i, cell.j)
    kind = t.source.mask if t.source.mask != "none" else "float"  # -inf in a hand-made trace
    return MASK_WORDS[kind].why.format(q=t.tokens[cell.i], k=t.key_tokens[cell.j])


def given(cell: Cell) -> Explanation:
    """An input (or dO): no arithmetic, only which token and feature it is."""
    t = cell.trace
    axes = t[cell.step].axes
    who = {"query": t.tokens, "key": t.key_tokens}.get(axes[-2])
    label = f" (token '{who[cell.i]}', feature {cell.j})" if who else ""
    if cell.step == "grad_output":  # dO: the gradient of the loss by one output entry
        label = f", d loss / d output[{cell.i}][{cell.j}]{label}"
    return Explanation(f"{cell.label} = {number(cell.value)}: given{label}")


def projection(cell: Cell) -> Explanation:
    """q, k, v or the projected output: a row of its input times a column of its weight (plus
    the bias), or the input itself with no weight."""
    i, j = cell.i, cell.j
    src = cell.reads[0]
    if len(cell.reads) == 1:  # no projection: the input itself
        return Explanation(
            f"{cell.label} = {src}[{i}][{j}] = {number(cell.value)} (no projection)",
            ((src, 0, i),),
        )
    w_name = cell.reads[1]
    xi, wc = cell.rows(src)[i], column(cell.rows(w_name), j)
    text = f"{cell.label} = {src}[{i}] . {w_name}[:, {j}] = {terms(xi, wc)}"
    if cell.bias:
        text += _bias(cell, xi, wc, j)
    return Explanation(text + f" = {number(cell.value)}", ((src, 0, i), (w_name, 1, j)))


def _bias(cell: Cell, row: list, col: list, j: int) -> str:
    """' + 2 (b_q[1])': the bias term with its value, the cell less its products (the trace
    keeps no bias; the difference is the bias to within the cell's last-place rounding)."""
    b = cell.value - fsum(a * c for a, c in zip(row, col))
    return f" + {number(b)} ({cell.bias}[{j}])"


def scores(cell: Cell) -> Explanation:
    """A query row of head h dotted with a key row of its kv head."""
    t, i, j = cell.trace, cell.i, cell.j
    q, k = cell.reads  # q and k, or q_rotated and k_rotated under RoPE
    qi = head_block(cell.rows(q)[i], cell.h, t.num_heads)
    kj = head_block(cell.rows(k)[j], cell.kv_head, t.num_kv_heads)
    sub = f"_{cell.h}" if cell.heads else ""
    kv_sub = f"_{cell.kv_head}" if cell.heads else ""  # GQA: head h reads kv head h // group
    text = summed(cell, f"{q}{sub}[{i}] . {k}{kv_sub}[{j}]", qi, kj)
    return Explanation(text, ((q, 0, i), (k, 0, j)))


def rotated(cell: Cell) -> Explanation:
    """q_rotated or k_rotated: one feature of a head turned by its position's angle."""
    t, i, col = cell.trace, cell.i, cell.j
    name = cell.reads[0]  # q or k
    heads = t.num_heads if name == "q" else t.num_kv_heads
    row = cell.rows(name)[i]  # (H * d,)
    d = len(row) // heads
    head, feature = divmod(col, d)
    L, S = len(t.tokens), len(t.key_tokens)
    position = i + S - L if name == "q" else i
    words = cell.pieces.rotary.words(head_block(row, head, heads), position, feature, name)
    return Explanation(f"{cell.label} (head {head}, position {position}): {words}", ((name, 0, i),))


def scaled(cell: Cell) -> Explanation:
    """A score times the scale, then each score change of a variant with its own arithmetic."""
    h, i, j, scale = cell.h, cell.i, cell.j, cell.trace.scale
    (src,) = cell.reads
    s = cell.row(src)[j]
    p = cell.pieces
    changes = [] if p is None else [part for part in p.rules if part.score_mod is not None]
    at = f"{src}{cell.hs}[{i}][{j}] * scale"
    if not changes:
        text = f"{cell.label} = {at} = {number(s)} * {number(scale)} = {number(cell.value)}"
        return Explanation(text, ((src, 0, i),))
    score, words = s * scale, []
    for part in changes:  # in the order the variant applies them
        words.append(part.score_words(score, 0, h, i, j))
        score = part.score_mod(score, 0, h, i, j)
    text = (
        f"{cell.label} = score_mod({at}): {number(s)} * {number(scale)} = {number(s * scale)}; "
        + "; then ".join(words)
    )
    return Explanation(text, ((src, 0, i),))


def masked(cell: Cell) -> Explanation:
    """A scaled score, -inf where the mask hides the key, or plus a float mask."""
    (src,) = cell.reads
    s = cell.row(src)[cell.j]
    source = ((src, 0, cell.i),)
    if cell.value == -inf and s != -inf:
        return Explanation(f"{cell.label} = -inf: {why_masked(cell)}", source)
    at = f"{src}{cell.hs}[{cell.i}][{cell.j}]"
    if cell.trace.source.mask == "float":
        added = cell.value - s
        mask_at = f"attn_mask[{cell.i}][{cell.j}]"
        text = f"{cell.label} = {at} + {mask_at} = {number(s)} + {number(added)}"
        return Explanation(f"{text} = {number(cell.value)}", source)
    seen = why_masked(cell) if cell.trace.source.mask == "variant" else "not masked"
    return Explanation(f"{cell.label} = {at} = {number(cell.value)} ({seen})", source)


def _sink(cell: Cell) -> float | None:
    """The learned sink logit of this cell's head, or None without sinks."""
    p = cell.pieces
    return None if p is None or p.sinks is None else p.sinks.logits[cell.h]


def weights(cell: Cell) -> Explanation:
    """exp of the entry over the row's sum of exps (plus a learned sink's term), both relative
    to the max; then dropout's factor when asked; a masked key says why."""
    i, j, hs, h = cell.i, cell.j, cell.hs, cell.h
    (src,) = cell.reads
    row = cell.row(src)
    source = ((src, 0, i),)
    sink = _sink(cell)
    if sink is None and all(x == -inf for x in row):
        policy = cell.trace.options.masked_rows
        return Explanation(
            f"{cell.label} = {number(cell.value)}: every key is masked for query "
            f"'{cell.trace.tokens[i]}', so masked_rows={policy!r} decides",
            source,
        )
    top, keys, term = row_sums(row, sink)
    m = row[j]
    top_name = "max_row" if sink is None else "max"  # with a sink: the max of the row and sink
    denominator = f"sum_j exp({src}{hs}[{i}][j] - {top_name})"
    total = number(keys)
    if sink is not None:
        denominator = f"({denominator} + exp(sink[{h}] - max))"
        total = f"({number(keys)} + {number(term)})"
    p = cell.trace.options.dropout_p
    factor = product = ""
    if p and m != -inf:  # then dropout's factor: 1 / (1 - p) for a kept weight, 0 for a dropped one
        kept = cell.value != 0
        factor = " * 1/(1-p)" if kept else " * 0 (dropped)"
        product = f" = {number(exp(m - top) / keys)} * {number(1 / (1 - p)) if kept else 0}"
    text = (
        f"{cell.label} = exp({src}{hs}[{i}][{j}] - {top_name}) / {denominator}{factor}"
        f" = exp({number(m)} - {number(top)}) / {total}"
        # the difference itself too: from 4 digits of large logits it cannot be recomputed
        + ("" if m == -inf else f" = exp({number(m - top)}) / {total}")
        + f"{product} = {number(cell.value)}"
    )
    if cell.trace.source.mask == "variant":
        text += f" ({why_masked(cell)})"
    elif m == -inf:
        text += f" (masked: {why_masked(cell)})"
    return Explanation(text, source)


def row_sums(row: list[float], sink: float | None = None) -> tuple[float, float, float]:
    """(max, sum_j exp(x_j - max), exp(sink - max), 0 without a sink) of a row with a finite
    entry or a sink; the max is taken over the row and the sink."""
    top = max(row) if sink is None else max(max(row), sink)
    return top, fsum(exp(x - top) for x in row), 0.0 if sink is None else exp(sink - top)


def sink_weights(cell: Cell) -> Explanation:
    """The sink's share of one row: its term over the row's denominator."""
    h, i = cell.h, cell.i
    (src,) = cell.reads
    sink = _sink(cell)
    top, keys, term = row_sums(cell.row(src), sink)
    text = (
        f"{cell.label} = exp(sink[{h}] - max) / (sum_j exp({src}{cell.hs}[{i}][j] - max) + "
        f"exp(sink[{h}] - max)) = exp({number(sink)} - {number(top)}) / ({number(keys)} + "
        f"{number(term)}) = {number(cell.value)}: the share of query '{cell.trace.tokens[i]}' "
        "that goes to no key"
    )
    return Explanation(text, ((src, 0, i),))


def weighted_values(cell: Cell) -> Explanation:
    """A row of weights times a column of v (of the kv head this head reads)."""
    t, i, j, hk = cell.trace, cell.i, cell.j, cell.kv_head
    w_name, v_name = cell.reads
    v = cell.rows(v_name)
    vc = [head_block(r, hk, t.num_kv_heads)[j] for r in v]
    col = hk * (len(v[0]) // t.num_kv_heads) + j
    text = summed(
        cell, f"sum_j {w_name}{cell.hs}[{i}][j] * {v_name}[j][{col}]", cell.row(w_name), vc
    )
    return Explanation(text, ((w_name, 0, i), (v_name, 1, col)))


def side_by_side(cell: Cell) -> Explanation:
    """An entry of the heads' outputs laid side by side: which head and column it came from."""
    (src,) = cell.reads
    d_v = len(cell.rows(src)[0][0])
    head, c = divmod(cell.j, d_v)
    return Explanation(
        f"{cell.label} = {src}[{head}][{cell.i}][{c}] = {number(cell.value)} (head {head})",
        ((src, 0, cell.i),),
    )


# -- the backward steps (9-16)


def _in_head(cell: Cell, name: str, h: int) -> tuple[str, list]:
    """(label, rows) of step `name` in head h: 'grad_head_outputs[1]' and its rows with a head
    axis, else the whole step under its own name."""
    hs = f"[{h}]" if cell.trace[name].axes[:1] == ("head",) else ""
    return name + hs, cell.head(name, h)


def weight_grad(cell: Cell) -> Explanation:
    """A weight's gradient: column m of its input times column c of the output's gradient."""
    src, grad = cell.reads
    m, c = cell.i, cell.j
    a, b = column(cell.rows(src), m), column(cell.rows(grad), c)
    text = summed(cell, f"sum_i {src}[i][{m}] * {grad}[i][{c}]", a, b)
    return Explanation(text, ((src, 1, m), (grad, 1, c)))


def bias_grad(cell: Cell) -> Explanation:
    """A bias's gradient: the column sum of the gradient of what it was added to."""
    (grad,) = cell.reads
    c = cell.i
    values = column(cell.rows(grad), c)
    shown = listed([number(x) for x in values[:MAX_TERMS]], len(values))
    text = f"{cell.label} = sum_i {grad}[i][{c}] = {shown} = {number(cell.value)}"
    return Explanation(text, ((grad, 1, c),))


def grad_head_outputs(cell: Cell) -> Explanation:
    """dO of head h: a row of grad_output times a row of w_o (or grad_output's own column)."""
    h, i, c = cell.h, cell.i, cell.j
    grad, *w_o = cell.reads  # grad_output, and w_o when the heads were mixed by it
    d_v = len(cell.rows(cell.step)[0][0])
    col = h * d_v + c
    if not w_o:
        text = f"{cell.label} = {grad}[{i}][{col}] = {number(cell.value)} (head {h}'s columns)"
        return Explanation(text, ((grad, 0, i),))
    (w,) = w_o
    where = f"sum_n {grad}[{i}][n] * {w}[{col}][n]"
    text = summed(cell, where, cell.rows(grad)[i], cell.rows(w)[col])
    return Explanation(text, ((grad, 0, i), (w, 0, col)))


def grad_value(cell: Cell) -> Explanation:
    """dV: key j's weights down every query row (of every head reading it) times dO's column."""
    j, (g, c, _) = cell.i, _kv_column(cell, "v")
    p_name, grad = cell.reads
    a, b = _over_group(cell, g, lambda h: column(cell.head(p_name, h), j),
                       lambda h: column(cell.head(grad, h), c))  # fmt: skip
    if cell.trace[grad].axes[:1] != ("head",):
        where = f"sum_i {p_name}[i][{j}] * {grad}[i][{c}]"
    else:
        where = (
            f"sum over heads h in {cell.group(g)}, rows i of "
            f"{p_name}[h][i][{j}] * {grad}[h][i][{c}]"
        )
    return Explanation(summed(cell, where, a, b), ((p_name, 1, j), (grad, 1, c)))


def grad_weights(cell: Cell) -> Explanation:
    """dP: head h's dO row i dotted with value row j (of its kv head)."""
    t, h, i, j = cell.trace, cell.h, cell.i, cell.j
    grad, v_name = cell.reads
    label, dO = _in_head(cell, grad, h)
    v = cell.rows(v_name)
    d_v = len(v[0]) // t.num_kv_heads
    g = cell.kv_head
    vj = head_block(v[j], g, t.num_kv_heads)
    cols = f"[{g * d_v}:{(g + 1) * d_v}]" if t.num_kv_heads > 1 else ""
    text = summed(cell, f"{label}[{i}] . {v_name}[{j}]{cols}", dO[i], vj)
    return Explanation(text, ((grad, 0, i), (v_name, 0, j)))


def row_dot(cell: Cell) -> Explanation:
    """D_i: head h's dO row i dotted with its output row i."""
    h, i = cell.h, cell.i
    grad, out = cell.reads
    label, dO = _in_head(cell, grad, h)
    text = summed(cell, f"{label}[{i}] . {out}{cell.hs}[{i}]", dO[i], cell.row(out))
    return Explanation(text, ((grad, 0, i), (out, 0, i)))


def grad_scores(cell: Cell) -> Explanation:
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


def _kv_column(cell: Cell, name: str) -> tuple[int, int, int]:
    """(kv head g, column c in it, its width) of this cell's column of k or v (`name`)."""
    d = len(cell.rows(name)[0]) // cell.trace.num_kv_heads
    return (*divmod(cell.j, d), d)


def _over_group(cell: Cell, g: int, a_of, b_of) -> tuple[list, list]:
    """The two factors' terms of a sum over every query head reading kv head g, head by head."""
    pairs = [(a_of(h), b_of(h)) for h in cell.group(g)]
    return [x for a, _ in pairs for x in a], [y for _, b in pairs for y in b]


def grad_query(cell: Cell) -> Explanation:
    """dQ: scale times row i of head h's dS times a column of k (its kv head's)."""
    t, i, col = cell.trace, cell.i, cell.j
    grad, k = cell.reads
    d = len(cell.rows("q")[0]) // t.num_heads
    h, c = divmod(col, d)
    kcol = cell.kv_of(h) * d + c
    label, dS = _in_head(cell, grad, h)
    where = f"sum_j {label}[{i}][j] * {k}[j][{kcol}]"
    text = summed(cell, where, dS[i], column(cell.rows(k), kcol), scaled=True)
    return Explanation(text, ((grad, 0, i), (k, 1, kcol)))


def grad_key(cell: Cell) -> Explanation:
    """dK: scale times column j of dS (every head reading this kv head) times a column of q."""
    t, j, (g, c, d) = cell.trace, cell.i, _kv_column(cell, "k")
    grad, q_name = cell.reads
    q = cell.rows(q_name)
    a, b = _over_group(cell, g, lambda h: column(cell.head(grad, h), j),
                       lambda h: column(q, h * d + c))  # fmt: skip
    if t[grad].axes[:1] == ("head",):
        where = (
            f"sum over heads h in {cell.group(g)}, rows i of "
            f"{grad}[h][i][{j}] * {q_name}[i][h*{d}+{c}]"
        )
    else:
        where = f"sum_i {grad}[i][{j}] * {q_name}[i][{c}]"
    text = summed(cell, where, a, b, scaled=True)
    sources = ((grad, 1, j), *((q_name, 1, h * d + c) for h in cell.group(g)))
    return Explanation(text, sources)


def input_grad(cell: Cell) -> Explanation:
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
    return Explanation(summed(cell, " + ".join(parts), a, b), tuple(sources))

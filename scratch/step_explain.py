"""How one entry of each step is explained: one function per kind of step, read by the registry.

Each function takes a `Cell` (the entry, where it sits and the trace it sits in) and returns an
`Explanation`; `scratch.steps` names which function explains which step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import exp, fsum, inf

from .mask_words import MASK_WORDS

MAX_TERMS = 6  # longer sums show the first terms and a count of the rest


@dataclass(frozen=True)
class Explanation:
    """The text shown on hover and the input rows/columns to highlight."""

    text: str
    sources: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class Cell:
    """One entry of a step: its value, where it sits (h, i, j), and what the step reads."""

    trace: object  # a scratch.Trace
    step: str
    value: float
    h: int  # head (0 for a step with no head axis)
    i: int  # row
    j: int  # column
    heads: bool  # whether the step has a head axis
    reads: tuple[str, ...]  # the steps this one reads, from the registry
    bias: str  # the bias the call added to this step (b_q, b_o), or ''
    index: tuple[int, ...] = ()  # the whole index (steps with one axis besides the head)

    @property
    def hs(self) -> str:
        """'[h]' for a step with a head axis, else ''."""
        return f"[{self.h}]" if self.heads else ""

    @property
    def label(self) -> str:
        """'scores[0][1]' or 'scores[1][0][1]' (or 'row_dot[2]': the index as given)."""
        if self.index:
            return self.step + "".join(f"[{n}]" for n in self.index)
        return f"{self.step}{self.hs}[{self.i}][{self.j}]"

    @property
    def kv_head(self) -> int:
        """The key/value head that query head h reads."""
        t = self.trace
        return self.h // (t.num_heads // t.num_kv_heads)

    def rows(self, name: str) -> list:
        """Step `name` of the trace as nested lists."""
        return self.trace[name].tolist()

    def head_row(self, name: str) -> list:
        """Row i of step `name`, in head h when this step has a head axis."""
        value = self.rows(name)
        return value[self.h][self.i] if self.heads else value[self.i]


Explainer = Callable[[Cell], Explanation]


def number(x: float) -> str:
    """A number as the notebooks print it: short, no trailing zeros."""
    if x == inf or x == -inf or x != x:
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"


def terms(a: list[float], b: list[float], op: str = "*") -> str:
    """'a0*b0 + a1*b1 + ...', cut after MAX_TERMS terms."""
    parts = [f"{number(x)}{op}{number(y)}" for x, y in zip(a[:MAX_TERMS], b[:MAX_TERMS])]
    text = " + ".join(parts)
    if len(a) > MAX_TERMS:
        text += f" + ... ({len(a) - MAX_TERMS} more terms)"
    return text


def column(matrix: list[list[float]], c: int) -> list[float]:
    """Column c of a matrix."""
    return [row[c] for row in matrix]


def _head_block(row: list[float], h: int, heads: int) -> list[float]:
    """Columns of head h in a (.., heads * d) row."""
    d = len(row) // heads
    return row[h * d : (h + 1) * d]


def _why_masked(cell: Cell) -> str:
    """Plain-English reason a position is masked."""
    t = cell.trace
    kind = t.source.mask if t.source.mask != "none" else "float"  # -inf in a hand-made trace
    why = MASK_WORDS[kind].why
    return why.format(q=t.tokens[cell.i], k=t.key_tokens[cell.j])


def given(cell: Cell) -> Explanation:
    """An input: no arithmetic, only which token and feature it is."""
    t = cell.trace
    axes = t[cell.step].axes
    who = {"query": t.tokens, "key": t.key_tokens}.get(axes[-2])
    label = f" (token '{who[cell.i]}', feature {cell.j})" if who else ""
    return Explanation(f"{cell.label} = {number(cell.value)}: given{label}")


def projection(cell: Cell) -> Explanation:
    """q, k or v: a row of its input times a column of its weight (plus the bias), or the input."""
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
    qi = _head_block(cell.rows(q)[i], cell.h, t.num_heads)
    kj = _head_block(cell.rows(k)[j], cell.kv_head, t.num_kv_heads)
    sub = f"_{cell.h}" if cell.heads else ""
    kv_sub = f"_{cell.kv_head}" if cell.heads else ""  # GQA: head h reads kv head h // group
    text = (
        f"{cell.label} = {q}{sub}[{i}] . {k}{kv_sub}[{j}] = {terms(qi, kj)} = {number(cell.value)}"
    )
    return Explanation(text, ((q, 0, i), (k, 0, j)))


def scaled(cell: Cell) -> Explanation:
    """A score times the scale."""
    s = cell.head_row("scores")[cell.j]
    text = (
        f"{cell.label} = scores{cell.hs}[{cell.i}][{cell.j}] * scale = {number(s)} * "
        f"{number(cell.trace.scale)} = {number(cell.value)}"
    )
    return Explanation(text, (("scores", 0, cell.i),))


def masked(cell: Cell) -> Explanation:
    """A scaled score, -inf where the mask hides the key, or plus a float mask."""
    s = cell.head_row("scaled")[cell.j]
    source = (("scaled", 0, cell.i),)
    if cell.value == -inf and s != -inf:
        return Explanation(f"{cell.label} = -inf: {_why_masked(cell)}", source)
    if cell.trace.source.mask == "float":
        added = cell.value - s
        at = f"[{cell.i}][{cell.j}]"
        text = f"{cell.label} = scaled{cell.hs}{at} + attn_mask{at} = {number(s)} + {number(added)}"
        return Explanation(f"{text} = {number(cell.value)}", source)
    text = f"{cell.label} = scaled{cell.hs}[{cell.i}][{cell.j}] = {number(cell.value)}"
    return Explanation(text + " (not masked)", source)


def weights(cell: Cell) -> Explanation:
    """exp of the entry over the row's sum of exps, both relative to the row max."""
    i, j, hs = cell.i, cell.j, cell.hs
    row = cell.head_row("masked")
    source = (("masked", 0, i),)
    if all(x == -inf for x in row):
        policy = cell.trace.options.masked_rows
        return Explanation(
            f"{cell.label} = {number(cell.value)}: every key is masked for query "
            f"'{cell.trace.tokens[i]}', so masked_rows={policy!r} decides",
            source,
        )
    top, total, soft = softmax_of(row, j)
    m = row[j]
    p = cell.trace.options.dropout_p
    factor = product = ""
    if p and m != -inf:  # then dropout's factor: 1 / (1 - p) for a kept weight, 0 for a dropped one
        kept = cell.value != 0
        factor = " * 1/(1-p)" if kept else " * 0 (dropped)"
        product = f" = {number(soft)} * {number(1 / (1 - p)) if kept else 0}"
    text = (
        f"{cell.label} = exp(masked{hs}[{i}][{j}] - max_row) / "
        f"sum_j exp(masked{hs}[{i}][j] - max_row){factor}"
        f" = exp({number(m)} - {number(top)}) / {number(total)}"
        # the difference itself too: from 4 digits of large logits it cannot be recomputed
        + ("" if m == -inf else f" = exp({number(m - top)}) / {number(total)}")
        + f"{product} = {number(cell.value)}"
    )
    if m == -inf:
        text += f" (masked: {_why_masked(cell)})"
    return Explanation(text, source)


def softmax_of(row: list[float], j: int) -> tuple[float, float, float]:
    """(row max, sum_j exp(x_j - max), softmax of entry j) for a row with a finite entry."""
    top = max(row)
    total = fsum(exp(x - top) for x in row)
    return top, total, exp(row[j] - top) / total


def weighted_values(cell: Cell) -> Explanation:
    """A row of weights times a column of v (of the kv head this head reads)."""
    t, i, j, hk = cell.trace, cell.i, cell.j, cell.kv_head
    wi = cell.head_row("weights")
    v = cell.rows("v")
    vc = [_head_block(r, hk, t.num_kv_heads)[j] for r in v]
    col = hk * (len(v[0]) // t.num_kv_heads) + j
    text = (
        f"{cell.label} = sum_j weights{cell.hs}[{i}][j] * v[j][{col}] = {terms(wi, vc)}"
        f" = {number(cell.value)}"
    )
    return Explanation(text, (("weights", 0, i), ("v", 1, col)))


def side_by_side(cell: Cell) -> Explanation:
    """An entry of the heads' outputs laid side by side: which head and column it came from."""
    d_v = len(cell.rows("head_outputs")[0][0])
    head, c = divmod(cell.j, d_v)
    return Explanation(
        f"{cell.label} = head_outputs[{head}][{cell.i}][{c}] = {number(cell.value)} (head {head})",
        (("head_outputs", 0, cell.i),),
    )


def output_projection(cell: Cell) -> Explanation:
    """A row of concat times a column of w_o (plus b_o)."""
    i, j = cell.i, cell.j
    ci, wc = cell.rows("concat")[i], column(cell.rows("w_o"), j)
    text = f"{cell.label} = sum_m concat[{i}][m] * w_o[m][{j}] = {terms(ci, wc)}"
    if cell.bias:
        text += _bias(cell, ci, wc, j)
    return Explanation(text + f" = {number(cell.value)}", (("concat", 0, i), ("w_o", 1, j)))

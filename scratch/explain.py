"""Where one number of a trace came from, written out with the actual numbers.

`explain(trace, "scores", (0, 1)).text` reads
`scores[0][1] = q_0 . k_1 = 2*4 + 2*4 + 2*0 = 16`, and `.sources` names the rows and columns of
the earlier steps that fed it, as (step, axis, index) with axis 0 = row, 1 = column. The window
shows these texts; it never does the arithmetic itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import exp, fsum, inf

from .trace import Trace

MAX_TERMS = 6  # longer sums show the first terms and a count of the rest


@dataclass(frozen=True)
class Explanation:
    """The text shown on hover and the input rows/columns to highlight."""

    text: str
    sources: tuple[tuple[str, int, int], ...] = ()


def _num(x: float) -> str:
    """A number as the notebooks print it: short, no trailing zeros."""
    if x == inf or x == -inf or x != x:
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"


def _terms(a: list[float], b: list[float], op: str = "*") -> str:
    """'a0*b0 + a1*b1 + ...', cut after MAX_TERMS terms."""
    parts = [f"{_num(x)}{op}{_num(y)}" for x, y in zip(a[:MAX_TERMS], b[:MAX_TERMS])]
    text = " + ".join(parts)
    if len(a) > MAX_TERMS:
        text += f" + ... ({len(a) - MAX_TERMS} more terms)"
    return text


def _column(matrix: list[list[float]], c: int) -> list[float]:
    return [row[c] for row in matrix]


def _head_block(row: list[float], h: int, heads: int) -> list[float]:
    """Columns of head h in a (.., heads * d) row."""
    d = len(row) // heads
    return row[h * d : (h + 1) * d]


def _why_masked(trace: Trace, i: int, j: int) -> str:
    """Plain-English reason a position is masked."""
    q_tok, k_tok = trace.tokens[i], trace.key_tokens[j]
    kind = trace.options.get("mask")
    if kind == "causal":
        return f"key '{k_tok}' comes after query '{q_tok}' (causal mask)"
    if kind == "bool":
        return f"attn_mask is False for query '{q_tok}', key '{k_tok}'"
    return f"attn_mask is -inf for query '{q_tok}', key '{k_tok}'"


def explain(trace: Trace, step: str, index: tuple[int, ...]) -> Explanation:
    """Explain the entry `trace[step].value[index]` with the numbers that produced it."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace: expected a scratch.Trace, found {type(trace).__name__}")
    names = trace.names()
    if not isinstance(step, str) or step not in names:
        raise ValueError(f"step: expected one of {', '.join(names)}, found {step!r}")
    st = trace[step]
    value = st.tolist()
    if not isinstance(index, tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in index
    ):
        raise TypeError(f"index: expected a tuple of ints, found {index!r}")
    if len(index) != len(st.axes):
        raise ValueError(f"index: expected {len(st.axes)} indices for step {step!r}, found {index}")
    heads = st.axes[0] == "head"
    h = index[0] if heads else 0
    cell = value
    for n, i in zip(st.shape, index):
        if not 0 <= i < n:
            raise ValueError(f"index: {index} is outside step {step!r} of shape {st.shape}")
        cell = cell[i]
    i, j = index[-2], index[-1]
    hs = f"[{h}]" if heads else ""
    name = f"{step}{hs}[{i}][{j}]"
    H, Hkv = trace.num_heads, trace.num_kv_heads
    hk = h // (H // Hkv)

    def rows(step_name: str) -> list:
        return trace[step_name].tolist()

    if step == "scores":
        qi = _head_block(rows("q")[i], h, H)
        kj = _head_block(rows("k")[j], hk, Hkv)
        sub = f"_{h}" if heads else ""
        text = f"{name} = q{sub}[{i}] . k{sub}[{j}] = {_terms(qi, kj)} = {_num(cell)}"
        return Explanation(text, (("q", 0, i), ("k", 0, j)))
    if step == "scaled":
        s = rows("scores")[h][i][j] if heads else rows("scores")[i][j]
        text = (
            f"{name} = scores{hs}[{i}][{j}] * scale = {_num(s)} * {_num(trace.scale)}"
            f" = {_num(cell)}"
        )
        return Explanation(text, (("scores", 0, i),))
    if step == "masked":
        sc = rows("scaled")
        s = sc[h][i][j] if heads else sc[i][j]
        if cell == -inf and s != -inf:
            return Explanation(f"{name} = -inf: {_why_masked(trace, i, j)}", (("scaled", 0, i),))
        if trace.options.get("mask") == "float":
            add = cell - s
            return Explanation(
                f"{name} = scaled + attn_mask = {_num(s)} + {_num(add)} = {_num(cell)}",
                (("scaled", 0, i),),
            )
        return Explanation(
            f"{name} = scaled{hs}[{i}][{j}] = {_num(cell)} (not masked)", (("scaled", 0, i),)
        )
    if step == "weights":
        row = rows("masked")[h][i] if heads else rows("masked")[i]
        if all(x == -inf for x in row):
            policy = trace.options.get("masked_rows", "zero")
            return Explanation(
                f"{name} = {_num(cell)}: every key is masked for query '{trace.tokens[i]}', "
                f"so masked_rows={policy!r} decides",
                (("masked", 0, i),),
            )
        top = max(row)
        total = fsum(exp(x - top) for x in row)
        m = row[j]
        text = (
            f"{name} = exp(masked{hs}[{i}][{j}] - max_row) / "
            f"sum_j exp(masked{hs}[{i}][j] - max_row)"
            f" = exp({_num(m)} - {_num(top)}) / {_num(total)} = {_num(cell)}"
        )
        if m == -inf:
            text += f" (masked: {_why_masked(trace, i, j)})"
        return Explanation(text, (("masked", 0, i),))
    if step in ("output", "head_outputs") and (
        step == "head_outputs" or "head_outputs" not in trace
    ):
        w = rows("weights")
        wi = w[h][i] if heads else w[i]
        v = rows("v")
        vc = [_head_block(r, hk, Hkv)[j] for r in v]
        d_v = len(v[0]) // Hkv
        text = (
            f"{name} = sum_j weights{hs}[{i}][j] * v[j][{hk * d_v + j}] = {_terms(wi, vc)}"
            f" = {_num(cell)}"
        )
        return Explanation(text, (("weights", 0, i), ("v", 1, hk * d_v + j)))
    if step == "concat" or (step == "output" and "concat" not in trace and "head_outputs" in trace):
        d_v = len(rows("head_outputs")[0][0])
        return Explanation(
            f"{name} = head_outputs[{j // d_v}][{i}][{j % d_v}] = {_num(cell)} (head {j // d_v})",
            (("head_outputs", 0, i),),
        )
    if step == "output":  # concat @ w_o (+ b_o)
        ci = rows("concat")[i]
        wc = _column(rows("w_o"), j)
        text = f"{name} = sum_m concat[{i}][m] * w_o[m][{j}] = {_terms(ci, wc)}"
        if "+ b_o" in st.formula:
            text += " + b_o"
        return Explanation(text + f" = {_num(cell)}", (("concat", 0, i), ("w_o", 1, j)))
    if step in ("q", "k", "v"):
        src = {
            "q": "x",
            "k": "key_input" if "key_input" in trace else "x",
            "v": "value_input"
            if "value_input" in trace
            else ("key_input" if "key_input" in trace else "x"),
        }[step]
        w_name = f"w_{step}"
        if w_name not in trace:
            return Explanation(
                f"{name} = {src}[{i}][{j}] = {_num(cell)} (no projection)", ((src, 0, i),)
            )
        xi = rows(src)[i]
        wc = _column(rows(w_name), j)
        text = f"{name} = {src}[{i}] . {w_name}[:, {j}] = {_terms(xi, wc)}"
        if "+ b_" in st.formula:
            text += f" + b_{step}[{j}]"
        return Explanation(text + f" = {_num(cell)}", ((src, 0, i), (w_name, 1, j)))
    who = {"query": trace.tokens, "key": trace.key_tokens}.get(st.axes[-2])
    label = f" (token '{who[i]}', feature {j})" if who else ""
    return Explanation(f"{name} = {_num(cell)}: given{label}")

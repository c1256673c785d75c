"""Hover text of a variant's steps: RoPE's angles, the score change, the rule, the sink's column.

Each function explains one entry of a trace whose Options hold a variant, and hands every other
trace to the plain explainer of scratch.step_explain. The words of a rule and of a score change
are the variant's own (`Variant.explain`, `score_words`, `Rotary.words`): nothing here restates
a rule.
"""

from __future__ import annotations

from math import exp, fsum, inf

from . import step_explain as plain
from .step_explain import Cell, Explanation, number
from .variant_steps import Pieces, pieces


def _pieces(cell: Cell) -> Pieces | None:
    """The trace's variant taken apart, or None for a trace without one."""
    options = cell.trace.options
    return None if options.variant is None else pieces(options)


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
    words = _pieces(cell).rotary.words(row[head * d : (head + 1) * d], position, feature, name)
    return Explanation(f"{cell.label} (head {head}, position {position}): {words}", ((name, 0, i),))


def scaled(cell: Cell) -> Explanation:
    """scores * scale, then each score change of the variant with its own arithmetic."""
    p = _pieces(cell)
    if p is None or p.rule is None or p.rule.score_mod is None:
        return plain.scaled(cell)
    h, i, j = cell.h, cell.i, cell.j
    s = cell.head_row("scores")[j]
    score = s * cell.trace.scale
    words = []
    for part in p.rules:  # in the order the variant applies them
        if part.score_mod is not None:
            words.append(part.score_words(score, 0, h, i, j))
            score = part.score_mod(score, 0, h, i, j)
    text = (
        f"{cell.label} = score_mod(scores{cell.hs}[{i}][{j}] * scale): {number(s)} * "
        f"{number(cell.trace.scale)} = {number(s * cell.trace.scale)}; " + "; then ".join(words)
    )
    return Explanation(text, (("scores", 0, i),))


def rule_words(cell: Cell) -> str:
    """Why the variant's rule sees or masks this cell ('masked (window: key 0 outside ...)')."""
    return _pieces(cell).rule.explain(0, cell.h, cell.i, cell.j)


def masked(cell: Cell) -> Explanation:
    """The scaled score, or -inf with the variant's reason."""
    if cell.trace.source.mask != "variant":
        return plain.masked(cell)
    s = cell.head_row("scaled")[cell.j]
    source = (("scaled", 0, cell.i),)
    if cell.value == -inf and s != -inf:
        return Explanation(f"{cell.label} = -inf: {rule_words(cell)}", source)
    text = f"{cell.label} = scaled{cell.hs}[{cell.i}][{cell.j}] = {number(cell.value)}"
    return Explanation(f"{text} ({rule_words(cell)})", source)


def _sums(cell: Cell, sink: float | None) -> tuple[float, float, float]:
    """(top, sum_j exp(masked - top), exp(sink - top)) of this cell's row (0 without a sink)."""
    row = cell.head_row("masked")
    top = max(row) if sink is None else max(max(row), sink)
    return top, fsum(exp(x - top) for x in row), 0.0 if sink is None else exp(sink - top)


def weights(cell: Cell) -> Explanation:
    """Softmax with the sink's term in the denominator; a masked key says the variant's rule."""
    p = _pieces(cell)
    row = cell.head_row("masked")
    plain_row = p is None or p.sinks is None and (p.rule is None or all(x == -inf for x in row))
    if plain_row:  # no variant, or a fully masked row: masked_rows decides
        return plain.weights(cell)
    i, j, hs, h = cell.i, cell.j, cell.hs, cell.h
    sink = None if p.sinks is None else p.sinks.logits[h]
    top, keys, term = _sums(cell, sink)
    m = row[j]
    denominator = f"sum_j exp(masked{hs}[{i}][j] - max)"
    numbers = number(keys)
    if sink is not None:
        denominator = f"({denominator} + exp(sink[{h}] - max))"
        numbers = f"({number(keys)} + {number(term)})"
    text = (
        f"{cell.label} = exp(masked{hs}[{i}][{j}] - max) / {denominator} = "
        f"exp({number(m)} - {number(top)}) / {numbers} = {number(cell.value)}"
    )
    if p.rule is not None and p.rule.mask_mod is not None:
        text += f" ({rule_words(cell)})"
    return Explanation(text, (("masked", 0, i),))


def sink_weights(cell: Cell) -> Explanation:
    """The sink's share of one row: its term over the row's denominator."""
    h, i = cell.h, cell.i
    sink = _pieces(cell).sinks.logits[h]
    top, keys, term = _sums(cell, sink)
    text = (
        f"{cell.label} = exp(sink[{h}] - max) / (sum_j exp(masked{cell.hs}[{i}][j] - max) + "
        f"exp(sink[{h}] - max)) = exp({number(sink)} - {number(top)}) / ({number(keys)} + "
        f"{number(term)}) = {number(cell.value)}: the share of query '{cell.trace.tokens[i]}' "
        "that goes to no key"
    )
    return Explanation(text, (("masked", 0, i),))


__all__ = ["masked", "rotated", "rule_words", "scaled", "sink_weights", "weights"]

"""Plain-English sentences about a step, made from its values by string formatting only."""

from __future__ import annotations

import math
from collections.abc import Sequence

Row = Sequence[float]


def _fmt(v: float) -> str:
    """Whole numbers as such, two decimals for everyday numbers, 3 digits for tiny or huge."""
    if not math.isfinite(v):
        return str(v)
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    if 0.01 <= abs(v) < 1000:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _ranked(row: Row) -> list[int]:
    """Column indices of the finite entries, largest first (ties keep column order)."""
    finite = [j for j, v in enumerate(row) if math.isfinite(v)]
    return sorted(finite, key=lambda j: -row[j])


def _join(parts: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def attention_sentence(row: Row, query: str, keys: Sequence[str], top: int = 2) -> str:
    """The sentence "'journey' attends most to 'journey' (0.24) and ..." for one weights row."""
    if any(math.isnan(v) for v in row):
        return f"'{query}' has no weights: every key is masked and the row is NaN."
    if all(v == 0 for v in row):
        return f"'{query}' attends to nothing: every key is masked, so its weights are all 0."
    ranked = _ranked(row)
    if row[ranked[0]] - row[ranked[-1]] < 5e-3 and len(ranked) > 1:
        return f"'{query}' attends to all {len(ranked)} keys about equally ({_fmt(row[0])} each)."
    picks = [j for j in ranked[:top] if row[j] > 0]
    return f"'{query}' attends most to " + _join([f"'{keys[j]}' ({_fmt(row[j])})" for j in picks])


def _period(sentence: str) -> str:
    """End a sentence with one full stop."""
    return sentence if sentence.endswith(".") else sentence + "."


def sharpest_row(matrix: Sequence[Row]) -> int:
    """The row whose largest finite weight is highest: the most decided query."""
    best, best_value = 0, -math.inf
    for i, row in enumerate(matrix):
        finite = [v for v in row if math.isfinite(v)]
        if finite and max(finite) > best_value:
            best, best_value = i, max(finite)
    return best


def describe(
    step: str,
    matrix: Sequence[Row],
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    row: int | None = None,
    weights: Sequence[Row] | None = None,
    heads: int = 1,
    w_o: bool = False,
) -> str:
    """One sentence about `matrix` (a 2-D view of `step`), focused on query `row`."""
    if not matrix or not matrix[0]:
        return ""
    if step == "weights":
        i = sharpest_row(matrix) if row is None else row
        return _period(attention_sentence(matrix[i], row_labels[i], col_labels))
    if step in ("scores", "scaled"):
        i = sharpest_row(matrix) if row is None else row
        ranked = _ranked(matrix[i])
        if not ranked:
            return ""
        hi, lo = ranked[0], ranked[-1]
        return (
            f"'{row_labels[i]}' matches '{col_labels[hi]}' best ({_fmt(matrix[i][hi])}) "
            f"and '{col_labels[lo]}' least ({_fmt(matrix[i][lo])})."
        )
    if step == "masked":
        total = sum(len(r) for r in matrix)
        hidden = sum(1 for r in matrix for v in r if v == -math.inf)
        if hidden == 0:
            return "Nothing is masked: every query may attend every key."
        return f"{hidden} of {total} positions are masked (-inf); softmax gives them weight 0."
    if step == "output" and heads > 1:  # no single row of weights: say how the heads combine
        joined = f"the {heads} heads' outputs side by side (step head_outputs)"
        return f"Each query's output row is {joined}" + (", then @ W_o." if w_o else ".")
    if step in ("output", "head_outputs") and weights is not None:
        i = sharpest_row(weights) if row is None else row
        if i >= len(weights):
            return ""
        mix = attention_sentence(weights[i], row_labels[i], col_labels)
        return _period(mix.replace("attends most to", "takes its output mostly from the values of"))
    return ""

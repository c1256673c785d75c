"""Plain-English sentences about a step, made from its values by string formatting only.

The row a sentence is about is chosen with NumPy over the whole matrix (`sharpest_row`,
`teaching_row`): at 4096 tokens plain Python would read 16.7 M floats as Python objects. Ties go
to the first row, so the sentence does not depend on the matrix's size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gui.present import numbers

Row = Sequence[float]
NOTABLE = 0.01  # a runner-up weight below this reads as "0.00": it is left out of a sentence
EQUAL_RATIO = 1.1  # weights "about equal" only when the largest is within 10% of the smallest
# the kinds of sentence `describe` writes, named by the registry entries (scratch.trace.steps
# StepSpec
# .sentence): where each query looks (weights), its best and worst match (scores, scaled), how
# much is masked, whose values an output row mixes, how the heads combine (several heads)
KINDS = ("attention", "match", "mask", "mix", "heads")


def _ranked(row: Row) -> list[int]:
    """Column indices of the finite entries, largest first (ties keep column order)."""
    finite = [j for j, v in enumerate(row) if math.isfinite(v)]
    return sorted(finite, key=lambda j: -row[j])


def _join(parts: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def attention_sentence(
    row: Row, query: str, keys: Sequence[str], top: int = 2, hidden: Sequence[bool] = ()
) -> str:
    """The sentence "'journey' attends most to 'journey' (0.24) and ..." for one weights row.

    Runners-up under NOTABLE are left out; `hidden[j]` marks keys the mask hides."""
    if any(math.isnan(v) for v in row):
        if len(hidden) == len(row) and all(hidden):
            return f"'{query}' has no weights: every key is masked and the row is NaN."
        return f"'{query}' has NaN weights: its scores are not all finite numbers."
    if all(v == 0 for v in row):
        return f"'{query}' attends to nothing: every key is masked, so its weights are all 0."
    visible = [j for j in _ranked(row) if not (j < len(hidden) and hidden[j])]
    if len(visible) == 1:
        j = visible[0]
        return (
            f"'{query}' may see only '{keys[j]}' (the mask hides the other keys), "
            f"so all its weight goes there ({numbers.weight(row[j])})"
        )
    first, last = visible[0], visible[-1]
    if row[first] <= EQUAL_RATIO * row[last]:
        return f"'{query}' attends to all {len(visible)} keys about equally ({_each(row, visible)})"
    if row[first] < NOTABLE:  # a long row: every weight is small, "most" would read "(0.00)"
        return _spread(row, query, keys, visible)
    picks = [first] + [j for j in visible[1:top] if row[j] >= NOTABLE]
    said = _join([f"'{keys[j]}' ({numbers.weight(row[j])})" for j in picks])
    if len(picks) == 1 and row[first] >= 0.5:  # a majority: "almost only" is true
        return f"'{query}' attends almost only to {said}; every other key gets under {NOTABLE}"
    if len(picks) == 1:  # a long row: the largest weight is small, the rest smaller still
        return f"'{query}' attends most to {said}; no other key gets {NOTABLE} or more"
    return f"'{query}' attends most to {said}"


def _small(v: float) -> str:
    """A weight in a sentence: two decimals, or two significant digits below NOTABLE."""
    return numbers.weight(v) if v >= NOTABLE else f"{v:.2g}"


def _each(row: Row, visible: Sequence[int]) -> str:
    """'0.25 each', or '0.24 to 0.26 each' when the two ends print differently."""
    hi, lo = _small(row[visible[0]]), _small(row[visible[-1]])
    return f"{hi} each" if hi == lo else f"{lo} to {hi} each"


def _spread(row: Row, query: str, keys: Sequence[str], visible: Sequence[int]) -> str:
    """Unequal small weights: the largest and the smallest, and how many keys lie near each."""
    hi, lo = row[visible[0]], row[visible[-1]]
    near_hi = sum(1 for j in visible if row[j] * EQUAL_RATIO >= hi)
    near_lo = sum(1 for j in visible if row[j] <= lo * EQUAL_RATIO)
    percent = round((EQUAL_RATIO - 1) * 100)
    top = f"'{keys[visible[0]]}'" if near_hi == 1 else f"{_keys(near_hi)} within {percent}% of it"
    return (
        f"'{query}' spreads its weight over {len(visible)} keys unequally: largest "
        f"{_small(hi)} ({top}), smallest {_small(lo)} ({_keys(near_lo)} within {percent}% of it)"
    )


def _keys(n: int) -> str:
    """'1 key', '4090 keys'."""
    return f"{n} key" if n == 1 else f"{n} keys"


def _period(sentence: str) -> str:
    """End a sentence with one full stop."""
    return sentence if sentence.endswith(".") else sentence + "."


def sharpest_row(matrix: Sequence[Row] | np.ndarray) -> int:
    """The row whose largest finite weight is highest: the most decided query (the first such;
    0 when none is finite)."""
    m = np.asarray(matrix)
    tops = np.max(m, axis=1, where=np.isfinite(m), initial=-np.inf)  # (rows,)
    return int(np.argmax(tops)) if np.isfinite(tops).any() else 0


def teaching_row(matrix: Sequence[Row] | np.ndarray) -> int:
    """A row worth a sentence: the most decided query among those that weigh at least two keys
    (a causal first row, all weight on itself, teaches nothing); else the most decided one."""
    m = np.asarray(matrix)
    # rows with two entries >= NOTABLE, compared in float64 as Python compares
    mixed = np.flatnonzero(np.count_nonzero(m >= np.float64(NOTABLE), axis=1) >= 2)
    if mixed.size == 0:
        return sharpest_row(m)
    return int(mixed[sharpest_row(m[mixed])])


def _tied(row: Row, j: int) -> str:
    """Entry j's value, and how many other keys have it: at 4096 tokens 4090 keys scored 0, and
    "matches 't4095' least (0)" named one of them as if it alone did."""
    others = sum(1 for v in row if v == row[j]) - 1
    more = f", tied with {others} other key{'s' if others > 1 else ''}" if others else ""
    return numbers.prose(row[j]) + more


def mask_sentence(hidden: int, total: int) -> str:
    """How many of `total` positions the mask hides."""
    if hidden == 0:
        return "Nothing is masked: every query may attend every key."
    return f"{hidden} of {total} positions are masked (-inf); softmax gives them weight 0."


def describe(
    kind: str,
    matrix: Sequence[Row],
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    row: int | None = None,
    weights: Sequence[Row] | None = None,
    heads: int = 1,
    w_o: bool = False,
    hidden: Sequence[Sequence[bool]] | None = None,
) -> str:
    """One sentence of kind `kind` (one of KINDS, or "" for none) about `matrix`, a 2-D view of
    a step, focused on query `row`.

    `hidden[i][j]` marks the keys the mask hides from each query (weights steps)."""
    if not matrix or not matrix[0]:
        return ""
    if kind == "attention":
        i = teaching_row(matrix) if row is None else row
        mask = hidden[i] if hidden is not None and i < len(hidden) else ()
        return _period(attention_sentence(matrix[i], row_labels[i], col_labels, hidden=mask))
    if kind == "match":
        i = sharpest_row(matrix) if row is None else row
        ranked = _ranked(matrix[i])
        if not ranked:
            return ""
        hi, lo = ranked[0], ranked[-1]
        return (
            f"'{row_labels[i]}' matches '{col_labels[hi]}' best ({_tied(matrix[i], hi)}) "
            f"and '{col_labels[lo]}' least ({_tied(matrix[i], lo)})."
        )
    if kind == "mask":
        total = sum(len(r) for r in matrix)
        return mask_sentence(sum(1 for r in matrix for v in r if v == -math.inf), total)
    if kind == "heads" and heads > 1:  # no single row of weights: say how the heads combine
        joined = f"the {heads} heads' outputs side by side (step head_outputs)"
        return f"Each query's output row is {joined}" + (", then @ W_o." if w_o else ".")
    if kind in ("mix", "heads") and weights is not None:  # one head: the weights' mix
        i = teaching_row(weights) if row is None else row
        if i >= len(weights):
            return ""
        mask = hidden[i] if hidden is not None and i < len(hidden) else ()
        mix = attention_sentence(weights[i], row_labels[i], col_labels, hidden=mask)
        mix = mix.replace(
            "attends almost only to", "takes its output almost only from the values of"
        )
        mix = mix.replace("spreads its weight over", "mixes the values of")
        return _period(mix.replace("attends most to", "takes its output mostly from the values of"))
    return ""

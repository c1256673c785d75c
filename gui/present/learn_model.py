"""What the Learn tab reads from a trace (one head's matrices) and how it words the numbers.

No Qt and no arithmetic of attention here: the numbers come from scratch (scratch.learn.why);
this module picks one head's matrices out of a trace and formats values for the views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gui.present import numbers
from gui.present.view_model import (
    COLOUR_RANGES,
    TEXT_LIMIT,
    Panel,
    as_float64,
    as_image,
    colour_weights,
    largest_finite,
    levels_for,
)
from gui.state.variant_session import sampled_indices

MAX_TOKENS = 1024  # the pure-Python explanations take seconds past this; the tab says so
TILE_ROWS = 64  # the tile walk shows at most this many query rows (each row is independent)


@dataclass(frozen=True, eq=False)
class HeadInputs:
    """One head of a trace: q (L, E), k (S, E), v (S, Ev), its scores and its mask (equal only
    to itself: the views compare what they were asked with `==`, and arrays cannot)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray  # (L, S) q @ k^T
    scaled: np.ndarray  # (L, S) scores * scale
    masked: np.ndarray  # (L, S) -inf where a key is masked
    scale: float
    allowed: np.ndarray | None  # (L, S) bools, None: no mask
    tokens: list[str]
    key_tokens: list[str]
    head: int
    heads: int

    @property
    def d_k(self) -> int:
        return int(self.q.shape[-1])

    def allowed_lists(self) -> list | None:
        """The mask as nested lists of bools (what the pure-Python models take)."""
        return None if self.allowed is None else self.allowed.tolist()


def _head(trace: object, name: str, head: int, group: int) -> np.ndarray:
    """Head `head // group`'s slice of step `name`: a row of its leading head axis, or its
    columns where the heads sit side by side along the features (q (L, H*d_k))."""
    step = trace[name]
    value = as_float64(step.value)
    if step.axes[0] == "head":
        return value[head // group]
    n = int(trace.num_heads) // group  # heads in this step
    if n == 1:
        return value
    width = value.shape[-1] // n
    return value[:, head // group * width : (head // group + 1) * width]


def head_inputs(trace: object, head: int = 0) -> HeadInputs:
    """The matrices of head `head` (0 when the trace has one); ValueError past MAX_TOKENS."""
    heads = int(getattr(trace, "num_heads", 1) or 1)
    group = heads // int(getattr(trace, "num_kv_heads", heads) or heads)  # q heads per kv head
    head = min(max(head, 0), heads - 1)
    q = _head(trace, "q", head, 1)
    k, v = (_head(trace, n, head, group) for n in ("k", "v"))
    scores, scaled, masked = (_head(trace, n, head, 1) for n in ("scores", "scaled", "masked"))
    if max(scores.shape) > MAX_TOKENS:
        raise ValueError(
            f"Learn explains up to {MAX_TOKENS} tokens in plain Python; this example has "
            f"{max(scores.shape)}: pick fewer tokens"
        )
    allowed = None if trace.allowed is None else np.asarray(list(trace.allowed), dtype=bool)
    tokens, keys = list(trace.tokens), list(trace.key_tokens)
    return HeadInputs(
        q, k, v, scores, scaled, masked, float(trace.scale), allowed, tokens, keys, head, heads
    )


def number(x: float) -> str:
    """A value as a learner reads it: 4 significant digits ('g' spells inf and nan out)."""
    return numbers.significant(x, 4)


def shown_keys(priority: list[float], limit: int = 12) -> list[int]:
    """The key columns a table shows: all up to `limit`, else the `limit` keys of highest
    priority (e.g. weight), in key order."""
    n = len(priority)
    if n <= limit:
        return list(range(n))
    return sorted(sorted(range(n), key=lambda j: -priority[j])[:limit])


def key_rows(keys: list[int], labels: list[str], columns: list[list[float]]) -> list[list[str]]:
    """Table rows for keys `keys`: the key's label, then each column's value as a number."""
    return [[labels[j], *(number(c[j]) for c in columns)] for j in keys]


def table(header: list[str], rows: list[list[str]]) -> str:
    """A small HTML table (rich text for a QLabel)."""
    cell = "<td style='padding:1px 6px' align='right'>{}</td>"
    head = "".join(f"<th style='padding:1px 6px'>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell.format(c) for c in r) + "</tr>" for r in rows)
    return f"<table cellspacing='0' border='1'><tr>{head}</tr>{body}</table>"


def matrix_panel(
    title: str,
    matrix: np.ndarray,
    labels: tuple[list[str], list[str]],
    axes: tuple[str, str],
    levels: tuple[float, float] | None = None,
    weights: bool = False,
) -> Panel:
    """A heatmap Panel of one matrix: `weights` coloured 0..1 up to
    TEXT_LIMIT keys and min..99th percentile past it (1/512 each would be one flat colour);
    anything else diverging around 0; `levels`: those of a matrix shown beside it."""
    raw = np.asarray(matrix, dtype=np.float64)
    rows, cols = labels
    if weights:
        colour = "fixed" if max(raw.shape) <= TEXT_LIMIT else "auto"
        image, auto = colour_weights(raw, None, colour)
        levels = levels or auto
        note = f"colour: {COLOUR_RANGES[colour]}" if colour != "fixed" else ""
        return Panel(title, image, rows, cols, *axes, "weights", levels, title, None, raw, note)
    if levels is None:
        levels = levels_for(title, raw)[1]
    return Panel(title, as_image(raw), rows, cols, *axes, "signed", levels, title, None, raw)


def shared_levels(*matrices: np.ndarray | None) -> tuple[float, float]:
    """Symmetric levels covering the finite values of every matrix given (None skipped)."""
    top = max((largest_finite(m) for m in matrices if m is not None), default=0.0)  # 0: 1.0
    return levels_for("shared", np.array([top, -top]))[1]


def tile_rows(L: int) -> list[int]:
    """The query rows the tile walk shows: all up to TILE_ROWS, else TILE_ROWS spread evenly
    from the first to the last (a causal mask's late rows see every tile)."""
    return sampled_indices(L, TILE_ROWS)


def why(scores, scaled, masked, d_k: int, row: int, allowed=None) -> tuple:
    """scratch.learn.why's reasons on one row: why_scale (at 1/sqrt(d_k)), why_max, why_mask."""
    from scratch.learn import why as w  # a public module of scratch: the learn tab's reasons

    return (
        w.why_scale(scores, 1.0 / d_k**0.5, d_k, row, allowed),
        w.why_max(masked, row),
        w.why_mask(scaled, row, allowed),
    )

"""Turns trace steps into 2-D panels ready for an ImageItem (numpy, no Qt)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gui.present import pooled
from scratch.trace import steps

TEXT_LIMIT = 16  # cell numbers are printed while both sides are at most this long
HEAD_ALL, HEAD_AVERAGE = "all", "average"
DISPLAY_LIMIT = 1e38  # below float32's largest value, so level arithmetic cannot overflow
LEVEL_FLOOR = 1e-30  # narrowest colour range: 255 / range must stay a finite float32
AUTO_PERCENTILE = 99
# how the weights are coloured: the choice is said on screen (Panel.colour_note)
COLOUR_RANGES = {
    "fixed": "fixed: 0..1",
    "row": "per row: row / its max",
    "auto": "auto: min..99th percentile",
}


@dataclass
class Panel:
    """One heatmap's worth: a float32 C-contiguous (rows, cols) image plus its labels."""

    title: str
    image: np.ndarray  # (rows, cols) float32; -inf (masked) shown as NaN
    row_labels: list[str]
    col_labels: list[str]
    row_axis: str
    col_axis: str
    kind: str  # "weights" (sequential 0..1) or "signed" (diverging, symmetric levels)
    levels: tuple[float, float]
    step: str
    head: int | None  # which head the panel shows (None: no head axis or the average)
    raw: np.ndarray  # (rows, cols) values as the trace holds them (-inf kept): float64, or
    # the trace's own array when pooled (never copied: hover and numbers read exact cells)
    colour_note: str = ""  # for weights: which colour range is on (said on screen)
    vector: str = ""  # a step with one axis (besides heads): "column" (per token) or "row"
    blocks: tuple[int, int] = (1, 1)  # cells per image pixel down and across (gui.present.pooled)
    largest: float | None = None  # the largest finite |value| when pooled (None: read raw)

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of the matrix: cells, whatever the image's size."""
        return tuple(self.raw.shape)

    def pixel(self, i: int, j: int) -> float:
        """The image value drawn over cell (i, j)."""
        return float(self.image[i // self.blocks[0], j // self.blocks[1]])

    @property
    def show_text(self) -> bool:
        """Numbers in cells only while the matrix is small enough to read."""
        return max(self.image.shape) <= TEXT_LIMIT


def step_array(step: object) -> np.ndarray:
    """The step value as float64 numpy, whatever array type the backend used."""
    return as_float64(step.value)


def step_values(step: object) -> np.ndarray:
    """The step value as NumPy in its own dtype when it is an array (no float64 copy of 16.7 M
    cells), else float64."""
    if isinstance(step.value, np.ndarray):
        return step.value
    return step_array(step)


def as_float64(value: object) -> np.ndarray:
    """A trace's value (nested lists, NumPy array or torch tensor) as float64 numpy."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, copy=False)
    if hasattr(value, "detach"):  # a torch tensor, maybe on the GPU
        return np.asarray(value.detach().cpu().double().numpy())
    return np.asarray(value, dtype=np.float64)


def labels_for(trace: object, axis: str, n: int) -> list[str]:
    """Token labels for query/key axes, indices for model/feature axes."""
    if axis == "query" and len(trace.tokens) == n:
        return list(trace.tokens)
    if axis == "key" and len(trace.key_tokens) == n:
        return list(trace.key_tokens)
    return [str(i) for i in range(n)]


def levels_for(
    step_name: str, values: np.ndarray, robust: bool = False
) -> tuple[str, tuple[float, float]]:
    """Colour scale: 0..1 for weights, symmetric around 0 for everything signed; `robust`:
    up to the AUTO_PERCENTILE-th percentile of |values|, so a few large entries (a gradient's
    few big cells among 262 k small ones at 512 tokens) do not make the rest one flat colour."""
    if step_name in ("weights", "sink_weights"):  # shares of a row: 0..1
        return "weights", (0.0, 1.0)
    top = largest_finite(values)
    if robust and top > 0:
        finite = np.abs(values[np.isfinite(values)])
        top = float(np.percentile(finite, AUTO_PERCENTILE)) or top  # all but 1% near 0: max
    top = min(top, DISPLAY_LIMIT)
    top = top if top > 0 else 1.0
    return "signed", (-max(top, LEVEL_FLOOR), max(top, LEVEL_FLOOR))


def as_image(matrix: np.ndarray) -> np.ndarray:
    """float32, C-contiguous, row-major; -inf (masked) -> NaN so the cell renders empty."""
    wide = np.asarray(matrix, dtype=np.float64)
    # values past +-1e38 (float32 overflow) show saturated; their cells still print the number
    image = np.clip(wide, -DISPLAY_LIMIT, DISPLAY_LIMIT).astype(np.float32, order="C")
    image[np.isneginf(wide)] = np.nan
    return image


def colour_weights(
    weights: np.ndarray, masked: np.ndarray | None, colour: str
) -> tuple[np.ndarray, tuple[float, float]]:
    """Weights as an image in one of COLOUR_RANGES; masked cells (-inf in `masked`) become NaN."""
    if colour not in COLOUR_RANGES:
        raise ValueError(f"colour: expected one of {', '.join(COLOUR_RANGES)}, found {colour!r}")
    w = np.asarray(weights, dtype=np.float64)  # (rows, cols)
    hidden = np.zeros(w.shape, bool) if masked is None else np.isneginf(masked)
    shown = np.where(hidden, np.nan, w)  # masked weights are 0 by rule: grey, not colour 0
    finite = shown[np.isfinite(shown)]
    if colour == "row":
        top = np.max(np.where(np.isfinite(shown), shown, -np.inf), axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = np.where(top > 0, shown / top, shown)  # (rows, cols) / (rows, 1)
        return as_image(scaled), (0.0, 1.0)
    if colour == "auto" and finite.size:
        # one outlier must not make the other 99% one flat colour (512 tokens: ~0.002 each)
        lo, hi = float(finite.min()), float(np.percentile(finite, AUTO_PERCENTILE))
        if hi - lo < LEVEL_FLOOR:
            hi = lo + max(abs(lo) * 1e-6, LEVEL_FLOOR)
        return as_image(shown), (lo, hi)
    return as_image(shown), (0.0, 1.0)


def head_choices(trace: object, step_name: str) -> list[str]:
    """Head selector entries for a step: none without a head axis."""
    step = trace[step_name]
    if not step.axes or step.axes[0] != "head":
        return []
    return [str(h) for h in range(step.shape[0])] + [HEAD_ALL, HEAD_AVERAGE]


def _masked_like(trace: object, step_name: str, values: np.ndarray) -> np.ndarray | None:
    """The masked step (same shape) for the weights panel: its -inf cells are greyed out."""
    if step_name != "weights" or "masked" not in trace:
        return None
    masked = step_values(trace["masked"])
    if masked.ndim == 1:
        masked = masked[None, :]
    return masked if masked.shape == values.shape else None


def largest_finite(values: np.ndarray) -> float:
    """The largest finite |value| (0 when none is finite)."""
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


def _drawn(values: np.ndarray, blocks: tuple[int, int]) -> np.ndarray:
    """`values` (..., rows, cols) as drawn: each (rows, cols) matrix pooled (gui.present.pooled)."""
    if blocks == (1, 1):
        return values
    if values.ndim == 2:
        return pooled.pool(values, blocks)
    return np.stack([pooled.pool(m, blocks) for m in values])  # (H, rows/br, cols/bc)


def panels(trace: object, step_name: str, head: str = "0", colour: str = "fixed") -> list[Panel]:
    """The panels for one step: one, or one per head, or the head average. A matrix longer than
    gui.present.pooled.MAX_SIDE along an axis is drawn pooled (its note says so); its cells stay
    exact."""
    step = trace[step_name]
    values = step_values(step)
    axes = list(step.axes)
    # gradients at large sizes: a few large cells would leave the rest one flat colour
    robust = values.size > TEXT_LIMIT**2 and step_name in backward_steps(trace)
    row_axis, col_axis = axes[-2:] if len(axes) >= 2 else ("query", axes[-1])
    vector = ""
    if len(axes) - (axes[0] == "head") == 1:  # one number per token or per feature
        # per token (D: one per query row) a column beside the token labels, else one row
        vector = "column" if axes[-1] in ("query", "key") else "row"
        values = values[..., :, None] if vector == "column" else values[..., None, :]
        row_axis, col_axis = (axes[-1], "") if vector == "column" else ("query", axes[-1])
    rows, cols = values.shape[-2:]
    blocks = pooled.blocks_for((rows, cols))
    drawn = _drawn(values, blocks)  # every head pooled: one colour scale for all heads
    # the largest |value| survives pooling, so signed levels are exact; a percentile is the
    # drawn image's
    kind, levels = levels_for(step_name, drawn, robust)
    rl, cl = labels_for(trace, row_axis, rows), labels_for(trace, col_axis, cols)
    if vector == "column":
        cl = [step_name]
    masked = _masked_like(trace, step_name, values)
    note = f"colour: {COLOUR_RANGES[colour]}" if kind == "weights" else ""
    if robust and float(np.nanmax(np.abs(np.where(np.isfinite(drawn), drawn, 0)))) > levels[1]:
        note = f"colour: to the {AUTO_PERCENTILE}th percentile of |values|"
    if kind == "weights" and colour not in COLOUR_RANGES:
        raise ValueError(f"colour: expected one of {', '.join(COLOUR_RANGES)}, found {colour!r}")

    def make(title: str, m: np.ndarray, h: int | None, mask: np.ndarray | None) -> Panel:
        small = blocks == (1, 1)
        raw = np.asarray(m, dtype=np.float64) if small else m
        shown = m if small else (drawn[h] if h is not None and drawn.ndim == 3 else drawn)
        if h is None and drawn.ndim == 3:  # the head average: pooled on its own
            shown = pooled.pool(m, blocks)
        hidden = mask if small or mask is None else pooled.maximum(mask, blocks)
        if kind != "weights":
            image, lv = as_image(shown), levels
        else:
            image, lv = colour_weights(shown, hidden, colour)
        largest = None if small else largest_finite(shown)
        return Panel(
            title, image, rl, cl, row_axis, col_axis, kind, lv, step_name, h, raw, note, vector,
            blocks, largest,
        )  # fmt: skip

    if axes[0] != "head":
        return [make(step.name, values, None, masked)]
    if head == HEAD_ALL:
        return [
            make(f"{step.name} head {h}", values[h], h, None if masked is None else masked[h])
            for h in range(values.shape[0])
        ]
    if head == HEAD_AVERAGE:
        # the trace's own head average; NaN rows stay NaN
        with np.errstate(invalid="ignore"):
            mean = as_float64(trace.head_average(step_name))  # (H, rows, cols) -> (rows, cols)
            mean = mean.reshape(values.shape[1:])  # a vector step: its column or row again
            hidden = None if masked is None else masked.min(axis=0)  # -inf: masked in a head
        return [make(f"{step.name}, average of {values.shape[0]} heads", mean, None, hidden)]
    h = min(int(head), values.shape[0] - 1)
    return [make(f"{step.name} head {h}", values[h], h, None if masked is None else masked[h])]


def backward_steps(trace: object) -> list[str]:
    """The names of the trace's backward steps (dO onwards), in trace order."""
    call = steps.call_of(trace)
    return [n for n in trace.names() if steps.spec_for(call, n).backward]


def diff_image(diff: object) -> np.ndarray:
    """A compare_traces |difference| as a 2-D image (largest over heads when it has them)."""
    d = np.abs(np.asarray(diff, dtype=np.float64))
    while d.ndim > 2:
        d = np.nanmax(d, axis=0) if d.size else d[0]
    if d.ndim == 1:
        d = d[None, :]
    return np.ascontiguousarray(d, dtype=np.float32)


# ---------------------------------------------------------------- the flow of the overview


@dataclass(frozen=True)
class Stage:
    """Steps drawn together in the overview's flow, and the operation on the arrow into them."""

    names: tuple[str, ...]
    arrow: str  # '' for the first stage


def shape_text(shape: tuple[int, ...], axes: tuple[str, ...]) -> str:
    """'6x3', or '2 heads, 6x6' for a step with a head axis."""
    if axes and axes[0] == "head":
        return f"{shape[0]} heads, " + "x".join(map(str, shape[1:]))
    return "x".join(map(str, shape))


def flow_stages(names: list[str]) -> list[Stage]:
    """The trace's steps grouped into the stages of the flow x -> q, k, v -> ... -> output.

    The arrows and the groups (inputs, weights, projections, RoPE's q and k) come from scratch's
    registry of steps: steps before 2 with the same number and arrow share a stage, every later
    step has its own."""
    stages: list[Stage] = []
    last, call = None, steps.call_of_names(names)
    for name in names:
        number, arrow = steps.spec_for(call, name).number, steps.arrow_of(call, name)
        if stages and number < 2 and (number, arrow) == last:  # inputs, weights, q k v, RoPE
            stages[-1] = Stage(stages[-1].names + (name,), stages[-1].arrow)
        else:
            stages.append(Stage((name,), arrow if stages else ""))
        last = (number, arrow)
    return stages

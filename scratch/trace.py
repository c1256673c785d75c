"""A worked example of attention: every intermediate matrix, named, with its formula and a note.

`trace_attention` returns a `Trace`; `trace["weights"].value` looks a step up by name. The
desktop app and the terminal trace render nothing but traces, so everything they show is here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .multihead import run_multi_head
from .nested import tolist
from .steps import AXES, Call, steps_of
from .validate import _describe

__all__ = ["AXES", "Step", "Trace", "given_arguments", "layout_trace", "trace_attention"]


@dataclass(frozen=True)
class Step:
    """One named matrix of the computation: `name`, `formula`, `value`, `note`, `axes`."""

    name: str
    formula: str
    value: object  # nested lists for the ground truth; a backend may store its own array
    note: str
    axes: tuple[str, ...]

    def tolist(self) -> list:
        """The value as nested lists of floats, whatever array type holds it."""
        tolist = getattr(self.value, "tolist", None)
        return tolist() if callable(tolist) else self.value

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the value, one entry per axis."""
        shape = getattr(self.value, "shape", None)
        if shape is not None:
            return tuple(int(n) for n in shape)
        dims, level = [], self.value
        for _ in self.axes:
            dims.append(len(level))
            level = level[0]
        return tuple(dims)


@dataclass(frozen=True)
class Trace:
    """The ordered steps of one attention computation plus the labels needed to show them."""

    steps: tuple[Step, ...]
    tokens: tuple[str, ...]  # query-side labels, len L
    key_tokens: tuple[str, ...]  # key-side labels, len S
    scale: float
    num_heads: int = 1
    num_kv_heads: int = 1
    allowed: tuple | None = None  # (L, S) "may attend" grid, or None when nothing is masked
    options: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step {name!r} in this trace; steps: {', '.join(self.names())}")

    def __contains__(self, name: object) -> bool:
        return any(step.name == name for step in self.steps)

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def names(self) -> list[str]:
        """Step names in order."""
        return [step.name for step in self.steps]

    def head_average(self, name: str) -> object:
        """Step `name` averaged over its head axis, in float64 (NaN where a head has NaN)."""
        step = self[name]
        if not step.axes or step.axes[0] != "head":
            raise ValueError(f"name: step {name!r} has no head axis (its axes: {step.axes})")
        value = step.value
        if hasattr(value, "detach"):  # a torch tensor: averaged where it lives
            return value.detach().double().mean(dim=0)
        if hasattr(value, "astype"):  # a NumPy array: (H, ...) -> (...)
            return value.astype("float64", copy=False).mean(axis=0)
        return _mean_over_heads(value)


def _mean_over_heads(heads: list) -> object:
    """The elementwise mean of equally shaped nested lists (mean([inf, -inf]) is NaN)."""
    if isinstance(heads[0], (list, tuple)):
        return [_mean_over_heads([h[i] for h in heads]) for i in range(len(heads[0]))]
    values = [float(v) for v in heads]
    if any(math.isnan(v) for v in values) or {math.inf, -math.inf} <= set(values):
        return math.nan
    if any(math.isinf(v) for v in values):
        return math.copysign(math.inf, sum(values))
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # finite values whose exact sum passes float64's largest: +-inf
        return sum(values) / len(values)


def _labels(tokens: object, n: int, name: str, prefix: str) -> tuple[str, ...]:
    """Token labels: given strings of the right count, or prefix0, prefix1, ..."""
    if tokens is None:
        return tuple(f"{prefix}{i}" for i in range(n))
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{name}: expected a list of {n} strings, found {_describe(tokens)}")
    tokens = tuple(tokens)
    if len(tokens) != n:
        raise ValueError(f"{name}: expected {n} labels (one per row), found {len(tokens)}")
    return tokens


def _scale_note(scale: object, value: float, d_head: int) -> str:
    """Where the scale came from, in words."""
    if scale is None:
        return f"scale = 1/sqrt(d_k) = 1/sqrt({d_head}) = {value:.6g}"
    return f"scale = {value:.6g} (given)"


def _mask_kind(attn_mask: object, is_causal: bool, is_bool: bool | None) -> str:
    """The mask kind of a call: causal, none, bool or float."""
    if is_causal:
        return "causal"
    if attn_mask is None:
        return "none"
    return "bool" if is_bool else "float"


def _may_attend(masked: object, want_grids: bool) -> tuple[int, list | None]:
    """(rows where every key is -inf, the may-attend grids when wanted: one per head, or one
    when every head's is the same).

    Arrays and tensors are compared whole (16.7 M cells at 4096 tokens: milliseconds, where a
    Python loop takes seconds); the grids become nested tuples only when a mask makes them
    worth showing."""
    if hasattr(masked, "shape") and callable(getattr(masked, "tolist", None)):
        may = masked != -math.inf  # (H, L, S) bools, the array's own type
        n_full = int((~may.any(-1)).sum())
        if not want_grids:
            return n_full, None
        if bool((may == may[:1]).all()):  # every head sees the same grid (a mask, no -inf
            may = may[:1]  # in the data): one grid to turn into tuples, not one per head
        # row by row: one tolist of a 4096 x 4096 grid is a single call that holds the GIL
        # for a quarter second (the window's event loop waits meanwhile); rows let it in
        return n_full, [tuple(tuple(row.tolist()) for row in grid) for grid in may]
    grids = [tuple(tuple(x != -math.inf for x in row) for row in m) for m in masked]
    return sum(not any(row) for grid in grids for row in grid), grids if want_grids else None


def layout_trace(
    values: dict[str, object],
    *,
    num_heads: int,
    num_kv_heads: int,
    given: dict[str, bool],
    tokens: object,
    key_tokens: object,
    scale_arg: object,
    scale: float,
    attn_mask: object,
    is_causal: bool,
    is_bool: bool | None,
    masked_rows: str,
    backend: str,
    dtype: str,
    kernel: str = "explicit",
) -> Trace:
    """Name, order and describe the matrices a backend computed (its own arrays, untouched).

    Only the words are shared between backends; every number comes from the caller. `values`
    holds x, [key_input, value_input,] [w_q, w_k, w_v,] q, k, v, per-head stacks (H, L, S) of
    scores, scaled, masked and weights, head_outputs (H, L, d_v), [concat, w_o,] and output.
    `given` says which of w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, key and value the user passed.
    """
    L, S = len(values["q"]), len(values["k"])
    d_head = len(tolist(values["q"])[0]) // num_heads
    labels = _labels(tokens, L, "tokens", "t")
    cross = given["key"]
    key_labels = _labels(key_tokens, S, "key_tokens", "k") if cross or key_tokens else labels
    kind = _mask_kind(attn_mask, is_causal, is_bool)
    n_full, grids = _may_attend(values["masked"], kind != "none")
    call = Call(
        num_heads,
        num_kv_heads,
        frozenset(name for name, was_given in given.items() if was_given),
        num_heads > 1 or given["w_o"],
        kind,
        tokens=L,
        key_tokens=S,
        scale_note=_scale_note(scale_arg, scale, d_head),
        masked_rows=masked_rows,
        fully_masked=n_full,
    )
    steps = []
    for spec in steps_of(call):  # the registry's steps 0 to 8, in trace order
        value = values[spec.name]
        if spec.per_head and not call.multi:
            value = value[0]  # (H, L, S) -> (L, S) for one head
        steps.append(
            Step(spec.name, spec.formula(call), value, spec.note(call), spec.axes_for(call))
        )
    allowed = None
    if kind != "none":
        allowed = grids[0] if all(g == grids[0] for g in grids) else tuple(grids)
    options = {
        "is_causal": is_causal,
        "mask": kind,
        "masked_rows": masked_rows,
        "scale_given": scale_arg is not None,
        "backend": backend,
        "dtype": dtype,
        "kernel": kernel,
        "cross": cross,
        "biases": tuple(sorted(name for name in call.given if name.startswith("b_"))),
    }
    return Trace(tuple(steps), labels, key_labels, scale, num_heads, num_kv_heads, allowed, options)


def given_arguments(**arguments: object) -> dict[str, bool]:
    """Which optional arguments were passed (not None), for `layout_trace`."""
    return {name: value is not None for name, value in arguments.items()}


def trace_attention(
    x: object,
    key: object = None,
    value: object = None,
    w_q: object = None,
    w_k: object = None,
    w_v: object = None,
    w_o: object = None,
    *,
    tokens: object = None,
    key_tokens: object = None,
    num_heads: int = 1,
    num_kv_heads: int | None = None,
    b_q: object = None,
    b_k: object = None,
    b_v: object = None,
    b_o: object = None,
    attn_mask: object = None,
    is_causal: bool = False,
    scale: float | None = None,
    masked_rows: str = "zero",
) -> Trace:
    """Attention on one example x (L, d_model), keeping every step; projections are optional."""
    run = run_multi_head(
        x,
        key,
        value,
        w_q,
        w_k,
        w_v,
        w_o,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        b_q=b_q,
        b_k=b_k,
        b_v=b_v,
        b_o=b_o,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        masked_rows=masked_rows,
    )
    if run.lead:
        raise ValueError(
            f"x: a trace is one worked example, expected shape (L, d_model), "
            f"found {len(run.lead) + 2} dims"
        )
    H = run.plan.num_heads
    values = {
        "x": run.inputs["x"],
        "q": run.q,
        "k": run.k,
        "v": run.v,
        "concat": run.concat,
        "output": run.output,
        "head_outputs": [s.output for s in run.heads],
    }
    for name in ("scores", "scaled", "masked", "weights"):
        values[name] = [getattr(s, name) for s in run.heads]  # (H, L, S)
    if key is not None:
        values["key_input"] = run.inputs["key_input"]
    if value is not None:
        values["value_input"] = run.inputs["value_input"]
    values.update(run.params)
    is_bool = None if attn_mask is None else run.mask.is_bool  # read once, by run_multi_head
    return layout_trace(
        values,
        num_heads=H,
        num_kv_heads=run.plan.num_kv_heads,
        given=given_arguments(
            key=key,
            value=None if value is key else value,
            w_q=w_q,
            w_k=w_k,
            w_v=w_v,
            w_o=w_o,
            b_q=b_q,
            b_k=b_k,
            b_v=b_v,
            b_o=b_o,
        ),
        tokens=tokens,
        key_tokens=key_tokens,
        scale_arg=scale,
        scale=run.scale,
        attn_mask=attn_mask,
        is_causal=is_causal,
        is_bool=is_bool,
        masked_rows=masked_rows,
        backend="scratch",
        dtype="float64",
    )

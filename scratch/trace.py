"""A worked example of attention: every intermediate matrix, named, with its formula and a note.

`trace_attention` returns a `Trace`; `trace["weights"].value` looks a step up by name. The
desktop app and the terminal trace render nothing but traces, so everything they show is here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .multihead import run_multi_head
from .nested import tolist
from .validate import _describe, as_mask, check_value_has_key

AXES = ("head", "query", "key", "model", "feature")


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


def _mask_words(attn_mask: object, is_causal: bool, is_bool: bool | None) -> tuple[str, str, str]:
    """(kind, formula, note) for the masked step."""
    if is_causal:
        return (
            "causal",
            "masked = scaled, with -inf where key j > query i (causal)",
            "causal: each token sees itself and the tokens before it",
        )
    if attn_mask is None:
        return "none", "masked = scaled (no mask)", "no mask: every query may attend every key"
    if is_bool:
        return (
            "bool",
            "masked = scaled, with -inf where attn_mask is False",
            "attn_mask: True = may attend, False = masked (-inf)",
        )
    return "float", "masked = scaled + attn_mask", "attn_mask is added; -inf entries mask a key"


def _may_attend(masked: object, want_grids: bool) -> tuple[int, list | None]:
    """(rows where every key is -inf, the (H, L, S) may-attend grids when wanted).

    Arrays and tensors are compared whole (16.7 M cells at 4096 tokens: milliseconds, where a
    Python loop takes seconds); the grids become nested tuples only when a mask makes them
    worth showing."""
    if hasattr(masked, "shape") and callable(getattr(masked, "tolist", None)):
        may = masked != -math.inf  # (H, L, S) bools, the array's own type
        n_full = int((~may.any(-1)).sum())
        if not want_grids:
            return n_full, None
        return n_full, [tuple(map(tuple, grid)) for grid in may.tolist()]
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
    H, Hkv = num_heads, num_kv_heads
    L, S = len(values["q"]), len(values["k"])
    d_head = len(tolist(values["q"])[0]) // H
    labels = _labels(tokens, L, "tokens", "t")
    cross = given["key"]
    separate_value = cross and given["value"]
    key_labels = _labels(key_tokens, S, "key_tokens", "k") if cross or key_tokens else labels
    multi = H > 1 or given["w_o"]
    steps = []

    def add(name: str, formula: str, value: object, note: str, *axes: str) -> None:
        steps.append(Step(name, formula, value, note, axes))

    def per_head(name: str) -> object:
        return values[name] if multi else values[name][0]  # (H, L, S) or (L, S)

    # step 0: the inputs and the projection weights
    add("x", "x", values["x"], f"input: {L} tokens, each a row of numbers", "query", "model")
    if cross:
        add(
            "key_input",
            "key input",
            values["key_input"],
            f"key-side input: {S} tokens (cross-attention)",
            "key",
            "model",
        )
        if separate_value:
            add(
                "value_input",
                "value input",
                values["value_input"],
                "value-side input",
                "key",
                "model",
            )
    src = {"q": "x", "k": "key_input" if cross else "x"}
    src["v"] = "value_input" if separate_value else src["k"]
    for name, what in (("q", "queries"), ("k", "keys"), ("v", "values")):
        if given[f"w_{name}"]:
            add(
                f"w_{name}",
                f"w_{name}",
                values[f"w_{name}"],
                f"projection that turns inputs into {what}",
                "model",
                "feature",
            )

    def proj(out: str) -> str:
        if not given[f"w_{out}"]:
            return f"{out} = {src[out]} (no projection)"
        return f"{out} = {src[out]} @ w_{out}" + (f" + b_{out}" if given[f"b_{out}"] else "")

    # step 1: q, k, v = projections   (L, d_model) @ (d_model, H * d_head) -> (L, H * d_head)
    add("q", proj("q"), values["q"], "queries: what each token is looking for", "query", "feature")
    add(
        "k", proj("k"), values["k"], "keys: what each token offers to be found by", "key", "feature"
    )
    add("v", proj("v"), values["v"], "values: what each token passes on", "key", "feature")
    head_axes = ("head",) if multi else ()
    h = "[h]" if multi else ""
    kv = f"k_{{h // {H // Hkv}}}" if multi and Hkv < H else ("k_h" if multi else "k")
    # step 2: scores = q @ k^T        (L, d_head) @ (d_head, S) -> (L, S)
    add(
        "scores",
        f"scores{h} = {'q_h' if multi else 'q'} @ {kv}^T",
        per_head("scores"),
        "dot product of each query with each key: high = similar",
        *head_axes,
        "query",
        "key",
    )
    # step 3: scaled = scores * scale
    add(
        "scaled",
        f"scaled{h} = scores{h} * scale",
        per_head("scaled"),
        _scale_note(scale_arg, scale, d_head),
        *head_axes,
        "query",
        "key",
    )
    # step 4: masked = scaled + mask
    kind, formula, note = _mask_words(attn_mask, is_causal, is_bool)
    add(
        "masked",
        formula.replace("masked", f"masked{h}", 1).replace("scaled", f"scaled{h}", 1),
        per_head("masked"),
        note,
        *head_axes,
        "query",
        "key",
    )
    n_full, grids = _may_attend(values["masked"], kind != "none")
    # step 5: weights = softmax(masked) along each row
    w_note = "each row sums to 1: how much each query attends to each key"
    if n_full:
        w_note += f"; {n_full} fully masked row(s) follow masked_rows={masked_rows!r}"
    add(
        "weights",
        f"weights{h} = softmax(masked{h}) along each row",
        per_head("weights"),
        w_note,
        *head_axes,
        "query",
        "key",
    )
    # step 6: output = weights @ v    (L, S) @ (S, d_v) -> (L, d_v)
    if not multi:
        add(
            "output",
            "output = weights @ v",
            values["output"],
            "each output row is a weighted average of the value rows",
            "query",
            "feature",
        )
    else:
        vh = f"v_{{h // {H // Hkv}}}" if Hkv < H else "v_h"
        add(
            "head_outputs",
            f"head_outputs[h] = weights[h] @ {vh}",
            values["head_outputs"],
            "each head's weighted average of its value rows",
            "head",
            "query",
            "feature",
        )
        if not given["w_o"]:
            add(
                "output",
                "output = concat(head_outputs[0], ..., head_outputs[H-1])",
                values["output"],
                "the heads side by side",
                "query",
                "feature",
            )
        else:
            add(
                "concat",
                "concat = [head_outputs[0] | ... | head_outputs[H-1]]",
                values["concat"],
                "the heads side by side",
                "query",
                "feature",
            )
            add(
                "w_o",
                "w_o",
                values["w_o"],
                "output projection that mixes the heads",
                "feature",
                "feature",
            )
            add(
                "output",
                "output = concat @ w_o" + (" + b_o" if given["b_o"] else ""),
                values["output"],
                "the heads mixed by the output projection",
                "query",
                "feature",
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
    }
    return Trace(tuple(steps), labels, key_labels, scale, H, Hkv, allowed, options)


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
    check_value_has_key(key, value)
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
    is_bool = None if attn_mask is None else as_mask(attn_mask)[2]
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

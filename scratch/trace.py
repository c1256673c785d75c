"""A worked example of attention: every intermediate matrix, named, with its formula and a note.

`trace_attention` returns a `Trace`; `trace["weights"].value` looks a step up by name. The
desktop app and the terminal trace render nothing but traces, so everything they show is here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .multihead import run_multi_head

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
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{name}: expected a list of {n} strings, found {tokens!r:.60}")
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
    H = num_heads
    Hkv = H if num_kv_heads is None else num_kv_heads
    L, S = len(run.q), len(run.k)
    d_head = len(run.q[0]) // H
    labels = _labels(tokens, L, "tokens", "t")
    cross = key is not None
    key_labels = _labels(key_tokens, S, "key_tokens", "k") if cross or key_tokens else labels
    multi = H > 1 or w_o is not None
    steps = []

    def add(name: str, formula: str, value: object, note: str, *axes: str) -> None:
        steps.append(Step(name, formula, value, note, axes))

    # step 0: the inputs and the projection weights
    from .validate import as_matrix  # local: validated copies for display

    add(
        "x",
        "x",
        as_matrix(x, "x")[0],
        f"input: {L} tokens, each a row of numbers",
        "query",
        "model",
    )
    if cross:
        add(
            "key_input",
            "key input",
            as_matrix(key, "key")[0],
            f"key-side input: {S} tokens (cross-attention)",
            "key",
            "model",
        )
        if value is not None and value is not key:
            add(
                "value_input",
                "value input",
                as_matrix(value, "value")[0],
                "value-side input",
                "key",
                "model",
            )
    src_k = "key_input" if cross else "x"
    src_v = "value_input" if cross and value is not None and value is not key else src_k
    for name, w, what in (("w_q", w_q, "queries"), ("w_k", w_k, "keys"), ("w_v", w_v, "values")):
        if w is not None:
            add(
                name,
                name,
                as_matrix(w, name)[0],
                f"projection that turns inputs into {what}",
                "model",
                "feature",
            )

    def proj(out: str, src: str, w: object, b: object) -> str:
        if w is None:
            return f"{out} = {src} (no projection)"
        return f"{out} = {src} @ w_{out}" + (f" + b_{out}" if b is not None else "")

    # step 1: q, k, v = projections   (L, d_model) @ (d_model, H * d_head) -> (L, H * d_head)
    add(
        "q",
        proj("q", "x", w_q, b_q),
        run.q,
        "queries: what each token is looking for",
        "query",
        "feature",
    )
    add(
        "k",
        proj("k", src_k, w_k, b_k),
        run.k,
        "keys: what each token offers to be found by",
        "key",
        "feature",
    )
    add(
        "v",
        proj("v", src_v, w_v, b_v),
        run.v,
        "values: what each token passes on",
        "key",
        "feature",
    )

    def per_head(field_name: str) -> list:
        mats = [getattr(s, field_name) for s in run.heads]
        return mats if multi else mats[0]

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
        _scale_note(scale, run.scale, d_head),
        *head_axes,
        "query",
        "key",
    )
    # step 4: masked = scaled + mask
    is_bool = None
    if attn_mask is not None:
        from .validate import as_mask

        is_bool = as_mask(attn_mask)[2]
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
    # step 5: weights = softmax(masked) along each row
    n_full = sum(sum(s.fully_masked) for s in run.heads)
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
            run.output,
            "each output row is a weighted average of the value rows",
            "query",
            "feature",
        )
    else:
        vh = f"v_{{h // {H // Hkv}}}" if Hkv < H else "v_h"
        add(
            "head_outputs",
            f"head_outputs[h] = weights[h] @ {vh}",
            per_head("output"),
            "each head's weighted average of its value rows",
            "head",
            "query",
            "feature",
        )
        if w_o is None:
            add(
                "output",
                "output = concat(head_outputs[0], ..., head_outputs[H-1])",
                run.output,
                "the heads side by side",
                "query",
                "feature",
            )
        else:
            add(
                "concat",
                "concat = [head_outputs[0] | ... | head_outputs[H-1]]",
                run.concat,
                "the heads side by side",
                "query",
                "feature",
            )
            add(
                "w_o",
                "w_o",
                as_matrix(w_o, "w_o")[0],
                "output projection that mixes the heads",
                "feature",
                "feature",
            )
            add(
                "output",
                "output = concat @ w_o" + (" + b_o" if b_o is not None else ""),
                run.output,
                "the heads mixed by the output projection",
                "query",
                "feature",
            )
    allowed = None
    if kind != "none":
        grids = [tuple(tuple(x != -math.inf for x in row) for row in s.masked) for s in run.heads]
        allowed = grids[0] if all(g == grids[0] for g in grids) else tuple(grids)
    options = {
        "is_causal": is_causal,
        "mask": kind,
        "masked_rows": masked_rows,
        "scale_given": scale is not None,
        "backend": "scratch",
        "dtype": "float64",
        "kernel": "explicit",
        "cross": cross,
    }
    return Trace(tuple(steps), labels, key_labels, run.scale, H, Hkv, allowed, options)

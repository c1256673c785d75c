"""The shape rules, decided once from shapes alone (no numbers, no arrays): one attention call
(`plan_attention` -> AttentionPlan) and a multi-head call (`plan_multi_head` -> HeadPlan).

Every backend (and the window's session) converts its inputs to its own arrays, hands their
shapes to `plan_multi_head`, and then writes its own math for the plan it gets back. So the
rules (how heads split, which widths must agree) and their error messages exist once, while a
bug in one backend's arithmetic still cannot hide in all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.ops.validate import check_grad_output, check_head_counts, check_value_has_key

Shape = tuple[int, ...]
PARAMS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


def projections(*values: object) -> dict[str, object]:
    """A call's projections and biases by name, given in PARAMS order (None: not given)."""
    if len(values) != len(PARAMS):
        raise TypeError(f"projections: expected {len(PARAMS)} values {PARAMS}, found {len(values)}")
    return dict(zip(PARAMS, values))


def shapes_for_heads(
    L: int,
    S: int,
    heads: tuple[int, int],
    d_head: int,
    d_v: int,
    inputs: tuple[int, int] | None = None,
) -> dict[str, Shape]:
    """The shapes of a multi-head call with these heads: `plan_multi_head`'s inverse.

    With `inputs` (d_model, d_kv_in), the inputs and their projections; without, no
    projections, so the inputs are the heads side by side.

    Args:
        L: the query length.
        S: the key/value length.
        heads: (H, Hkv), the query and key/value heads.
        d_head: E, one query (and key) head's width.
        d_v: Ev, one value head's width.
        inputs: (d_model, d_kv_in), the inputs' widths; None: no projections.

    Returns:
        {argument name: shape} for query, key, value (and w_q, w_k, w_v with `inputs`).

    Examples:
        >>> from scratch import shapes_for_heads
        >>> shapes_for_heads(5, 7, (2, 1), 4, 3)
        {'query': (5, 8), 'key': (7, 4), 'value': (7, 3)}
    """
    H, Hkv = heads
    if inputs is None:  # q, k, v themselves: (L, H * d_head), (S, Hkv * d_head), (S, Hkv * d_v)
        return {"query": (L, H * d_head), "key": (S, Hkv * d_head), "value": (S, Hkv * d_v)}
    d_model, d_kv_in = inputs
    return {
        "query": (L, d_model),  # x
        "key": (S, d_kv_in),
        "value": (S, d_kv_in),
        "w_q": (d_model, H * d_head),  # (L, d_model) @ (d_model, H * d_head)
        "w_k": (d_kv_in, Hkv * d_head),  # (S, d_kv_in) @ (d_kv_in, Hkv * d_head)
        "w_v": (d_kv_in, Hkv * d_v),  # (S, d_kv_in) @ (d_kv_in, Hkv * d_v)
    }


def kv_index(index: Shape, group: int) -> Shape:
    """The key/value leading index that query leading index `index` reads (GQA: h -> h // group)."""
    return index[:-1] + (index[-1] // group,) if group > 1 else index


@dataclass(frozen=True)
class HeadPlan:
    """The shapes of one multi-head attention call."""

    lead: Shape  # batch dims shared by query, key and value
    L: int  # query length
    S: int  # key/value length
    num_heads: int  # H: query heads
    num_kv_heads: int  # Hkv: key/value heads (Hkv < H: grouped-query attention)
    d_model: int  # query input width
    d_key: int  # key input width (d_model unless cross-attention)
    d_value: int  # value input width
    d_head: int  # width of one query (and key) head
    d_v: int  # width of one value head
    d_out: int  # output width: w_o's columns, or H * d_v without w_o

    @property
    def group(self) -> int:
        """Query heads per key/value head: query head h reads key/value head h // group."""
        return self.num_heads // self.num_kv_heads

    @property
    def head_lead(self) -> Shape:
        """Leading dims of the per-head matrices: (..., H)."""
        return self.lead + (self.num_heads,)

    @property
    def scores_shape(self) -> Shape:
        """Shape of the per-head scores and weights: (..., H, L, S)."""
        return self.head_lead + (self.L, self.S)


@dataclass(frozen=True)
class AttentionPlan:
    """The shapes of one scaled_dot_product_attention call: query (..., L, E), key (..., S, E),
    value (..., S, Ev); with GQA the last leading axis of key/value has fewer heads."""

    lead: Shape  # query's leading dims (..., H)
    kv_lead: Shape  # key's and value's leading dims (..., Hkv)
    L: int  # query length
    S: int  # key/value length
    E: int  # query and key width
    Ev: int  # value width
    group: int  # query heads per key/value head (1 without GQA)

    @property
    def scores_shape(self) -> Shape:
        """Shape of the scores and weights: (..., L, S)."""
        return self.lead + (self.L, self.S)

    @property
    def output_shape(self) -> Shape:
        """Shape of the output (and of dO): (..., L, Ev)."""
        return self.lead + (self.L, self.Ev)

    def kv_index(self, index: Shape) -> Shape:
        """The key/value leading index that query leading index `index` reads (h -> h // group)."""
        return kv_index(index, self.group)

    def check_grad_output(self, shape: Shape) -> None:
        """dO must have the output's shape."""
        check_grad_output(shape, self.output_shape)


def plan_attention(
    q_shape: Shape, k_shape: Shape, v_shape: Shape, enable_gqa: bool = False
) -> AttentionPlan:
    """Check query (..., L, E), key (..., S, E), value (..., S, Ev) (errors name the argument)
    and plan the call: its dims and the GQA group, decided here once."""
    q_shape, k_shape, v_shape = (
        _input(tuple(shape), name)
        for shape, name in ((q_shape, "query"), (k_shape, "key"), (v_shape, "value"))
    )
    if len(k_shape) != len(q_shape) or len(v_shape) != len(q_shape):
        bad, shape = ("key", k_shape) if len(k_shape) != len(q_shape) else ("value", v_shape)
        raise ValueError(
            f"{bad}: expected {len(q_shape)} dims like query {q_shape}, found shape {shape}"
        )
    *lead, L, E = q_shape
    S, Ek = k_shape[-2:]
    Sv, Ev = v_shape[-2:]
    if Ek != E:
        raise ValueError(
            f"key: width must match query's (E = {E}); query {q_shape} vs key {k_shape}"
        )
    if Sv != S:
        raise ValueError(
            f"value: length must match key's (S = {S}); key {k_shape} vs value {v_shape}"
        )
    group, skip = 1, -1
    if enable_gqa:
        if len(q_shape) < 3:
            raise ValueError(
                f"query: enable_gqa needs a head axis (..., heads, L, E), found shape {q_shape}"
            )
        hq, hk, hv = q_shape[-3], k_shape[-3], v_shape[-3]
        if hk != hv:
            raise ValueError(
                f"value: number of key/value heads must match key's ({hk}), found {hv}"
            )
        if hq % hk:
            raise ValueError(
                f"key: {hk} key/value heads do not divide {hq} query heads (enable_gqa)"
            )
        group, skip = hq // hk, len(q_shape) - 3
    for name, shape in (("key", k_shape), ("value", v_shape)):
        for axis, (a, b) in enumerate(zip(q_shape[:-2], shape[:-2])):
            if axis != skip and a != b:
                raise ValueError(
                    f"{name}: leading dims must match query's; axis {axis} is {b}, "
                    f"expected {a} (query {q_shape}, {name} {shape})"
                )
    return AttentionPlan(tuple(lead), k_shape[:-2], L, S, E, Ev, group)


def _input(shape: Shape, name: str) -> Shape:
    """An input is (..., length, width)."""
    if len(shape) < 2:
        raise ValueError(f"{name}: expected at least 2 dims (..., length, width), found {shape}")
    return shape


def _weight_width(w: Shape | None, name: str, rows: int, heads: int, heads_name: str) -> int:
    """Columns of projection `w` (rows, heads * d); `rows` itself when `w` is None."""
    if w is None:
        return rows
    if len(w) != 2:
        raise ValueError(f"{name}: expected a 2-D matrix (rows, columns), found shape {w}")
    if w[0] != rows:
        raise ValueError(f"{name}: expected {rows} rows to match the input width, found shape {w}")
    if w[1] % heads:
        raise ValueError(
            f"{name}: {w[1]} columns do not split into {heads} heads of equal width ({heads_name})"
        )
    return w[1]


def _bias(b: Shape | None, name: str, length: int, weight: Shape | None) -> None:
    """A bias is a vector as long as the projection's output, and only beside its weight."""
    if b is not None and weight is None:
        w = "w" + name[1:]
        raise ValueError(f"{name}: given without {w}; expected {w} as well")
    if b is not None and tuple(b) != (length,):
        raise ValueError(f"{name}: expected shape ({length},), found shape {b}")


def plan_multi_head(
    query: Shape,
    key: Shape | None = None,
    value: Shape | None = None,
    *,
    w_q: Shape | None = None,
    w_k: Shape | None = None,
    w_v: Shape | None = None,
    w_o: Shape | None = None,
    b_q: Shape | None = None,
    b_k: Shape | None = None,
    b_v: Shape | None = None,
    b_o: Shape | None = None,
    num_heads: object = 1,
    num_kv_heads: object = None,
) -> HeadPlan:
    """Check the shapes of a multi-head call (errors name the argument) and plan its heads.

    Arguments are shapes (tuples), None where the argument was not given: key None means
    self-attention (key = value = query), value None means value = key.

    Args:
        query: the queries' inputs' shape (..., L, d_model).
        key: the keys' inputs' shape (..., S, d_kv_in), or None.
        value: the values' inputs' shape (..., S, d_kv_in), or None.
        w_q: (d_model, H * E), or None (the query is q itself).
        w_k: (d_kv_in, Hkv * E), or None.
        w_v: (d_kv_in, Hkv * Ev), or None.
        w_o: (H * Ev, d_out), or None.
        b_q: (H * E,), or None; only with w_q (each bias with its weight).
        b_k: (Hkv * E,), or None.
        b_v: (Hkv * Ev,), or None.
        b_o: (d_out,), or None.
        num_heads: H, a positive int.
        num_kv_heads: Hkv, dividing H; None: H.

    Returns:
        The HeadPlan: lead, L, S, H, Hkv, the input widths, E (d_head), Ev (d_v), d_out.

    Examples:
        >>> from scratch import plan_multi_head
        >>> plan = plan_multi_head((5, 8), w_q=(8, 8), w_k=(8, 4), w_v=(8, 4),
        ...                        num_heads=2, num_kv_heads=1)
        >>> plan.L, plan.num_heads, plan.num_kv_heads, plan.d_head, plan.group
        (5, 2, 1, 4, 2)
    """
    check_value_has_key(key, value)
    H, Hkv = check_head_counts(num_heads, num_kv_heads)
    query = _input(tuple(query), "query")
    key = query if key is None else _input(tuple(key), "key")
    value = key if value is None else _input(tuple(value), "value")
    lead = query[:-2]
    for name, shape in (("key", key), ("value", value)):
        if shape[:-2] != lead:
            raise ValueError(f"{name}: leading dims must match query's {lead}, found shape {shape}")
    if key[-2] != value[-2]:
        raise ValueError(f"value: length must match key's (S = {key[-2]}), found shape {value}")
    d_model, d_key, d_value = query[-1], key[-1], value[-1]
    # step 1: the projections' widths: (..., n, d_in) @ (d_in, heads * d) -> (..., n, heads * d)
    q_width = _weight_width(w_q, "w_q", d_model, H, "num_heads")
    k_width = _weight_width(w_k, "w_k", d_key, Hkv, "num_kv_heads")
    v_width = _weight_width(w_v, "w_v", d_value, Hkv, "num_kv_heads")
    for name, b, width, w in (
        ("b_q", b_q, q_width, w_q),
        ("b_k", b_k, k_width, w_k),
        ("b_v", b_v, v_width, w_v),
    ):
        _bias(b, name, width, w)
    for name, width, heads in (
        ("query", q_width, H),
        ("key", k_width, Hkv),
        ("value", v_width, Hkv),
    ):
        if width % heads:
            raise ValueError(f"{name}: width {width} does not split into {heads} heads")
    # step 2: the heads: query and key heads must be equally wide to take dot products
    d_head, d_v = q_width // H, v_width // Hkv
    if k_width // Hkv != d_head:
        raise ValueError(
            f"w_k: key heads are {k_width // Hkv} wide but query heads are {d_head} wide "
            f"(w_q gives {q_width} columns for {H} heads, w_k {k_width} for {Hkv})"
        )
    # step 3: the output projection: (..., L, H * d_v) @ (H * d_v, d_out)
    d_out = H * d_v
    if w_o is not None:
        if len(w_o) != 2 or w_o[0] != H * d_v:
            raise ValueError(
                f"w_o: expected {H * d_v} rows (num_heads * d_v), found shape {tuple(w_o)}"
            )
        d_out = w_o[1]
    _bias(b_o, "b_o", d_out, w_o)
    return HeadPlan(lead, query[-2], key[-2], H, Hkv, d_model, d_key, d_value, d_head, d_v, d_out)


__all__ = [
    "PARAMS",
    "AttentionPlan",
    "HeadPlan",
    "plan_attention",
    "plan_multi_head",
    "projections",
]

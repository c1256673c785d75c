"""How each step's error bound propagates: one function per kind of step, read by the registry.

Each function returns the per-element bound of one step (of head h for a step with a head axis):
the step's own rounding plus the differences already measured on the steps it `reads`, pushed
through it. `cmp` is the running comparison of `scratch.trace.compare` (its array ops, the values
and
differences of the steps checked so far, and the dtype's unit roundoffs).

The backward steps (9-16) are sums of products of the steps they read (dS = P * (dP - D) a
product of differences), so each bound is the same two parts as the forward's: the differences
already measured on the steps read, pushed through the products (|dA| |B| + |A| |dB|), plus the
rounding of the n products and their sum (gamma(n + 2) sum |A| |B|), then `cmp.chain`'s storage
rounding and the ground truth's own error. Differences are propagated, not assumed away, so one
wrong gradient fails by itself. (`scratch.bounds.grad_tolerance` bounds a backward kernel given its
own
inputs; a trace instead propagates the differences of its own forward.)
"""

from __future__ import annotations

from collections.abc import Callable

from scratch.bounds.tolerance import UNIT_ROUNDOFF, Rounding, gamma
from scratch.ops.rope import _pairs

Bound = Callable[[object, str, tuple[str, ...], int], object]


def given(cmp, name: str, reads: tuple[str, ...], h: int):
    """An input the backend stored in its dtype (x, w_q, ..., dO): one rounding."""
    return cmp.ops.ew(lambda w: cmp.u_store * abs(w) + cmp.floor, cmp.want[name])


def projection(cmp, name: str, reads: tuple[str, ...], h: int):
    """q/k/v: a dense layer of its input, or the input itself when there is no weight."""
    if len(reads) == 1:
        return cmp.ops.ew(
            lambda d, w: d + cmp.u_store * abs(w) + cmp.floor, cmp.diff[reads[0]], cmp.want[name]
        )
    return dense(cmp, reads[0], reads[1], cmp.want[name])


def output_projection(cmp, name: str, reads: tuple[str, ...], h: int):
    """output = concat @ w_o (+ b_o)."""
    return dense(cmp, reads[0], reads[1], cmp.want[name])


def product_parts(ops, a: tuple, b: tuple) -> tuple:
    """(propagated, size, n) of a @ b for (got, want, diff) triples (L, n) @ (n, m) -> (L, m):
    how far the differences can move the product, |da| |b| + |a_ref| |db|; sum_l |a_il b_lc|;
    and n, the products summed per entry."""
    (ag, a_ref, da), (bg, _, db) = a, b
    prop = ops.add(ops.mm(da, ops.abs(bg)), ops.mm(ops.abs(a_ref), db))
    return prop, ops.mm(ops.abs(ag), ops.abs(bg)), ops.shape(ag)[-1]


def transposed(ops, triple: tuple) -> tuple:
    """(got, want, diff) transposed."""
    return tuple(ops.T(x) for x in triple)


def product_bound(cmp, prop, size, n: int, want, c: float = 1.0, tiny: float = 0.0):
    """c * (propagated + rounding of n products and their sum) + tiny, then storage and truth."""
    g = gamma(n + 2, cmp.u_acc)
    b0 = cmp.ops.ew(lambda p, s: c * (p + g * s) + tiny, prop, size)
    return cmp.chain(b0, want, 2, n + 2, cmp.ops.ew(lambda s: c * s, size))


def dense(cmp, src: str, w: str, want):
    """src @ w (+ bias): propagated differences + rounding of n products (bias unknown)."""
    ops = cmp.ops
    prop, size, n = product_parts(ops, cmp.values(src), cmp.values(w))
    g = gamma(n + 2, cmp.u_acc)
    # an unknown bias b_c is at most |want| + size, so rounding sees at most 2 size + |want|;
    # a 16-bit trace also stores the bias itself rounded to 16 bits: u_store |b_c| more
    # (the bound does not ask whether a bias was given, so this slack is always there)
    us = cmp.u_store
    b0 = ops.ew(lambda p, s, w: p + (g + us) * (2 * s + abs(w)), prop, size, want)
    full = ops.ew(lambda s, w: 2 * s + abs(w), size, want)
    return cmp.chain(b0, want, 2, n + 2, full)


def side_by_side(cmp, name: str, reads: tuple[str, ...], h: int):
    """The heads' outputs laid side by side: an exact rearrangement of their differences."""
    return cmp.ops.concat_heads(cmp.diff[reads[0]])


def score_parts(cmp, h: int):
    """For head h: (propagated |scores difference|, sum_l |q_il k_jl|, E); cached on cmp."""
    if h not in cmp.scores_cache:
        ops = cmp.ops
        q, k = ("q_rotated", "k_rotated") if cmp.call.rotary else ("q", "k")  # what it reads
        k_T = transposed(ops, cmp.head_slices(h, k))  # (got, want, diff) of k^T
        # (L, E) @ (E, S) -> (L, S)
        cmp.scores_cache[h] = product_parts(ops, cmp.head_slices(h, q), k_T)
    return cmp.scores_cache[h]


def scores(cmp, name: str, reads: tuple[str, ...], h: int):
    """q_h @ k^T: the q/k differences pushed through the product, plus its rounding."""
    return _scored(cmp, name, h, 1.0)


def scaled(cmp, name: str, reads: tuple[str, ...], h: int):
    """scores * scale, bounded from q and k as scores are, times |scale|."""
    return _scored(cmp, name, h, cmp.scale)


def _scored(cmp, name: str, h: int, c: float):
    """c * (propagated + rounding of the E products) for scores (c = 1) and scaled (|scale|)."""
    prop, size, E = score_parts(cmp, h)
    return product_bound(cmp, prop, size, E, cmp.head(name, h)[1], c)


def masked(cmp, name: str, reads: tuple[str, ...], h: int):
    """scaled + mask: the scaled bound plus the rounding of the addition."""
    bound = scaled(cmp, reads[0], (), h)
    want = cmp.head(name, h)[1]
    u_store = Rounding(cmp.dtype, 0, 1).u_store  # 16-bit traces store a rounded copy
    return cmp.ops.ew(lambda b, w: b + (2 * cmp.u_acc + u_store) * (abs(w) + b), bound, want)


def weights(cmp, name: str, reads: tuple[str, ...], h: int):
    """softmax of the backend's masked row vs the truth's: exponents moved by delta_i."""
    ops = cmp.ops
    _, p_ref, _ = cmp.head(name, h)
    factors, floor = _row_factors(cmp, reads[0], name, h)
    live = ops.positive(p_ref)
    S = ops.shape(p_ref)[-1]
    return ops.where(live, ops.ew(lambda f, p: f * p + floor, ops.rows(factors, S), p_ref), 0.0)


def _row_factors(cmp, masked: str, weights_name: str, h: int) -> tuple[list[float], float]:
    """(each row's relative error factor of its softmax entries, the absolute floor) of head h:
    the exponents moved by the masked scores' differences, and both sides' roundings. A learned
    sink (a variant's) is one more exact term of the row: its logit counts in the row's top."""
    ops = cmp.ops
    masked_got, _, d_masked = cmp.head(masked, h)
    _, p_ref, _ = cmp.head(weights_name, h)
    S = ops.shape(p_ref)[-1]
    live = ops.positive(p_ref)
    sink = _sink_logit(cmp, h)
    terms = S if sink is None else S + 1
    # 16-bit traces store rounded copies of float32 scores: the exponents used may sit u_s|m|
    # away from the stored masked values
    slack = Rounding(cmp.dtype, 0, terms).u_store
    moved = ops.ew(lambda d, m: d + slack * m, d_masked, ops.finite_abs(masked_got))
    moved = ops.rowmax(ops.where(live, moved, 0.0))
    top = ops.rowmax(ops.where(live, ops.finite_abs(masked_got), 0.0))
    if sink is not None:
        top = [max(t, abs(sink)) for t in top]
    kernel, truth = Rounding(cmp.dtype, 0, terms), Rounding("float64", 0, terms)
    factors = [
        kernel.factor(d + gamma(4, cmp.u_acc) * t) + truth.factor(gamma(4, truth.u_acc) * t)
        for d, t in zip(moved, top)
    ]
    return factors, kernel.weight_floor + truth.weight_floor


def _sink_logit(cmp, h: int) -> float | None:
    """Head h's learned sink logit when the trace's variant has sinks, else None."""
    if not cmp.call.sinks:
        return None
    from scratch.core.variant_steps import pieces  # here: variant_steps reads the trace's modules

    return pieces(cmp.trace.options).sinks.logits[h]


def sink_weights(cmp, name: str, reads: tuple[str, ...], h: int):
    """A learned sink's share of each row, exp(sink[h]) / (sum_j exp(masked_ij) + exp(sink[h])):
    one more entry of the row's softmax, within the same factor as the row's weights."""
    ops = cmp.ops
    want = cmp.values(name)[1]
    want = want[h] if cmp.call.multi else want  # (H, L) -> (L,), or (L,) with one head
    factors, floor = _row_factors(cmp, reads[0], "weights", h)
    return ops.ew(lambda f, w: f * abs(w) + floor, ops.array(factors), want)


def rotated(cmp, name: str, reads: tuple[str, ...], h: int):
    """RoPE's q_rotated / k_rotated: feature a of a pair (a, b) is a cos - b sin (b: b cos +
    a sin), so it moves by both features' differences, and rounds on |a| + |b|: two products
    and a sum, and cos and sin stored (the ground truth: one exact sum, math's cos and sin)."""
    ops = cmp.ops
    from scratch.core.variant_steps import pieces  # here: variant_steps reads the trace's modules

    rotary = pieces(cmp.trace.options).rotary
    _, want_in, diff_in = cmp.values(reads[0])  # (n, heads * d)
    width = ops.shape(want_in)[-1]
    heads = cmp.H if reads[0] == "q" else cmp.Hkv
    d = width // heads
    rd = d if rotary.rotary_dim is None else rotary.rotary_dim
    partner = list(range(d))  # the other feature of each feature's pair (itself: not turned)
    for a, b in _pairs(rotary.pairing, rd):
        partner[a], partner[b] = b, a
    others = [g * d + partner[c] for g in range(heads) for c in range(d)]

    def swapped(m):  # column c -> column others[c]
        return ops.concat_heads([ops.cols(m, c, c + 1) for c in others])

    n = ops.shape(want_in)[0]
    turned = ops.T(ops.rows([float(partner[c] != c) for _ in range(heads) for c in range(d)], n))
    size = ops.ew(lambda w, o, t: abs(w) + t * abs(o), want_in, swapped(want_in), turned)
    moved = ops.ew(lambda e, o, t: e + t * o, diff_in, swapped(diff_in), turned)
    g = gamma(4, cmp.u_acc) + gamma(3, UNIT_ROUNDOFF["float64"])
    b0 = ops.ew(lambda m, s, t: m + t * g * (s + m), moved, size, turned)
    return cmp.chain(b0, cmp.want[name], 1, 0, size)


def weighted_values(cmp, name: str, reads: tuple[str, ...], h: int):
    """weights @ v: the larger of a propagated bound (from the trace's weights) and an
    end-to-end one (from its q, k, v, as `tolerance` does)."""
    ops = cmp.ops
    p, p_ref, dp = cmp.head(reads[0], h)  # weights
    v, v_ref, dv = cmp.head_slices(h, reads[1])  # v
    S = ops.shape(p_ref)[-1]
    clean = ops.nan_to_zero(p_ref)
    dp = ops.nan_to_zero(dp)
    absv = ops.abs(v)
    # (L, S) @ (S, Ev) -> (L, Ev): propagated from the trace's own weights and v
    p_abs = ops.abs(ops.nan_to_zero(p))
    acc = ops.mm(p_abs, absv)
    prop = ops.add(ops.mm(dp, absv), ops.mm(clean, dv))
    g = gamma(S + 1, cmp.u_acc)
    out_ref = cmp.head(name, h)[1]
    via_weights = cmp.chain(ops.ew(lambda a, b: a + g * b, prop, acc), out_ref, 2, S + 1, acc)
    # end to end: exponents moved by the q/k differences, the scores' rounding and the mask
    s_prop, size, E = score_parts(cmp, h)
    masked_ref, scaled_ref = cmp.head("masked", h)[1], cmp.head("scaled", h)[1]
    live = ops.positive(clean)
    kernel, truth = Rounding(cmp.dtype, E, S), Rounding("float64", E, S)
    added = ops.finite_abs(ops.ew(lambda m, sc: m - sc, masked_ref, scaled_ref))  # |mask|
    g = kernel.score_gamma
    moved = ops.ew(lambda pr, s, a: cmp.scale * pr + g * (cmp.scale * s + a), s_prop, size, added)
    delta = ops.rowmax(ops.where(live, moved, 0.0))
    top = ops.rowmax(ops.where(live, ops.ew(lambda s: cmp.scale * s, size), 0.0))
    factors = [kernel.factor(d) + truth.factor(truth.score_gamma * t) for d, t in zip(delta, top)]
    Ev = ops.shape(v)[-1]
    weighted = ops.mm(clean, ops.abs(v_ref))
    floor = (kernel.weight_floor + truth.weight_floor) * ops.maxabs(v_ref) * S
    floor += kernel.output_floor + truth.output_floor
    end_to_end = ops.ew(
        lambda f, w, pd: f * w + pd + floor, ops.rows(factors, Ev), weighted, ops.mm(clean, dv)
    )
    both = ops.maximum(via_weights, end_to_end)
    nonzero = ops.rows([float(x > 0) for x in ops.rowmax(clean)], Ev)  # zero and NaN rows: 0
    return ops.where(nonzero, both, 0.0)


# -- the backward steps (9-16)


def _cols(ops, triple: tuple, lo: int, hi: int) -> tuple:
    """Columns lo:hi of (got, want, diff)."""
    return tuple(ops.cols(x, lo, hi) for x in triple)


def _side(ops, triples: list[tuple]) -> tuple:
    """Equally tall (got, want, diff) blocks laid side by side (columns after columns)."""
    return tuple(ops.concat_heads(ops.stack([t[n] for t in triples])) for n in range(3))


def _atop(ops, triples: list[tuple]) -> tuple:
    """Equally wide (got, want, diff) blocks stacked (rows after rows)."""
    return transposed(ops, _side(ops, [transposed(ops, t) for t in triples]))


def _parts(ops, a: tuple, b: tuple) -> tuple:
    """step_bounds.product_parts of a @ b with NaN read as 0 (a gradient's NaN rows)."""
    return product_parts(ops, tuple(map(ops.nan_to_zero, a)), tuple(map(ops.nan_to_zero, b)))


def _finish(cmp, prop, size, n: int, want, c: float = 1.0):
    """step_bounds.product_bound with the subnormals: each product may underflow, an absolute
    error up to one subnormal spacing (`cmp.floor`) each, whatever its size: n + 2 of them."""
    return product_bound(cmp, prop, size, n, want, c, (n + 2) * cmp.floor)


def _product(cmp, a: tuple, b: tuple, want, c: float = 1.0):
    """The bound of c * a @ b (a scale c adds two roundings: c itself stored in the backend's
    dtype, and its product, which a backend may take before the sum or after)."""
    prop, size, n = _parts(cmp.ops, a, b)
    return _finish(cmp, prop, size, n + (2 if c != 1.0 else 0), want, c)


def _first_column(ops, a):
    """Column 0 of a matrix, as a vector."""
    return ops.T(a)[0]


def _ones(ops, n: int) -> tuple:
    """An exact (n, 1) column of ones as (got, want, diff)."""
    return ops.array([[1.0]] * n), ops.array([[1.0]] * n), ops.array([[0.0]] * n)


def _head_grad(cmp, h: int) -> tuple:
    """Head h's dO as (got, want, diff): grad_head_outputs[h], or grad_output with one head."""
    if cmp.call.multi:
        return cmp.head("grad_head_outputs", h)
    return cmp.values("grad_output")


def weight_grad(cmp, name: str, reads: tuple[str, ...], h: int):
    """grad_w = input^T @ gradient (over every row)."""
    src, grad = reads
    return _product(cmp, transposed(cmp.ops, cmp.values(src)), cmp.values(grad), cmp.want[name])


def bias_grad(cmp, name: str, reads: tuple[str, ...], h: int):
    """grad_b = column sums of the gradient: gradient^T @ ones."""
    ops = cmp.ops
    grad = transposed(ops, cmp.values(reads[0]))
    prop, size, n = _parts(ops, grad, _ones(ops, ops.shape(grad[0])[-1]))
    prop, size = _first_column(ops, prop), _first_column(ops, size)
    return _finish(cmp, prop, size, n, cmp.want[name])


def grad_head_outputs(cmp, name: str, reads: tuple[str, ...], h: int):
    """dO of head h: grad_output @ (w_o's rows of head h)^T, or grad_output's columns of h."""
    ops = cmp.ops
    want = cmp.head(name, h)[1]
    d_v = ops.shape(want)[-1]
    lo, hi = h * d_v, (h + 1) * d_v
    if "w_o" not in reads:  # an exact rearrangement of grad_output's columns
        return ops.cols(cmp.diff["grad_output"], lo, hi)
    w_rows = _cols(ops, transposed(ops, cmp.values("w_o")), lo, hi)  # (d_out, d_v)
    return _product(cmp, cmp.values("grad_output"), w_rows, want)


def _blocks(cmp, name: str, groups: list[list[int]], a, b, c: float = 1.0):
    """c * a @ b for each group of heads (a's blocks side by side, b's stacked): the groups'
    results side by side, each its columns of step `name`."""
    ops = cmp.ops
    d = ops.shape(cmp.want[name])[-1] // len(groups)
    blocks = []
    for n, heads in enumerate(groups):
        left = _side(ops, [a(k) for k in heads])  # (rows, n L)
        right = _atop(ops, [b(k) for k in heads])  # (n L, d)
        blocks.append(_product(cmp, left, right, ops.cols(cmp.want[name], n * d, (n + 1) * d), c))
    return ops.concat_heads(ops.stack(blocks))


def _kv_groups(cmp) -> list[list[int]]:
    """The query heads that read each key/value head, in kv head order."""
    return [[h for h in range(cmp.H) if h // (cmp.H // cmp.Hkv) == g] for g in range(cmp.Hkv)]


def grad_value(cmp, name: str, reads: tuple[str, ...], h: int):
    """dV of each kv head: weights^T @ dO over every query head reading it, side by side."""

    def weights_T(k):
        return transposed(cmp.ops, cmp.head("weights", k))

    return _blocks(cmp, name, _kv_groups(cmp), weights_T, lambda k: _head_grad(cmp, k))


def grad_weights(cmp, name: str, reads: tuple[str, ...], h: int):
    """dP of head h: dO_h @ v_h^T."""
    ops = cmp.ops
    v = transposed(ops, cmp.head_slices(h, "v"))  # (d_v, S)
    return _product(cmp, _head_grad(cmp, h), v, cmp.head(name, h)[1])


def _vector(cmp, name: str, h: int) -> tuple:
    """Head h of a per-head vector step (row_dot): (got, want, diff)."""
    triple = cmp.values(name)
    return tuple(x[h] for x in triple) if cmp.call.multi else triple


def row_dot(cmp, name: str, reads: tuple[str, ...], h: int):
    """D_i = sum_c dO_ic O_ic: products summed along each row."""
    ops = cmp.ops
    (gg, gr, gd), (og, or_, od) = _head_grad(cmp, h), cmp.head(reads[1], h)
    gg, gr, gd, og, or_, od = map(ops.nan_to_zero, (gg, gr, gd, og, or_, od))
    ones = ops.array([[1.0]] * ops.shape(gg)[-1])
    prop = ops.ew(lambda a, b, c, d: a * abs(b) + abs(c) * d, gd, og, gr, od)
    size = ops.ew(lambda a, b: abs(a) * abs(b), gg, og)
    prop = _first_column(ops, ops.mm(prop, ones))
    size = _first_column(ops, ops.mm(size, ones))
    return _finish(cmp, prop, size, ops.shape(gg)[-1], _vector(cmp, name, h)[1])


def grad_scores(cmp, name: str, reads: tuple[str, ...], h: int):
    """dS = P * (dP - D): each factor's difference times the other's size, plus 2 roundings."""
    if cmp.call.dropout_p:  # P before dropout is not a step of the trace: nothing to propagate
        raise KeyError("grad_scores with dropout: no propagated bound (P before dropout)")
    ops = cmp.ops
    (pg, pr, pd), (dg, dr, dd) = cmp.head("weights", h), cmp.head("grad_weights", h)
    Dg, Dr, Dd = _vector(cmp, "row_dot", h)
    S = ops.shape(pg)[-1]
    Dg, Dr, Dd = (ops.rows(ops.nan_to_zero(x), S) for x in (Dg, Dr, Dd))
    pg, pr, pd, dg, dr, dd = map(ops.nan_to_zero, (pg, pr, pd, dg, dr, dd))
    # |P - P'| |dP - D| + |P'| (|dP - dP'| + |D - D'|): the difference of a product
    prop = ops.ew(
        lambda a, b, c, d, e, f: a * abs(b - c) + abs(d) * (e + f), pd, dg, Dg, pr, dd, Dd
    )
    size = ops.ew(lambda p, d, D: abs(p) * (abs(d) + abs(D)), pg, dg, Dg)
    return _finish(cmp, prop, size, 0, cmp.head(name, h)[1])


def grad_query(cmp, name: str, reads: tuple[str, ...], h: int):
    """dQ of each head: scale * dS_h @ k_h, side by side."""
    groups = [[k] for k in range(cmp.H)]
    return _blocks(cmp, name, groups, lambda k: cmp.head("grad_scores", k),
                   lambda k: cmp.head_slices(k, "k"), cmp.scale)  # fmt: skip


def grad_key(cmp, name: str, reads: tuple[str, ...], h: int):
    """dK of each kv head: scale * dS^T @ q over every query head reading it, side by side."""

    def scores_T(k):
        return transposed(cmp.ops, cmp.head("grad_scores", k))

    return _blocks(cmp, name, _kv_groups(cmp), scores_T, lambda k: cmp.head_slices(k, "q"),
                   cmp.scale)  # fmt: skip


def input_grad(cmp, name: str, reads: tuple[str, ...], h: int):
    """An input's gradient: grad @ w^T summed over the projections it fed (grad itself: no w)."""
    ops = cmp.ops
    reads, prop, size, n = list(reads), None, None, 0
    while reads:
        grad = cmp.values(reads.pop(0))
        w = cmp.values(reads.pop(0)) if reads and reads[0].startswith("w_") else None
        if w is None:  # the identity: the gradient itself, one term
            p, s, k = tuple(ops.abs(ops.nan_to_zero(x)) for x in (grad[2], grad[0])) + (1,)
        else:
            p, s, k = _parts(ops, grad, transposed(ops, w))
        prop = p if prop is None else ops.add(prop, p)
        size = s if size is None else ops.add(size, s)
        n += k
    return _finish(cmp, prop, size, n, cmp.want[name])

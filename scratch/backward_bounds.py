"""How each backward step's error bound propagates, in the style of `scratch.step_bounds`.

Every backward step is a sum of products of the steps it reads (dS = P * (dP - D) a product of
differences), so each bound is the same two parts as the forward's: the differences already
measured on the steps read, pushed through the products (|dA| |B| + |A| |dB|), plus the rounding
of the n products and their sum (gamma(n + 2) sum |A| |B|), then `cmp.chain`'s storage rounding
and the ground truth's own error. Differences are propagated, not assumed away, so one wrong
gradient fails by itself. (`scratch.grad_tolerance` bounds a backward kernel given its own
inputs; a trace instead propagates the differences of its own forward.)
"""

from __future__ import annotations

from .step_bounds import product_bound, product_parts, stored_input, transposed

given = stored_input  # dO is an input the backend stored in its dtype


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


def _group(cmp, g: int) -> list[int]:
    """The query heads that read key/value head g."""
    return [h for h in range(cmp.H) if h // (cmp.H // cmp.Hkv) == g]


def weight(cmp, name: str, reads: tuple[str, ...], h: int):
    """grad_w = input^T @ gradient (over every row)."""
    src, grad = reads
    return _product(cmp, transposed(cmp.ops, cmp.values(src)), cmp.values(grad), cmp.want[name])


def bias(cmp, name: str, reads: tuple[str, ...], h: int):
    """grad_b = column sums of the gradient: gradient^T @ ones."""
    ops = cmp.ops
    grad = transposed(ops, cmp.values(reads[0]))
    prop, size, n = _parts(ops, grad, _ones(ops, ops.shape(grad[0])[-1]))
    prop, size = _first_column(ops, prop), _first_column(ops, size)
    return _finish(cmp, prop, size, n, cmp.want[name])


def head_outputs(cmp, name: str, reads: tuple[str, ...], h: int):
    """dO of head h: grad_output @ (w_o's rows of head h)^T, or grad_output's columns of h."""
    ops = cmp.ops
    want = cmp.head(name, h)[1]
    d_v = ops.shape(want)[-1]
    lo, hi = h * d_v, (h + 1) * d_v
    if "w_o" not in reads:  # an exact rearrangement of grad_output's columns
        return ops.cols(cmp.diff["grad_output"], lo, hi)
    w_rows = _cols(ops, transposed(ops, cmp.values("w_o")), lo, hi)  # (d_out, d_v)
    return _product(cmp, cmp.values("grad_output"), w_rows, want)


def value(cmp, name: str, reads: tuple[str, ...], h: int):
    """dV of each kv head: weights^T @ dO over every query head reading it, side by side."""
    ops = cmp.ops
    blocks = []
    d_v = ops.shape(cmp.want[name])[-1] // cmp.Hkv
    for g in range(cmp.Hkv):
        heads = _group(cmp, g)
        a = _side(ops, [transposed(ops, cmp.head("weights", k)) for k in heads])  # (S, n L)
        b = _atop(ops, [_head_grad(cmp, k) for k in heads])  # (n L, d_v)
        want = ops.cols(cmp.want[name], g * d_v, (g + 1) * d_v)
        blocks.append(_product(cmp, a, b, want))
    return ops.concat_heads(ops.stack(blocks))


def weights(cmp, name: str, reads: tuple[str, ...], h: int):
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


def scores(cmp, name: str, reads: tuple[str, ...], h: int):
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


def query(cmp, name: str, reads: tuple[str, ...], h: int):
    """dQ of each head: scale * dS_h @ k_h, side by side."""
    ops = cmp.ops
    d = ops.shape(cmp.want[name])[-1] // cmp.H
    blocks = [
        _product(cmp, cmp.head("grad_scores", k), cmp.head_slices(k, "k"),
                 ops.cols(cmp.want[name], k * d, (k + 1) * d), cmp.scale)
        for k in range(cmp.H)
    ]  # fmt: skip
    return ops.concat_heads(ops.stack(blocks))


def key(cmp, name: str, reads: tuple[str, ...], h: int):
    """dK of each kv head: scale * dS^T @ q over every query head reading it, side by side."""
    ops = cmp.ops
    d = ops.shape(cmp.want[name])[-1] // cmp.Hkv
    blocks = []
    for g in range(cmp.Hkv):
        heads = _group(cmp, g)
        a = _side(ops, [transposed(ops, cmp.head("grad_scores", k)) for k in heads])  # (S, n L)
        b = _atop(ops, [cmp.head_slices(k, "q") for k in heads])  # (n L, d)
        want = ops.cols(cmp.want[name], g * d, (g + 1) * d)
        blocks.append(_product(cmp, a, b, want, cmp.scale))
    return ops.concat_heads(ops.stack(blocks))


def inputs(cmp, name: str, reads: tuple[str, ...], h: int):
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

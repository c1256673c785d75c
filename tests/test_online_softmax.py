"""scratch.learn.online_softmax: every tile's running values against the exact attention."""

import math
import random
from math import fsum, inf

import pytest

from scratch import scaled_dot_product_attention, tolerance
from scratch.learn.online_softmax import online_softmax
from scratch.ops.rounding import round_to
from scratch.ops.softmax import log_sum_exp_row


def example(seed: int, L: int, S: int, E: int, Ev: int, size: float = 1.0):
    """Seeded Gaussian q, k, v."""
    rng = random.Random(seed)
    gauss = lambda n, m: [[rng.gauss(0, size) for _ in range(m)] for _ in range(n)]  # noqa: E731
    return gauss(L, E), gauss(S, E), gauss(S, Ev)


def masks(L: int, S: int, seed: int) -> list:
    """None, causal, and a random mask with one fully masked row."""
    rng = random.Random(seed)
    grid = [[rng.random() < 0.6 for _ in range(S)] for _ in range(L)]
    grid[L // 2] = [False] * S
    return [None, [[j <= i for j in range(S)] for i in range(L)], grid]


def biggest(a: list, b: list) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block", [1, 2, 3, 7, 16])
def test_each_tile_is_the_attention_over_the_keys_seen(seed, block):
    """After keys 0..stop-1 the partial output is attention over exactly those keys, the running
    max their max, the denominator sum exp(s - m), the lse their log-sum-exp; the last is the
    exact output within the derived float64 bound."""
    L, S = 5, 11
    q, k, v = example(seed, L, S, 4, 3, size=1.5)
    for allowed in masks(L, S, seed):
        walk = online_softmax(q, k, v, allowed=allowed, block=block)
        assert [st.stop for st in walk.steps] == list(range(block, S, block)) + [S]
        assert 0 < walk.bound < 1e-12  # a float64 bound, not a tolerance picked to pass
        for st in walk.steps:
            seen = None if allowed is None else [row[: st.stop] for row in allowed]
            out, w = scaled_dot_product_attention(q, k[: st.stop], v[: st.stop], attn_mask=seen)
            assert biggest(st.partial, out) <= walk.bound, (block, st.stop)
            for i, row in enumerate(st.scores):
                full = [s * 0.5 for s in _dots(q[i], k[: st.stop])]  # scale 1/sqrt(4)
                full = [s if seen is None or seen[i][j] else -inf for j, s in enumerate(full)]
                top = max(full)
                assert st.running_max[i] == top
                assert row == full[st.start : st.stop]
                if top == -inf:
                    assert st.denominator[i] == 0.0 and st.lse[i] == -inf
                    continue
                total = fsum(math.exp(s - top) for s in full)
                assert abs(st.denominator[i] - total) <= 1e-14 * total
                assert abs(st.lse[i] - log_sum_exp_row(full)) <= 1e-14 * max(1, abs(st.lse[i]))
        last = walk.steps[-1]
        assert biggest(last.partial, walk.exact) <= walk.bound
        assert last.difference == biggest(last.partial, walk.exact)
        assert all(st.rounding == 0.0 for st in walk.steps)


def _dots(a: list, rows: list) -> list:
    return [fsum(x * y for x, y in zip(a, r)) for r in rows]


def test_rescale_is_exp_of_the_max_change():
    q, k, v = example(7, 4, 9, 3, 2)
    walk = online_softmax(q, k, v, block=3)
    old = [-inf] * 4
    for st in walk.steps:
        for i in range(4):
            new = st.running_max[i]  # exp(-inf - new) = 0 on the row's first tile: l, acc are 0
            want = 1.0 if new == -inf else math.exp(old[i] - new)
            assert st.rescale[i] == pytest.approx(want, rel=1e-15)
            assert st.rescale[i] <= 1.0
        old = st.running_max


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("seed", range(6))
def test_16_bit_walk_is_within_the_checkers_bound(dtype, seed):
    """The 16-bit emulation stays within scratch.tolerance's bound for its rounded inputs, and
    its rounding column is the distance to the float64 walk."""
    q, k, v = example(seed, 5, 13, 8, 4)
    walk = online_softmax(q, k, v, block=4, dtype=dtype)
    exact_walk = online_softmax(q, k, v, block=4)
    qs, ks, vs = ([[round_to(x, dtype) for x in row] for row in m] for m in (q, k, v))
    out, w = scaled_dot_product_attention(qs, ks, vs)
    bound = tolerance(qs, ks, vs, w, dtype=dtype)
    last = walk.steps[-1]
    for i, row in enumerate(last.partial):
        for c, x in enumerate(row):
            assert abs(x - out[i][c]) <= bound[i][c], (i, c)
            assert x == round_to(x, dtype)  # the output is stored in 16 bits
    for st, ref in zip(walk.steps, exact_walk.steps):
        assert st.rounding == biggest(st.partial, ref.partial) > 0


def test_bad_arguments_are_named():
    q, k, v = example(0, 2, 3, 2, 2)
    for kwargs, word in [
        ({"block": 0}, "block"),
        ({"block": 1.5}, "block"),
        ({"dtype": "float8"}, "dtype"),
        ({"allowed": [[True] * 2] * 2}, "allowed"),
    ]:
        with pytest.raises(ValueError, match=word):
            online_softmax(q, k, v, **kwargs)
    with pytest.raises(ValueError, match="key, value"):
        online_softmax(q, k, v[:2])

"""The checker's speed-ups (issue 24 item 4) keep its semantics: the same seeded inputs bit for
bit, the same floats read back, the sampled rows' float64 reference within the float64 bound of
the ground truth, and the kernel checked keeps its own OpenBLAS threads."""

from __future__ import annotations

import random

import pytest

from scratch.checker.cases import Case, gauss, normals

np = pytest.importorskip("numpy")


def one_call_at_a_time(rng: random.Random, shape: tuple[int, ...], size: float) -> list:
    """The checker's inputs as they were drawn before: rng.gauss once per value, row-major."""
    if len(shape) == 1:
        return [rng.gauss(0.0, size) for _ in range(shape[0])]
    return [one_call_at_a_time(rng, shape[1:], size) for _ in range(shape[0])]


@pytest.mark.parametrize("seed", range(20))
def test_bulk_draws_are_rng_gauss_bit_for_bit(seed):
    """Every value (repr: sign of zero included) and the generator's state after, odd counts and
    a cached half from an earlier call included."""
    shapes = [(3, 5), (1,), (2, 3, 7), (4, 64), (1, 1)]
    size = 0.5 + seed
    fast, slow = random.Random(seed), random.Random(seed)
    if seed % 2:  # leave a cached sin half in both generators
        assert fast.gauss() == slow.gauss()
    for shape in shapes:
        assert repr(gauss(fast, shape, size)) == repr(one_call_at_a_time(slow, shape, size))
    assert fast.gauss() == slow.gauss() and fast.random() == slow.random()


def test_a_changed_draw_is_caught():
    """The comparison sees one changed value: the sin half dropped from the first pair."""
    rng, again = random.Random(1), random.Random(1)
    drawn = normals(rng, 6)
    shifted = [again.gauss(0.0, 1.0)] + [again.gauss(0.0, 1.0) for _ in range(6)][1:]
    assert drawn != shifted


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "bool"])
def test_floats_read_back_as_before(dtype):
    from scratch.checker.arrays import Arrays
    from scratch.ops.nested import map_leaves as nested_map

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 4)) * 100).astype(dtype)
    got = Arrays("numpy", None).floats(x)
    want = nested_map(float, x.tolist())
    assert repr(got) == repr(want)
    assert all(type(v) is float for v in np.ravel(got).tolist())


SAMPLED = [
    Case("large", (300, 16), (300, 16), (300, 12), rows=6),
    Case("large-causal", (300, 16), (300, 16), (300, 16), is_causal=True, rows=6),
    Case("large-gqa", (1, 4, 200, 16), (1, 2, 200, 16), (1, 2, 200, 16), gqa=True, rows=4),
    Case("large-mask", (120, 16), (150, 16), (150, 16), mask="float", rows=5),
    Case("large-empty", (120, 16), (150, 16), (150, 16), mask="empty-row", rows=5),
    Case("large-logits", (100, 16), (140, 16), (140, 16), q_size=30.0, rows=5),
]


@pytest.mark.parametrize("masked_rows", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("case", SAMPLED, ids=lambda c: c.name)
def test_sampled_rows_float64_reference_is_within_the_float64_bound(case, masked_rows):
    """float64_rows (16/32-bit checks of sampled rows) against the exact ground truth on the
    same rows: within the float64 kernel bound, NaN where the truth has NaN."""
    from scratch.bounds.tolerance import tolerance
    from scratch.checker.arrays import Arrays
    from scratch.checker.cases import add_late_max, mask_values
    from scratch.checker.prepare import _sampled_truth, made_in
    from scratch.core.rows import sample_rows

    rng = random.Random(f"0:{case.name}")
    q, k, v = gauss(rng, case.q, case.q_size), gauss(rng, case.k), gauss(rng, case.v)
    if case.late_max:
        add_late_max(q, k)
    mask = mask_values(rng, case, case.q[-2], case.k[-2])
    arrays = Arrays("numpy", None)
    _, (q, k, v), _, mask = made_in(arrays, "float32", (q, k, v), mask, case)
    rows = sample_rows(case.q[-2], case.rows, 0)
    if case.mask == "empty-row":
        rows = sorted(set(rows) | {1})  # the fully masked row
    options = dict(attn_mask=mask, is_causal=case.is_causal, scale=case.scale,
                   enable_gqa=case.gqa, masked_rows=masked_rows)  # fmt: skip
    fast, fast_w, arrays64 = _sampled_truth(case, "float32", q, k, v, mask, rows, options)
    exact, exact_w, none = _sampled_truth(case, "float64", q, k, v, mask, rows, options)
    assert arrays64 is not None and none is None
    fast, exact = np.array(fast), np.array(exact)
    assert fast.shape == exact.shape and np.array_equal(np.isnan(fast), np.isnan(exact))
    q_rows, k64, v64, _ = arrays64
    float_mask = None if case.mask != "float" else [mask[i] for i in rows]
    bound = np.array(tolerance(q_rows, k64, v64, exact_w, scale=case.scale, dtype="float64",
                               attn_mask=float_mask, enable_gqa=case.gqa))  # fmt: skip
    ok = ~np.isnan(exact)
    diff = np.abs(fast - exact)[ok]
    assert np.all(diff <= bound[ok]), f"{case.name}: {diff.max():.3g} > bound"
    assert np.max(diff, initial=0.0) > 0.0 or case.name == "large-empty"  # not the truth itself


def test_the_kernel_checked_keeps_its_openblas_threads():
    """The checker's own products run on one OpenBLAS thread; the kernel it calls sees the
    thread count its caller set, and that count is back after the check."""
    import scratch
    from scratch import backends
    from scratch.backends.numpy_threads import openblas_threads

    control = openblas_threads()
    if control is None:
        pytest.skip("no OpenBLAS found in this NumPy")
    get, put = control
    numpy_be = backends.get("numpy")
    seen = []

    def kernel(q, k, v, **keywords):
        seen.append(get())
        return numpy_be.scaled_dot_product_attention(q, k, v, need_weights=False, **keywords)

    before = get()
    put(2)
    try:
        assert scratch.check(kernel)
        assert set(seen) == {2} and get() == 2
    finally:
        put(before)

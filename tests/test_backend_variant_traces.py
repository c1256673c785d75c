"""The NumPy and torch traces of every variant the window's picker offers match the ground truth.

Every mask (both alignments), alone and with every score change, learned sinks and RoPE, and
each of those alone: each backend's trace, step by step, within scratch.compare_traces' bounds
(the window's own check), over seeds, GQA, a given mask with an empty row and every masked_rows
policy, and a decode step.
"""

from __future__ import annotations

import random

import pytest

import scratch
from scratch import backends
from scratch.core.options import Options
from scratch.decode.example import decode_example
from scratch.ops.validate import MASKED_ROWS
from scratch.trace.forward import trace_example
from scratch.variants import VariantChoice
from scratch.variants.choice import ALIGNS, MASKS, ROPES

np = pytest.importorskip("numpy")

L, D_MODEL, HEADS, KV_HEADS, D = 6, 5, 2, 1, 4
EXTRAS = dict(softcap=2.0, alibi=True, sinks=(0.5, -1.0), rope="half")
_grid = random.Random(7)  # the drawn mask: seeded cells, the diagonal always seen
DRAWN = tuple(tuple(i == j or _grid.random() < 0.5 for j in range(L)) for i in range(L))
MASK_FIELDS = dict(left=2, right=0, chunk=4, prefix=2, cu_seqlens=(0, 2, 6), sink_tokens=1)
MASK_FIELDS["drawn"] = DRAWN


def offered() -> list[VariantChoice]:
    """Every mask in both alignments, alone and with every extra; then each extra alone."""
    choices = [
        VariantChoice(mask=m, align=a, **MASK_FIELDS, **extra)
        for m in MASKS
        for a in ALIGNS
        for extra in ({}, EXTRAS)
    ]
    alone = [dict(softcap=2.0), dict(alibi=True), dict(sinks=(0.5, -1.0))]
    alone += [dict(rope=r) for r in ROPES if r != "none"]
    return choices + [VariantChoice(mask="window", **MASK_FIELDS, **extra) for extra in alone]


CHOICES = offered()


def _example(seed: int) -> scratch.Example:
    """A seeded example with projections, 2 query heads sharing 1 kv head (GQA)."""
    rng = random.Random(seed)

    def m(rows: int, cols: int) -> list:
        return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]

    params = {"w_q": m(D_MODEL, HEADS * D), "w_k": m(D_MODEL, KV_HEADS * D)}
    params["w_v"] = m(D_MODEL, KV_HEADS * D)
    return scratch.Example(m(L, D_MODEL), params=params, num_heads=HEADS, num_kv_heads=KV_HEADS)


def _options(choice: VariantChoice, seed: int, Lq: int = L) -> Options:
    """The choice's variant; seed 2 adds a given mask whose row 1 sees no key (masked_rows)."""
    variant = choice.variant(Lq, L, HEADS, length=L)
    mask = None
    if seed == 2 and Lq == L:
        mask = [[i != 1 for _ in range(L)] for i in range(L)]
    return Options(mask, variant=variant, masked_rows=MASKED_ROWS[seed % len(MASKED_ROWS)])


def assert_within_bounds(traced, truth) -> None:
    """Same steps; every step within its bound (the message names the step and the ratio)."""
    assert traced.names() == truth.names()
    checks = scratch.compare_traces(traced, truth)
    assert [c.name for c in checks] == truth.names()
    bad = [f"{c.name}: {c.ratio:.3g} x its bound ({c.message})" for c in checks if not c.ok]
    assert not bad, bad


def _backend(name: str):
    if name.startswith("torch"):
        pytest.importorskip("torch")
    return backends.get(name)


@pytest.mark.parametrize(
    "name, dtype",
    [
        ("numpy", "float64"),
        ("numpy", "float32"),
        ("torch-cpu", "float64"),
        ("torch-cpu", "float32"),
    ],
)
@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: f"{c.mask}-{c.align}-{c.rope}")
def test_every_offered_variant_traces_within_the_bounds(name, dtype, choice):
    backend = _backend(name)
    for seed in range(3):
        example, options = _example(seed), _options(choice, seed)
        truth = trace_example(example, options)
        assert_within_bounds(backend.trace_example(example, options, dtype=dtype), truth)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_16_bit_traces_of_the_variants_are_within_the_bounds(dtype):
    backend = _backend("torch-cpu")
    for choice in CHOICES[1::2]:  # every mask, with every extra
        example, options = _example(4), _options(choice, 4)
        traced = backend.trace_example(example, options, dtype=dtype)
        assert_within_bounds(traced, trace_example(example, options))


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_a_decode_step_with_a_variant_is_within_the_bounds(name):
    """Decode: the newest token queries the cache, aligned bottom-right (the window's call)."""
    backend = _backend(name)
    for choice in CHOICES[1::4]:  # every mask, bottom-right, with every extra
        example = decode_example(_example(5), L)
        options = _options(choice, 5, Lq=1)
        assert_within_bounds(
            backend.trace_example(example, options), trace_example(example, options)
        )

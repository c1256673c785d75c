"""Presets: every number the seed notebooks printed is reproduced by the scratch ground truth."""

from __future__ import annotations

import dataclasses
import math

import pytest

import scratch
from scratch.learn import presets

NAMES = [
    "seed000-example2",
    "seed001-example1",
    "seed001-example2",
    "seed001-example3",
    "seed001-example2b",
    "seed002",
    "journey",
    "journey-query",
    "seed004",
]

# Unit roundoff of the dtype each notebook computed in (integer tensors are exact).
UNIT = {"float32": 2.0**-24, "float64": 2.0**-53, "int64": 0.0}


def half_unit(p: float, decimals: int | None, sci: bool) -> float:
    """Half a unit in the last printed digit of p (0 when the number was printed in full)."""
    if decimals is None:
        return 0.0
    if sci:
        exponent = math.floor(math.log10(abs(p))) if p else 0
        return 0.5 * 10.0 ** (exponent - decimals)
    return 0.5 * 10.0**-decimals


def tolerance(p: float, printed: presets.Printed) -> float:
    """Printed rounding, plus rounding in the notebook's dtype and in our float64.

    Every printed number here comes from at most a few 6-term dot products and one softmax on
    values of size <= max(1, |p|) * 64; 16 roundings of that size in each dtype cover it.
    """
    rounding = 16 * (UNIT[printed.dtype] + UNIT["float64"]) * max(1.0, abs(p))
    return half_unit(p, printed.decimals, printed.sci) + rounding


def flat(nested: object, index: tuple = ()) -> list[tuple[tuple, float]]:
    """(index, number) pairs of a nested list, row-major."""
    if isinstance(nested, list | tuple):
        return [pair for i, sub in enumerate(nested) for pair in flat(sub, (*index, i))]
    return [(index, float(nested))]


def shape(nested: object) -> tuple[int, ...]:
    """Shape of a regular nested list."""
    dims = []
    while isinstance(nested, list | tuple):
        dims.append(len(nested))
        nested = nested[0]
    return tuple(dims)


def assert_reproduces(actual: object, printed: presets.Printed, what: str) -> None:
    """Shape first, then every number within its printed tolerance; names the worst entry."""
    assert shape(actual) == shape(printed.value), (
        f"{what}: shape {shape(actual)} != printed shape {shape(printed.value)}"
    )
    bad = [
        (idx, a, p, tolerance(p, printed))
        for (idx, a), (_, p) in zip(flat(actual), flat(printed.value), strict=True)
        if not abs(a - p) <= tolerance(p, printed)
    ]
    assert not bad, f"{what} ({printed.cell}: {printed.expr}): [index, ours, printed, tol] {bad}"


def differs(actual: object, printed: presets.Printed) -> bool:
    """True when some number of `actual` is outside the printed tolerance (or shapes differ)."""
    if shape(actual) != shape(printed.value):
        return True
    pairs = zip(flat(actual), flat(printed.value), strict=True)
    return any(abs(a - p) > tolerance(p, printed) for (_, a), (_, p) in pairs)


# --- plain-Python recipes for what a notebook printed beyond the trace's steps ------------


def _product(t):  # seed 001 ex 1: softmax(scores) * states, weight c scales column c
    w, v = t["weights"].tolist()[0], t["v"].tolist()
    return [[w[c] * v[i][c] for c in range(len(w))] for i in range(len(v))]


def _slip_terms(t):  # seed 002 In[46]: attention_scores[0][i] * V[i]
    w, v = t["weights"].tolist(), t["v"].tolist()
    return [[w[0][i] * v[i][c] for c in range(len(v[i]))] for i in range(len(v))]


def _slip_scores(t):  # seed 001 In[183]: queries @ keys, no transpose
    q, k = t["q"].tolist(), t["k"].tolist()
    rows, cols, inner = range(len(q)), range(len(k[0])), range(len(k))
    return [[sum(q[i][c] * k[c][j] for c in inner) for j in cols] for i in rows]


def _naive(t):  # seed 003 In[14]: attn_scores_2 / attn_scores_2.sum()
    return [[s / sum(row) for s in row] for row in t["scores"].tolist()]


EXTRAS = {
    ("seed001-example1", "slip_product"): _product,
    ("seed001-example1", "slip_row_sums"): lambda t: [sum(r) for r in _product(t)],
    ("seed001-example3", "q0_times_kT"): lambda t: [  # broadcast: [r][j] = q_0[j] * k_j[r]
        [t["q"].tolist()[0][j] * kj[r] for j, kj in enumerate(t["k"].tolist())] for r in range(3)
    ],
    ("seed001-example3", "kT"): lambda t: [list(col) for col in zip(*t["k"].tolist(), strict=True)],
    ("seed001-example3", "q01_times_k0"): lambda t: [
        t["q"].tolist()[0][1] * c for c in t["k"].tolist()[0]
    ],
    ("seed001-example2b", "slip_scores"): _slip_scores,
    ("seed002", "slip_terms"): _slip_terms,
    ("seed002", "slip_sums"): lambda t: [sum(r) for r in _slip_terms(t)],
    ("journey-query", "naive_weights"): _naive,
    ("journey-query", "naive_weights_sum"): lambda t: sum(_naive(t)[0]),
    ("journey-query", "weights_sum"): lambda t: sum(t["weights"].tolist()[0]),
}

TRACES = {name: presets.get(name).trace() for name in NAMES}

PRINTED = [(name, key) for name in NAMES for key in presets.get(name).printed]


def test_names_lists_every_preset():
    assert presets.names() == NAMES
    assert presets.DEFAULT in NAMES
    for name in NAMES:
        assert presets.get(name).name == name


def test_get_unknown_and_wrong_type():
    with pytest.raises(KeyError, match=r"name: unknown preset 'nope'.*journey"):
        presets.get("nope")
    with pytest.raises(TypeError, match=r"name: expected a preset name \(str\), found int"):
        presets.get(3)


def test_preset_is_frozen_and_get_returns_a_fresh_copy():
    p = presets.get("journey")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
        p.scale = 2.0
    p.x[0][0] = 99.0
    assert presets.get("journey").x[0][0] == 0.43


@pytest.mark.parametrize(
    ("name", "scale"),
    [
        ("seed000-example2", 0.5),  # d_k = 4 passed although the width is 3
        ("seed001-example1", 1.0),
        ("seed001-example3", 1.0),
        ("seed001-example2b", 1.0),
        ("seed002", 1.0),  # root_dk = 1
        ("journey", 1.0),
        ("journey-query", 1.0),
        ("seed004", 1 / 3**0.5),
    ],
)
def test_scale_is_the_notebooks(name, scale):
    assert presets.get(name).scale == scale
    assert TRACES[name].scale == scale


def test_every_extra_key_has_a_recipe_and_every_recipe_is_used():
    extras = {(n, k) for n, k in PRINTED if k not in TRACES[n]}
    assert extras == set(EXTRAS)


@pytest.mark.parametrize(("name", "key"), PRINTED)
def test_printed_number_is_reproduced(name, key):
    printed = presets.get(name).printed[key]
    t = TRACES[name]
    actual = t[key].tolist() if key in t else EXTRAS[(name, key)](t)
    if printed.row is not None:
        actual = actual[printed.row]
    assert_reproduces(actual, printed, f"{name}: printed[{key!r}]")


@pytest.mark.parametrize("name", NAMES)
def test_preset_runs_through_trace_attention(name):
    p, t = presets.get(name), TRACES[name]
    assert isinstance(t, scratch.Trace)
    assert t.tokens == p.tokens
    assert t.key_tokens == (p.tokens if p.key_tokens is None else p.key_tokens)
    for step in ("x", "q", "k", "v", "scores", "scaled", "masked", "weights", "output"):
        assert step in t, f"{name}: no step {step!r}"
    L, S = len(p.tokens), len(t.key_tokens)
    assert t["weights"].shape == (L, S)
    for i, row in enumerate(t["weights"].tolist()):
        # fsum of S correctly rounded weights: |error| <= S * 2**-53 each, plus the division
        assert abs(math.fsum(row) - 1.0) <= (S + 2) * 2.0**-53, f"{name}: weights row {i} sum"
    assert p.trace()["output"].tolist() == t["output"].tolist()
    assert presets.trace(name)["weights"].tolist() == t["weights"].tolist()


def test_notes_name_the_slips():
    assert any("Slip" in n and "transpose" in n for n in presets.get("seed001-example2b").notes)
    assert any("Slip" in n for n in presets.get("seed002").notes)
    assert any("random" in n for n in presets.get("seed002").notes)
    for name in NAMES:
        for note in presets.get(name).notes:
            assert note and "\n" not in note


def test_seed001_slip_only_the_untransposed_product_reproduces_the_print():
    p, t = presets.get("seed001-example2b"), TRACES["seed001-example2b"]
    slip = p.printed["slip_scores"]
    assert not differs(_slip_scores(t), slip)
    assert differs(t["scores"].tolist(), slip)  # the correct q @ k^T does not
    assert_reproduces(t["scores"].tolist(), p.corrected["scores"], "corrected scores")
    # the same inputs in seed 002 print the correct scores
    assert_reproduces(t["scores"].tolist(), presets.get("seed002").printed["scores"], "seed002")


def test_seed002_slip_only_the_slip_formula_reproduces_the_print():
    p, t = presets.get("seed002"), TRACES["seed002"]
    output = t["output"].tolist()
    assert not differs(_slip_terms(t), p.printed["slip_terms"])
    assert differs(output, p.printed["slip_terms"])  # one output row per input: not the print
    assert not differs([sum(r) for r in _slip_terms(t)], p.printed["slip_sums"])
    assert differs(output[0], p.printed["slip_sums"])  # query x1's real output: not the print
    assert_reproduces(output, p.corrected["output"], "seed002 corrected output")


def test_seed001_example1_row_sums_are_not_the_context_vector():
    p, t = presets.get("seed001-example1"), TRACES["seed001-example1"]
    assert differs(t["output"].tolist()[0], p.printed["slip_row_sums"])
    assert t["scores"].tolist() == [[13.0, 9.0, 9.0]]


def test_seed004_weights_regenerate_with_numpy():
    np = pytest.importorskip("numpy")
    state = np.random.get_state()
    try:
        np.random.seed(42)  # the notebook's calls, in its order
        w_q = np.random.randint(3, size=(3, 3))
        w_k = np.random.randint(3, size=(3, 3))
        w_v = np.random.randint(3, size=(3, 3))
    finally:
        np.random.set_state(state)
    p = presets.get("seed004")
    assert presets.SEED004_W_Q == w_q.tolist() and p.w_q == w_q.astype(float).tolist()
    assert presets.SEED004_W_K == w_k.tolist() and p.w_k == w_k.astype(float).tolist()
    assert presets.SEED004_W_V == w_v.tolist() and p.w_v == w_v.astype(float).tolist()


def test_every_slip_is_said_with_the_numbers_the_notebook_printed():
    """A slip's note gives the notebook's own numbers (seed 002's sums, seed 001's row sums),
    in the terminal header and the window's notes alike; seed 001 example 1's product of
    weights and states is a slip too."""
    from scratch.__main__ import format_header

    p = presets.get("seed001-example1")
    said = p.slip_notes()
    assert said[-1] == (
        "Slip printed by the notebook (In[16]): output.sum(dim=-1) = [0.2337, 3.2598, 3.2541]"
    )
    assert any(n.startswith("Slip:") for n in p.notes)
    header = format_header(presets.get("seed002"))
    assert "(sums each term over the features) = [0.380274, 4.68311, 5.15142]" in header
    for name in presets.names():  # every slip entry is said once, with its cell
        q = presets.get(name)
        slips = [k for k in q.printed if k.startswith("slip")]
        assert len(q.slip_notes()) == len(slips)

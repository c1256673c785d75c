"""scratch.learn.mistakes: each planted mistake on an example, and the checker's diagnosis of it."""

import math
import re

import numpy as np
import pytest

from scratch import scaled_dot_product_attention
from scratch.learn.mistakes import MISTAKES, NAMES, diagnose, kernel, plant


def example(seed: int, L: int, S: int, E: int, Ev: int):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(L, E)), rng.normal(size=(S, E)), rng.normal(size=(S, Ev))


def softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along `axis`; an all -inf line gives zeros (masked_rows='zero')."""
    with np.errstate(all="ignore"):
        e = np.exp(s - np.max(s, axis=axis, keepdims=True))
        return np.nan_to_num(e / e.sum(axis=axis, keepdims=True), nan=0.0)


def wrong_weights(name: str, q, k, scale, allowed) -> np.ndarray:
    """Each mistake written out in NumPy here, independently of scratch.checker.variants."""
    L, S = q.shape[0], k.shape[0]
    causal = np.tril(np.ones((L, S), dtype=bool))
    s = q @ k.T * scale  # (L, E) @ (E, S) -> (L, S)
    keep = causal if allowed is None else allowed
    return {
        "no scale": softmax(np.where(keep, q @ k.T, -np.inf))
        if allowed is not None
        else softmax(q @ k.T),
        "softmax over the wrong axis": softmax(
            s if allowed is None else np.where(keep, s, -np.inf), axis=0
        ),
        "causal off by one": softmax(
            np.where(np.tril(np.ones((L, S), dtype=bool), -1), s, -np.inf)
        ),
        "mask applied after softmax": np.where(keep, softmax(s), 0.0),
        "k used as v": softmax(s if allowed is None else np.where(keep, s, -np.inf)),
    }.get(name)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("masked", [False, True])
def test_plant_shows_the_right_and_the_wrong_attention(seed, masked):
    L, S, E = 5, 6, 4
    q, k, v = example(seed, L, S, E, E)
    scale = 1 / math.sqrt(E)
    allowed = np.tril(np.ones((L, S), dtype=bool)) if masked else None
    for name in NAMES:
        pl = plant(name, q, k, v, scale, allowed)
        needs_causal = name in ("causal off by one", "mask applied after softmax")
        grid = np.tril(np.ones((L, S), dtype=bool)) if (masked or needs_causal) else None
        grown = q * 100 if name == "no max subtraction" else q
        out, w = scaled_dot_product_attention(
            grown.tolist(),
            k.tolist(),
            v.tolist(),
            attn_mask=None if grid is None else grid.tolist(),
            scale=scale,
        )
        np.testing.assert_allclose(pl.right_weights, w, rtol=1e-12, atol=1e-300, err_msg=name)
        np.testing.assert_allclose(pl.right_output, out, rtol=1e-12, atol=1e-14, err_msg=name)
        want = wrong_weights(name, q, k, scale, grid)
        if want is not None:
            np.testing.assert_allclose(pl.wrong_weights, want, rtol=1e-12, atol=1e-15, err_msg=name)
        if name == "no transpose":
            assert pl.wrong_output is None and "E == S" in pl.error
        elif name == "k used as v":
            np.testing.assert_allclose(pl.wrong_output, want @ k, rtol=1e-12, atol=1e-14)
        elif name == "no max subtraction":  # float32 exp overflows at logits of 100
            assert np.isnan(pl.wrong_weights).any() and "float32" in pl.note
            assert math.isnan(pl.difference())
        else:
            np.testing.assert_allclose(pl.wrong_output, want @ v, rtol=1e-12, atol=1e-14)
            assert pl.difference() > 0.01, name
        assert ("causal" in pl.note) == (needs_causal and not masked), name


def test_square_example_runs_without_the_transpose():
    q, k, v = example(1, 4, 4, 4, 3)
    pl = plant("no transpose", q, k, v, 0.5)
    np.testing.assert_allclose(pl.wrong_weights, softmax(q @ k * 0.5), rtol=1e-12)
    assert pl.error == ""


def test_unknown_mistake_is_named():
    with pytest.raises(ValueError, match="name"):
        plant("no softmax", [[1.0]], [[1.0]], [[1.0]], 1.0)


# the checker's diagnosis of each planted kernel: its own words, from its variants
DIAGNOSES = {
    "no scale": "missing scale",
    "softmax over the wrong axis": "softmax over the wrong axis",
    "no transpose": "without the transpose",
    "causal off by one": "causal mask off by one",
    "mask applied after softmax": "mask applied after the softmax",
    "no max subtraction": "exp overflows on large logits",
    "k used as v": "k read where v belongs",
}


@pytest.mark.parametrize("name", NAMES)
def test_the_checker_names_each_planted_kernel(name):
    d = diagnose(name)
    assert d.verdict.startswith("FAIL") and d.failed
    assert DIAGNOSES[name] in d.diagnosis, d.diagnosis


def test_kernels_are_correct_where_their_mistake_cannot_show():
    """The causal mistake changes nothing without is_causal: its kernel passes such a case."""
    q, k, v = example(2, 5, 7, 8, 4)
    out, _ = scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist())
    got = kernel("causal off by one")(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
    )
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, out, rtol=1e-5, atol=1e-6)
    assert {m.name for m in MISTAKES} == set(DIAGNOSES)


@pytest.mark.parametrize("seed", range(6))
def test_the_galleries_row_sums_sentence_states_the_sums_it_is_given(seed):
    """One number when every row sums alike ('each sum to 1', never '1..1'); else the smallest
    and the largest sum, read back and compared with the array's own."""
    from gui.views.mistakes_view import row_sums_words

    rng = np.random.default_rng(seed)
    alike = np.ones(int(rng.integers(2, 9))) + rng.uniform(-1e-7, 1e-7)
    assert row_sums_words(alike) == "rows of the wrong weights each sum to 1"
    spread = rng.uniform(0.2, 3.0, size=int(rng.integers(2, 9)))
    said = row_sums_words(spread)
    lo, hi = (float(v) for v in re.fullmatch(r"rows of the wrong weights sum to (\S+) to (\S+)",
                                             said).groups())  # fmt: skip
    assert lo == pytest.approx(spread.min(), rel=1e-3) and hi == pytest.approx(
        spread.max(), rel=1e-3
    )
    with_nan = np.append(spread, np.nan)
    assert row_sums_words(with_nan) == said + "; nan in some rows"

"""masked_rows="nan" with dropout: a row the policy makes NaN stays NaN in every forward and
backward, also when dropout drops every one of its weights (NaN * 0 = NaN, as torch's dropout).

The problems have S = 2 keys and p = 0.5, so a fully masked row loses both its weights in about
one seed of four; each test checks that its seeds include such rows, so the case is exercised.
"""

import random

import numpy as np
import pytest

import scratch
from scratch import backends

P = 0.5
SEEDS = range(12)
H, L, S, E, EV = 2, 3, 2, 2, 3
EMPTY_ROW = 1  # the mask leaves query row 1 no key


def _problem(seed: int) -> tuple:
    """Seeded q, k, v, dO (lists) and a bool mask whose row EMPTY_ROW is all False."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((H, L, E)), rng.standard_normal((H, S, E))
    v, g = rng.standard_normal((H, S, EV)), rng.standard_normal((H, L, EV))
    mask = [[True, True], [False, False], [True, False]]  # (L, S)
    return q.tolist(), k.tolist(), v.tolist(), g.tolist(), mask


def _row_all_dropped(draws: list) -> list[bool]:
    """Per head: whether every weight of the empty row was dropped, from (H * L * S) draws
    taken row-major (the ground truth's order)."""
    return [all(draws[(h * L + EMPTY_ROW) * S + j] < P for j in range(S)) for h in range(H)]


def _truth_drops(seed: int) -> list[bool]:
    """Which heads' empty row random.Random(seed) drops whole."""
    rng = random.Random(seed)
    return _row_all_dropped([rng.random() for _ in range(H * L * S)])


def test_the_seeds_drop_whole_nan_rows():
    """The seeds below exercise the case: some empty rows lose every weight, some keep one."""
    drops = [d for seed in SEEDS for d in _truth_drops(seed)]
    assert any(drops) and not all(drops)


def _check_nan_rows(output, weights=None) -> None:
    """The empty row NaN in every head, every other row finite."""
    out = np.asarray(output, dtype=float)  # (H, L, Ev)
    assert np.isnan(out[:, EMPTY_ROW]).all(), f"empty row not NaN: {out[:, EMPTY_ROW]}"
    others = [i for i in range(L) if i != EMPTY_ROW]
    assert np.isfinite(out[:, others]).all()
    if weights is not None:
        w = np.asarray(weights, dtype=float)  # (H, L, S)
        assert np.isnan(w[:, EMPTY_ROW]).all(), f"empty row weights: {w[:, EMPTY_ROW]}"
        assert np.isfinite(w[:, others]).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_ground_truth_forward_keeps_nan_rows(seed):
    q, k, v, _, mask = _problem(seed)
    out, w = scratch.scaled_dot_product_attention(
        q, k, v, mask, P, masked_rows="nan", rng=random.Random(seed)
    )
    _check_nan_rows(out, w)


@pytest.mark.parametrize("need_weights", [True, False])  # explicit, chunked online softmax
@pytest.mark.parametrize("seed", SEEDS)
def test_numpy_forward_keeps_nan_rows(seed, need_weights):
    if "numpy" not in backends.available():
        pytest.skip("numpy unavailable")
    q, k, v, _, mask = _problem(seed)
    fn = backends.get("numpy").scaled_dot_product_attention
    result = fn(
        q, k, v, mask, P, masked_rows="nan", rng=random.Random(seed), need_weights=need_weights
    )
    _check_nan_rows(result.output, result.weights)


def _torch_drops(seed: int) -> list[bool]:
    """Which heads' empty row the torch backend's explicit dropout drops whole (its rule: one
    torch.rand over the (H, L, S) weights from a Generator seeded with `seed`)."""
    torch = pytest.importorskip("torch")
    draws = torch.rand((H, L, S), generator=torch.Generator().manual_seed(seed))
    return _row_all_dropped(draws.flatten().tolist())


@pytest.mark.parametrize("need_weights", [True, False])  # explicit, torch's fused SDPA
def test_torch_forward_keeps_nan_rows(need_weights):
    if "torch-cpu" not in backends.available():
        pytest.skip("torch unavailable")
    fn = backends.get("torch-cpu").scaled_dot_product_attention
    for seed in SEEDS:
        q, k, v, _, mask = _problem(seed)
        result = fn(q, k, v, mask, P, masked_rows="nan", rng=seed, need_weights=need_weights)
        _check_nan_rows(
            result.output.numpy(), None if result.weights is None else result.weights.numpy()
        )
    if need_weights:
        drops = [d for seed in SEEDS for d in _torch_drops(seed)]
        assert any(drops), "no seed drops a whole NaN row: the case is not exercised"


def _backward_kernels() -> dict:
    """name -> backward function taking the ground truth's arguments (rng a random.Random)."""
    kernels = {"scratch": scratch.scaled_dot_product_attention_backward}
    if "numpy" in backends.available():
        from scratch.backends import numpy_backward as nb

        for kernel in nb.KERNELS:
            kernels[f"numpy-{kernel}"] = lambda *a, kernel=kernel, **kw: (
                nb.scaled_dot_product_attention_backward(*a, kernel=kernel, **kw)
            )
    if "torch-cpu" in backends.available():
        from scratch.backends import torch_backward as tb

        for kernel in tb.KERNELS:
            kernels[f"torch-{kernel}"] = lambda *a, kernel=kernel, **kw: [
                x.numpy() for x in tb.scaled_dot_product_attention_backward(*a, kernel=kernel, **kw)
            ]
    return kernels


@pytest.mark.parametrize("name", sorted(_backward_kernels()))
def test_every_backward_keeps_nan_rows(name):
    """dQ of the empty row NaN (and, through the sums, all of dK and dV), other dQ rows finite,
    whatever the dropout drew."""
    fn = _backward_kernels()[name]
    for seed in SEEDS:
        q, k, v, g, mask = _problem(seed)
        dq, dk, dv = (
            np.asarray(x, dtype=float)
            for x in fn(q, k, v, g, mask, P, masked_rows="nan", rng=random.Random(seed))
        )
        assert np.isnan(dq[:, EMPTY_ROW]).all(), f"seed {seed}: dQ row {dq[:, EMPTY_ROW]}"
        assert np.isfinite(np.delete(dq, EMPTY_ROW, axis=1)).all(), f"seed {seed}"
        assert np.isnan(dk).all() and np.isnan(dv).all(), f"seed {seed}"

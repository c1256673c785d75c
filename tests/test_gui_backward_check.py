"""The Check tab's gradient check: a backend's dQ, dK, dV against the ground truth (no Qt)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import scratch
from gui.state import backward_check
from scratch import backends

SEEDS = range(25)
CHOICES = [("numpy", "float64"), ("numpy", "float32"), ("scratch", "float64")]
if "torch-cpu" in backends.available():
    CHOICES += [("torch-cpu", "float64"), ("torch-cpu", "float32"), ("torch-cpu", "bfloat16")]


def problem(seed: int) -> tuple[list, list, list, list, dict]:
    """Seeded heads' q, k, v, dO and options: heads, GQA, masks, scale, masked-row policy."""
    rng = random.Random(seed)
    Hkv = rng.choice((1, 2))
    H = Hkv * rng.choice((1, 2))
    L, S, E, Ev = rng.randint(1, 6), rng.randint(1, 6), rng.randint(1, 4), rng.randint(1, 4)

    def m(*shape):
        return np.array([rng.uniform(-2, 2) for _ in range(math.prod(shape))]).reshape(shape)

    scale = rng.choice((None, 0.3, -1.0))
    masked_rows = rng.choice(("zero", "uniform", "nan"))
    kind = rng.choice(("none", "causal", "bool"))
    mask = None
    if kind == "bool":  # some rows fully masked now and then
        mask = [[rng.random() < 0.6 for _ in range(S)] for _ in range(L)]
    options = scratch.Options(mask, kind == "causal", scale=scale, enable_gqa=H != Hkv,
                               masked_rows=masked_rows)  # fmt: skip
    return m(H, L, E).tolist(), m(Hkv, S, E).tolist(), m(Hkv, S, Ev).tolist(), m(H, L, Ev), options


@pytest.mark.parametrize("backend, dtype", CHOICES)
def test_a_correct_backend_passes_over_many_seeds(backend, dtype):
    for seed in SEEDS:
        q, k, v, dO, options = problem(seed)
        rounded = [backward_check._rounded(np.asarray(a, np.float64), dtype).tolist()
                   for a in (q, k, v, dO)]  # fmt: skip
        checks = backward_check.check_heads(*rounded, options, backend, dtype)
        assert [c.name for c in checks] == ["grad_query", "grad_key", "grad_value"]
        bad = [(c.name, c.ratio, c.message) for c in checks if not c.ok]
        assert not bad, f"seed {seed}: {bad}"


def wrong(mistake: str):
    """A backend backward with one planted mistake, built on numpy's correct one."""
    real = backward_check.backward_with_backend

    def backward(name, dtype, q, k, v, dO, options):
        dq, dk, dv = (np.array(a, np.float64) for a in real("numpy", dtype, q, k, v, dO, options))
        scale = options.scale if options.scale is not None else 1 / math.sqrt(len(q[0][0]))
        if mistake == "scale missing in dQ":
            dq = dq / scale
        elif mistake == "scale twice in dK":
            dk = dk * scale
        elif mistake == "dV off by 1e-3 at one entry":
            dv[0, 0, 0] += 1e-3 * max(1.0, abs(dv[0, 0, 0]))
        elif mistake == "dK and dV swapped":
            dk, dv = dv, dk
        return dq, dk, dv

    return backward


@pytest.mark.parametrize(
    "mistake, named",
    [
        ("scale missing in dQ", "grad_query"),
        ("scale twice in dK", "grad_key"),
        ("dV off by 1e-3 at one entry", "grad_value"),
        ("dK and dV swapped", "grad_key"),
    ],
)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_planted_wrong_gradient_is_named(monkeypatch, mistake, named, dtype):
    monkeypatch.setattr(backward_check, "backward_with_backend", wrong(mistake))
    rng = np.random.default_rng(7)
    q, k, v, dO = (rng.standard_normal((2, 5, 3)).tolist() for _ in range(4))
    options = scratch.Options(is_causal=True, scale=0.5)
    rounded = [backward_check._rounded(np.asarray(a), dtype).tolist() for a in (q, k, v, dO)]
    checks = {c.name: c for c in backward_check.check_heads(*rounded, options, "numpy", dtype)}
    assert not checks[named].ok, f"{mistake}: {named} passed (ratio {checks[named].ratio:.3g})"
    assert named in checks[named].message and "exceeds the bound" in checks[named].message

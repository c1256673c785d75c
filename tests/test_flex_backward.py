"""The ground truth's flex_attention_backward against torch.autograd.grad, float64.

torch's FlexAttention has no backward on CPU (torch 2.13), so the reference is an explicit torch
form of the same rule: scores, the case's torch score_mod and mask_mod on index grids, a softmax
with the learned sink in its denominator, weights @ v; torch.autograd.grad gives dQ, dK, dV and
d sinks. Tolerance: float64 sums of at most 12 terms of size < 30 on torch's side (the ground
truth is correctly rounded per sum): 12 * 2.2e-16 * 30 < 1e-13.
"""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

import scratch  # noqa: E402
from scratch.variants import Variant, dual  # noqa: E402
from tests.flex_cases import CASES, COMBINED, Case, random_problems  # noqa: E402
from tests.flex_torch import explicit_forward, randn  # noqa: E402

TOL = 1e-13


def explicit_grads(case: Case, q, k, v, d_out, sinks=None):
    """dQ, dK, dV (and d sinks) of the explicit torch form, by torch.autograd.grad."""
    output, leaves = explicit_forward(case, q, k, v, sinks)
    return torch.autograd.grad(output, leaves, torch.tensor(d_out, dtype=torch.float64))


def assert_grads(ours, theirs, what: str) -> None:
    for name, mine, ref in zip(("dQ", "dK", "dV", "d sinks"), ours, theirs):
        mine = torch.tensor(mine, dtype=torch.float64)
        assert mine.shape == ref.shape, f"{what} {name}: shape {mine.shape} != {ref.shape}"
        gap = (mine - ref).abs().max().item()
        assert gap <= TOL, f"{what} {name}: differs by {gap:.3g}"


def run(case, seed, B, H, Hkv, L, S, E, Ev, sinks=None):
    rng = random.Random(seed)
    q, k, v = randn(rng, B, H, L, E), randn(rng, B, Hkv, S, E), randn(rng, B, Hkv, S, Ev)
    d_out = randn(rng, B, H, L, Ev)
    variant = case.variant
    bm = None
    if variant.mask_mod is not None:
        bm = scratch.create_block_mask(variant.mask_mod, B, H, L, S, BLOCK_SIZE=2)
    ours = scratch.flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, enable_gqa=H != Hkv, sinks=sinks
    )
    assert len(ours) == (3 if sinks is None else 4)
    return ours, explicit_grads(case, q, k, v, d_out, sinks)


SINKS = [0.5, -1.0, 0.2, 2.0]
RUNS = [(name, None) for name in CASES] + [(name, SINKS) for name in COMBINED]


@pytest.mark.parametrize(("name", "sinks"), RUNS, ids=[f"{n}{'+sinks' * bool(s)}" for n, s in RUNS])
def test_every_variant_backward_matches_autograd(name, sinks):
    """GQA (4 query heads on 2 kv heads), L = 5 != S = 7, two batch entries."""
    B, H, Hkv, L, S = 2, 4, 2, 5, 7
    ours, theirs = run(CASES[name](B, H, L, S), 4, B, H, Hkv, L, S, 3, 2, sinks)
    assert_grads(ours, theirs, name)


class UserScore(Variant):
    """A user's own score_mod, differentiated by dual numbers: 2 tanh(s) + s^2 / 4 - 0.1 |j - i|."""

    def score_mod(self, score, b, h, q_idx, kv_idx):
        return 2 * dual.tanh(score) + score**2 / 4 - 0.1 * abs(kv_idx - q_idx)


def test_a_users_own_score_mod_backward_matches_autograd():
    def torch_form(s, b, h, i, j):
        return 2 * torch.tanh(s) + s**2 / 4 - 0.1 * (j - i).abs().double()

    case = Case(UserScore(), score_mod=torch_form)
    ours, theirs = run(case, 5, 1, 2, 1, 4, 5, 3, 2, [0.1, -0.3])
    assert_grads(ours, theirs, "user score_mod")


def test_rows_that_see_nothing_get_zero_gradients():
    """Causal bottom-right, L > S: the first rows see no key; their dQ is 0, as autograd says."""
    ours, theirs = run(CASES["causal bottom-right"](1, 1, 4, 2), 6, 1, 1, 1, 4, 2, 2, 2)
    assert ours[0][0][0][:2] == [[0.0, 0.0], [0.0, 0.0]]
    assert_grads(ours, theirs, "L > S")


@random_problems
def test_hypothesis_backward(name, z, with_sinks, seed):
    sinks = [0.4 * h - 0.3 for h in range(z.H)] if with_sinks else None
    case = CASES[name](z.B, z.H, z.L, z.S)
    ours, theirs = run(case, seed, z.B, z.H, z.Hkv, z.L, z.S, z.E, z.Ev, sinks)
    assert_grads(ours, theirs, f"{name} {z}")


def test_gradients_reach_the_unrotated_q_and_k_through_rope():
    """q, k -> rotary -> causal flex_attention: rotary_backward of dQ, dK == autograd's."""
    rng = random.Random(8)
    L, E = 5, 4
    q, k, v, d_out = (randn(rng, 1, 1, L, E) for _ in range(4))
    positions = [3, 4, 5, 6, 7]  # a continuation: positions need not start at 0
    q_rot, k_rot = scratch.rotary(q, positions), scratch.rotary(k, positions)
    block = scratch.create_block_mask(
        CASES["causal top-left"](1, 1, L, L).variant.mask_mod, 1, 1, L, L
    )
    d_q, d_k, _ = scratch.flex_attention_backward(q_rot, k_rot, v, d_out, block_mask=block)
    ours = [scratch.rotary_backward(g, positions) for g in (d_q, d_k)]

    theta = torch.tensor(
        [[p * 10000.0 ** (-2 * c / E) for c in range(E // 2)] for p in positions],
        dtype=torch.float64,
    )
    cos, sin = torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1)  # (L, E)

    def rope(x):  # the half pairing written out: x cos + rotate_half(x) sin
        return x * cos + torch.cat([-x[..., E // 2 :], x[..., : E // 2]], -1) * sin

    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    scores = rope(tq) @ rope(tk).transpose(-1, -2) / math.sqrt(E)
    scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    output = torch.softmax(scores, -1) @ tv
    theirs = torch.autograd.grad(output, (tq, tk), torch.tensor(d_out, dtype=torch.float64))
    assert_grads(ours, theirs, "rope + causal")

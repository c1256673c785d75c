"""The head kernel's one backward (scratch.core.attention.attend_backward) gives every public
backward
the bits that the copies it replaced gave: tests/old_ground_truth.py keeps those copies frozen
(backward_head and key_value_grads, SDPA's gradients_of, the multi-head head loop, the flex row
loop), and each test compares them bit for bit (NaN = NaN, the sign of zero counts) over many
seeds, shapes, masks, masked_rows policies, dropout, GQA, scales, block masks, score_mods
(softcap, ALiBi, one answering -inf) and sinks."""

from __future__ import annotations

import random

import old_ground_truth as old
import pytest
from test_one_head import flex_case, same, sdpa_case, shape, tensor

import scratch
from scratch.backward.multihead import run_backward
from scratch.core.multihead import run_multi_head
from scratch.core.options import Options
from scratch.ops.nested import rows

SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_sdpa_backward_equals_the_old_copy(seed):
    """scaled_dot_product_attention_backward: every mask kind and policy, dropout, GQA, scale,
    inf and NaN in v."""
    rng = random.Random(seed)
    for _ in range(6):
        q, k, v, kw = sdpa_case(rng)
        g = tensor(rng, shape(q)[:-1] + (shape(v)[-1],))
        p = rng.choice([0.0, 0.0, 0.3])
        new = scratch.scaled_dot_product_attention_backward(
            q, k, v, g, **kw, dropout_p=p, rng=random.Random(seed)
        )
        options = Options(**kw, dropout_p=p, rng=random.Random(seed))
        assert same(list(new), list(old.sdpa_backward(q, k, v, g, options))), (seed, kw, p)


@pytest.mark.parametrize("seed", range(4))
def test_sdpa_backward_of_fully_masked_rows_equals_the_old_copy(seed):
    """Rows with every key masked under each policy, with a negative scale (where a row that
    took part would give -0.0 instead of the silent row's 0.0)."""
    rng = random.Random(seed)
    L, S = 3, 4
    q, k, v = tensor(rng, (2, L, 2)), tensor(rng, (2, S, 2)), tensor(rng, (2, S, 3))
    g = tensor(rng, (2, L, 3))
    mask = [[i != seed % L and rng.random() < 0.7 for _ in range(S)] for i in range(L)]
    for masked_rows in ("zero", "nan", "uniform"):
        for scale in (-0.5, 2.0):
            kw = {"attn_mask": mask, "masked_rows": masked_rows, "scale": scale}
            new = scratch.scaled_dot_product_attention_backward(q, k, v, g, **kw)
            assert same(list(new), list(old.sdpa_backward(q, k, v, g, Options(**kw)))), kw


def multi_head_case(rng: random.Random) -> tuple:
    """x, key, params, heads and options of one multi-head call (GQA, cross attention, w_o)."""
    H = rng.choice([1, 2, 4])
    Hkv = rng.choice([h for h in (1, 2, 4) if H % h == 0 and h <= H])
    lead = tuple(rng.randint(1, 2) for _ in range(rng.randint(0, 1)))
    L, S, d = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 2)
    x = tensor(rng, lead + (L, 3))
    key = tensor(rng, lead + (S, 3)) if rng.random() < 0.5 else None
    params = {"w_q": tensor(rng, (3, H * d)), "w_k": tensor(rng, (3, Hkv * d)),
              "w_v": tensor(rng, (3, Hkv * 2))}  # fmt: skip
    if rng.random() < 0.5:
        params["w_o"] = tensor(rng, (H * 2, 3))
    kind = rng.choice(["none", "causal", "mask"])
    S_ = S if key is not None else L
    kw = {"masked_rows": rng.choice(["zero", "nan", "uniform"])}
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "mask":
        kw["attn_mask"] = [[rng.random() < 0.6 for _ in range(S_)] for _ in range(L)]
    if rng.random() < 0.3:
        kw["scale"] = rng.choice([0.0, -0.5, 2.0])
    return x, key, params, (H, Hkv), Options(**kw)


@pytest.mark.parametrize("seed", SEEDS)
def test_multi_head_backward_equals_the_old_head_loop(seed):
    """multi_head_attention's backward (and so the traced backward): each head's dP_d, D, dS and
    dQ, and dQ, dK, dV of every head stacked, as the old loop of backward_head gave them."""
    rng = random.Random(seed)
    for _ in range(4):
        x, key, params, heads, options = multi_head_case(rng)
        run = run_multi_head(x, key, None, params, heads, options)
        g = tensor(rng, run.lead + (run.plan.L, run.plan.d_out))
        back = run_backward(run, g)
        was, dq, dk, dv = old.multi_head_heads(run, g)
        lead = run.lead
        assert same(rows(back.grad_q, lead), dq), seed
        assert same(rows(back.grad_k, lead), dk), seed
        assert same(rows(back.grad_v, lead), dv), seed
        for name in ("grad_dropped", "row_dot", "grad_scores", "grad_query", "grad_output"):
            assert same([getattr(h, name) for h in back.heads], [getattr(h, name) for h in was])


def test_traced_backward_with_dropout_equals_the_old_head_loop():
    """The traced backward's dropout: the replayed rng draws the old copy's mask."""
    example = scratch.Example(
        tensor(random.Random(1), (3, 3)),
        params={k: tensor(random.Random(i), (3, 4)) for i, k in enumerate(("w_q", "w_k", "w_v"))},
        num_heads=2,
    )
    for seed in range(4):
        options = Options(is_causal=True, dropout_p=0.4, rng=random.Random(seed))
        run = run_multi_head(example.x, None, None, example.projections(), (2, 2), options)
        g = tensor(random.Random(seed), (3, 4))
        back = run_backward(run, g, random.Random(seed))
        _, dq, dk, dv = old.multi_head_heads(run, g, random.Random(seed))
        assert same([back.grad_q, back.grad_k, back.grad_v], [dq, dk, dv]), seed


@pytest.mark.parametrize("seed", SEEDS)
def test_flex_attention_backward_equals_the_old_rows(seed):
    """flex_attention_backward: block masks of every tile size, score_mods (one answering -inf),
    sinks and their gradient, GQA, zero and negative scales, a NaN in v."""
    rng = random.Random(seed)
    for _ in range(8):
        q, k, v, kw = flex_case(rng)
        g = tensor(rng, (len(q), len(q[0]), len(q[0][0]), len(v[0][0][0])))
        new = scratch.flex_attention_backward(q, k, v, g, **kw)
        assert same(list(new), list(old.flex_attention_backward(q, k, v, g, **kw))), (seed, kw)

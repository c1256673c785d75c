"""The one head kernel (scratch.core.attention.attend) gives every public entry the bits that the
three
copies it replaced gave: tests/old_ground_truth.py keeps those copies frozen, and each test runs
an entry twice in the same process, once as it is and once with the old copy put back in its
place, over many seeds, shapes, masks and variants. Equal means equal bit for bit (NaN = NaN)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import old_ground_truth as old
import pytest

import scratch
import scratch.backward.sdpa
import scratch.core.attention
import scratch.core.multihead
import scratch.core.rows
import scratch.decode.attention
from scratch.core.options import Options
from scratch.core.variant_steps import parts_of
from scratch.trace.forward import trace_example
from scratch.trace.variant_rows import rows_call, variant_rows
from scratch.variants import (
    ALiBi,
    Causal,
    ChunkedLocal,
    Documents,
    GivenMask,
    LearnedSinks,
    PrefixLM,
    Rotary,
    SlidingWindow,
    Softcap,
    combine,
)

SEEDS = range(12)


def same(a: object, b: object) -> bool:
    """a and b equal bit for bit: nested lists alike, floats with the same sign, NaN = NaN."""
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def test_same_tells_bits_apart():
    """The comparison itself: one ulp, a sign of zero, a NaN and a length all differ."""
    assert same([[1.0, math.nan]], [[1.0, math.nan]])
    assert not same([1.0], [math.nextafter(1.0, 2.0)])
    assert not same([0.0], [-0.0])
    assert not same([math.nan], [1.0])
    assert not same([[1.0]], [[1.0, 1.0]])


def shape(x: object) -> tuple[int, ...]:
    """The shape of nested lists."""
    return (len(x),) + shape(x[0]) if isinstance(x, list) else ()


def tensor(rng: random.Random, shape: tuple[int, ...]) -> list:
    """Nested lists of uniform(-2, 2) of `shape`."""
    if len(shape) == 1:
        return [rng.uniform(-2.0, 2.0) for _ in range(shape[0])]
    return [tensor(rng, shape[1:]) for _ in range(shape[0])]


def a_mask(rng: random.Random, shape: tuple[int, ...]) -> list:
    """A random bool or float mask of `shape` (float: some -inf); whole rows may be masked."""
    is_bool = rng.random() < 0.5
    blank = rng.random() < 0.3  # then fully masked rows are likely

    def cell() -> object:
        hidden = rng.random() < (0.8 if blank else 0.3)
        if is_bool:
            return not hidden
        return -math.inf if hidden else rng.uniform(-1.0, 1.0)

    def build(s: tuple[int, ...]) -> list:
        return [cell() for _ in range(s[0])] if len(s) == 1 else [build(s[1:]) for _ in range(s[0])]

    return build(shape)


def sdpa_case(rng: random.Random) -> tuple[list, list, list, dict]:
    """q, k, v and the keywords of one random scaled_dot_product_attention call."""
    lead = tuple(rng.randint(1, 2) for _ in range(rng.randint(0, 2)))
    gqa = len(lead) >= 1 and rng.random() < 0.4
    L, S, E, Ev = (rng.randint(1, 4) for _ in range(4))
    kv_lead = lead[:-1] + (1,) if gqa else lead
    q, k, v = (
        tensor(rng, lead + (L, E)),
        tensor(rng, kv_lead + (S, E)),
        tensor(rng, kv_lead + (S, Ev)),
    )
    if rng.random() < 0.3:  # inf or NaN in v: a fully masked row under "zero" must stay 0
        row = v
        while isinstance(row[0], list):
            row = row[rng.randrange(len(row))]
        row[rng.randrange(len(row))] = rng.choice([math.inf, -math.inf, math.nan])
    kw: dict = {"masked_rows": rng.choice(["zero", "nan", "uniform"]), "enable_gqa": gqa}
    kind = rng.choice(["none", "causal", "mask", "broadcast"])
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "mask":
        kw["attn_mask"] = a_mask(rng, (L, S))
    elif kind == "broadcast" and lead:
        kw["attn_mask"] = a_mask(rng, (lead[0],) + (1,) * (len(lead) - 1) + (L, S))
    if rng.random() < 0.3:
        kw["scale"] = rng.choice([0.0, -0.5, 2.0])
    return q, k, v, kw


def old_rows_attend(q, k, v, scale, mask_rows=None, masked_rows="zero", *, added=False):
    """The old attend under the kernel's keywords (the mask's kind is all it read of `mask`)."""
    mask = None if mask_rows is None else SimpleNamespace(is_bool=not added)
    return old.attend(q, k, v, scale, mask, mask_rows, masked_rows)


def sdpa_entries(q, k, v, kw: dict, p: float, picked: list[int], seed: int) -> list:
    """What SDPA gives: (output, weights), (output, lse), with dropout, and the rows alone."""
    sdpa = scratch.scaled_dot_product_attention
    return [
        sdpa(q, k, v, **kw),
        sdpa(q, k, v, **kw, return_lse=True),
        sdpa(q, k, v, **kw, dropout_p=p, rng=random.Random(seed)),
        scratch.attention_rows(q, k, v, picked, **kw),
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_sdpa_and_its_rows_equal_the_old_attend(seed, monkeypatch):
    """scaled_dot_product_attention (output, weights; lse; dropout drawn from a seeded rng) and
    attention_rows: every mask kind, masked_rows policy, scale and GQA."""
    rng = random.Random(seed)
    for _ in range(6):
        q, k, v, kw = sdpa_case(rng)
        p = rng.choice([0.0, 0.0, 0.3])
        L = shape(q)[-2]
        picked = sorted({rng.randrange(L) for _ in range(2)})
        new = sdpa_entries(q, k, v, kw, p, picked, seed)
        with monkeypatch.context() as m:
            m.setattr(scratch.core.attention, "attend_all", old.attend_all)
            m.setattr(scratch.core.rows, "attend", old_rows_attend)
            before = sdpa_entries(q, k, v, kw, p, picked, seed)
        assert same(new, before), (seed, kw)


@pytest.mark.parametrize("seed", SEEDS)
def test_sdpa_backward_equals_the_old_attend(seed, monkeypatch):
    """scaled_dot_product_attention_backward reads the forward's weights from the kernel."""
    rng = random.Random(seed)
    for _ in range(4):
        q, k, v, kw = sdpa_case(rng)
        out, _ = scratch.scaled_dot_product_attention(q, k, v, **kw)
        g = tensor(rng, shape(out))
        p = rng.choice([0.0, 0.25])

        def call(q=q, k=k, v=v, g=g, kw=kw, p=p):
            return scratch.scaled_dot_product_attention_backward(
                q, k, v, g, **kw, dropout_p=p, rng=random.Random(seed)
            )

        new = call()
        with monkeypatch.context() as m:
            m.setattr(scratch.backward.sdpa, "attend", old_rows_attend)
            before = call()
        assert same(list(new), list(before)), (seed, kw)


def variants(L: int, S: int, H: int, rng: random.Random) -> list:
    """Variants of every kind (masks, score changes, RoPE, sinks, combined, a given mask)."""
    shift = S - L
    window, cap, alibi = SlidingWindow(2, 0, shift), Softcap(2.0), ALiBi.for_heads(H)
    sinks = LearnedSinks([rng.uniform(-1.0, 1.0) for _ in range(H)])
    docs = Documents([[i % 2 for i in range(L)]], [[j // 2 % 2 for j in range(S)]])
    return [
        window,
        cap,
        combine(window, cap, sinks),
        combine(ChunkedLocal(2, shift), alibi),
        combine(PrefixLM(2, shift), Rotary(base=100.0)),
        combine(docs, Causal(shift), cap, alibi),
        combine(Rotary(base=100.0), sinks),
        combine(GivenMask(a_mask(rng, (L, S))), sinks),
        GivenMask(a_mask(rng, (H, L, S))),
    ]


def split(m: list, n: int) -> list:
    """(rows, n * d) -> (n, rows, d): head h is the column block h*d:(h+1)*d."""
    d = len(m[0]) // n
    return [[row[h * d : (h + 1) * d] for row in m] for h in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_traced_pipeline_equals_the_old_copies(seed, monkeypatch):
    """trace_example (multi-head with projections, GQA, decode-shaped L < S) under every variant,
    is_causal and a given mask: every step of the trace, as the old attend and attend_head made
    them; and the variant's sampled rows (variant_rows) as the old attend_head's rows."""
    rng = random.Random(seed)
    for L, S, H, Hkv in [(4, 4, 2, 2), (4, 4, 2, 1), (2, 5, 2, 2), (3, 3, 1, 1)]:
        d = 2
        x = tensor(rng, (L, 3))
        params = {"w_q": tensor(rng, (3, H * d)), "w_k": tensor(rng, (3, Hkv * d)),
                  "w_v": tensor(rng, (3, Hkv * 2))}  # fmt: skip
        key = None if L == S else tensor(rng, (S, 3))
        example = scratch.Example(x, key, None, params, num_heads=H, num_kv_heads=Hkv)
        options = [Options(variant=v) for v in variants(L, S, H, rng)]
        options += [
            Options(is_causal=True, variant=Softcap(1.5)),
            Options(is_causal=True),
            Options(attn_mask=a_mask(rng, (L, S)), masked_rows="nan"),
            Options(),
        ]
        for o in options:
            new = trace_example(example, o)
            with monkeypatch.context() as m:
                m.setattr(scratch.core.multihead, "attend_all", old.attend_all)
                m.setattr(scratch.core.multihead, "attend_variant_all", old.attend_variant_all)
                before = trace_example(example, o)
            assert new.names() == before.names()
            for step, was in zip(new.steps, before.steps):
                assert same(step.tolist(), was.tolist()), (seed, step.name, o.describe())
            assert same(new.scale, before.scale)
            if o.variant is None:
                continue
            picked = sorted({rng.randrange(L) for _ in range(2)})
            q = [[m[i] for i in picked] for m in split(new["q"].tolist(), H)]
            k, v = split(new["k"].tolist(), Hkv), split(new["v"].tolist(), Hkv)
            call = rows_call(o, picked, L, S, new.scale)
            found = variant_rows(q, k, v, call)
            want = [
                old.attend_head(q[h], k[h // (H // Hkv)], v[h // (H // Hkv)], h, new.scale,
                                call.pieces, o.masked_rows, (picked, L))
                for h in range(H)
            ]  # fmt: skip
            for name in ("scores", "scaled", "masked", "weights", "output"):
                assert same(found[name], [getattr(w, name) for w in want]), (seed, name)


def flex_case(rng: random.Random) -> tuple[list, list, list, dict]:
    """q, k, v (B, H or Hkv, seq, dim) and flex_attention's keywords: mods, block mask, sinks."""
    B, H = rng.randint(1, 2), rng.choice([1, 2, 4])
    Hkv = rng.choice([h for h in (1, 2, 4) if H % h == 0 and h <= H])
    L, S, E, Ev = rng.randint(1, 5), rng.randint(1, 6), rng.randint(1, 3), rng.randint(1, 3)
    q, k, v = tensor(rng, (B, H, L, E)), tensor(rng, (B, Hkv, S, E)), tensor(rng, (B, Hkv, S, Ev))
    if rng.random() < 0.4:  # a NaN in v: only the rows that see its key may read it
        v[rng.randrange(B)][rng.randrange(Hkv)][rng.randrange(S)][rng.randrange(Ev)] = math.nan
    kw: dict = {"enable_gqa": H != Hkv}
    mods = variants(L, S, H, rng)
    plain = [m for m in mods if not any(isinstance(p, Rotary) for p in parts_of(m))]
    part = rng.choice(plain)  # flex_attention takes no RoPE; sinks come as `sinks`
    if rng.random() < 0.7 and part.mask_mod is not None:
        kw["block_mask"] = scratch.create_block_mask(
            part.mask_mod, B if rng.random() < 0.5 else None, H, L, S, rng.choice([1, 2, 128])
        )
    if rng.random() < 0.6 and part.score_mod is not None:
        kw["score_mod"] = part.score_mod
    if rng.random() < 0.2:  # a score_mod that masks by answering -inf
        kw["score_mod"] = lambda s, b, h, i, j: -math.inf if (i + j + h) % 3 == 0 else s * 0.5
    if rng.random() < 0.4:
        kw["sinks"] = [rng.uniform(-1.0, 1.0) for _ in range(H)]
    if rng.random() < 0.3:
        kw["scale"] = rng.choice([0.0, -0.5, 2.0])
    return q, k, v, kw


@pytest.mark.parametrize("seed", SEEDS)
def test_flex_attention_equals_the_old_rows(seed):
    """flex_attention (output and lse): block masks of every tile size, score_mods (one
    answering -inf), sinks, GQA, zero and negative scales (its backward: test_one_backward)."""
    rng = random.Random(seed)
    for _ in range(8):
        q, k, v, kw = flex_case(rng)
        new = scratch.flex_attention(q, k, v, **kw, return_lse=True)
        before = old.flex_attention(q, k, v, **kw, return_lse=True)
        assert same(list(new), list(before)), (seed, kw)


@pytest.mark.parametrize("seed", SEEDS)
def test_decode_equals_the_old_flex_attention(seed, monkeypatch):
    """decode_attention (queries at the last L of S positions, mods at true positions)."""
    rng = random.Random(seed)
    for _ in range(6):
        q, k, v, kw = flex_case(rng)
        L, S = len(q[0][0]), len(k[0][0])
        if L > S:
            q = [[m[:S] for m in heads] for heads in q]
        H, S = len(q[0]), len(k[0][0])
        mods = variants(S, S, H, rng)
        mask = rng.choice([None] + [m.mask_mod for m in mods if m.mask_mod is not None])
        score = rng.choice([None] + [m.score_mod for m in mods if m.score_mod is not None])
        args = {"enable_gqa": kw["enable_gqa"], "sinks": kw.get("sinks"), "return_lse": True}

        def call(q=q, k=k, v=v, mask=mask, score=score, args=args):
            return scratch.decode_attention(q, k, v, score, mask, **args)

        new = call()
        with monkeypatch.context() as m:
            m.setattr(scratch.decode.attention, "flex_attention", old.flex_attention)
            before = call()
        assert same(list(new), list(before)), seed


def test_flex_attention_follows_ieee_like_sdpa():
    """inf - inf inside a dot product is NaN in flex_attention too (the kernel's `dot`, as in
    SDPA; the old flex row's bare fsum raised ValueError): that row is NaN, as SDPA's is, and
    the other row is what the old flex row gives it (rows are independent)."""
    q = [[[[math.inf, math.inf], [0.5, -1.0]]]]  # (1, 1, 2, 2)
    k = [[[[1.0, -1.0], [0.25, 2.0]]]]  # key 0 meets inf - inf in row 0
    v = [[[[1.0, 2.0], [3.0, -4.0]]]]
    block = scratch.create_block_mask(lambda b, h, i, j: j <= i + 1, 1, 1, 2, 2)
    out, lse = scratch.flex_attention(q, k, v, block_mask=block, return_lse=True)
    sdpa, _ = scratch.scaled_dot_product_attention(q, k, v)
    assert all(math.isnan(x) for x in out[0][0][0] + sdpa[0][0][0]) and math.isnan(lse[0][0][0])
    finite = [[[[1.0, 1.0], q[0][0][1]]]]
    want = old.flex_attention(finite, k, v, block_mask=block)
    assert same(out[0][0][1], want[0][0][1]) and not any(map(math.isnan, want[0][0][1]))
    with pytest.raises(ValueError, match="inf"):  # what the frozen old row did
        old.flex_attention(q, k, v, block_mask=block)

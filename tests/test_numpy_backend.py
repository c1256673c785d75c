"""The NumPy backend against the plain-Python ground truth, on small seeded random cases.

Every comparison uses an error bound derived from the dtype and the problem size:
`scratch.tolerance` for outputs (Higham-style: g(E+4) score error, exp off by a few ulps,
g(S+1) for the sums), the same factor times each weight for weights, plus for the chunked
kernel the online-softmax rescaling: every key block multiplies the running sums by one more
exp(m_old - m_new), which adds at most 2 * EXP_ULPS + 2 roundings to numerator and denominator.
"""

from __future__ import annotations

import dataclasses
import random
import tracemalloc

import pytest

np = pytest.importorskip("numpy")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import scratch  # noqa: E402
from scratch.backends import numpy_backend as nb  # noqa: E402
from scratch.backends import numpy_chunked as nc  # noqa: E402
from scratch.backends import numpy_threads as nt  # noqa: E402
from scratch.bounds.tolerance import EXP_ULPS, UNIT_ROUNDOFF, Rounding  # noqa: E402
from tests.error_bounds import output_bound  # noqa: E402

POLICIES = ("zero", "nan", "uniform")


# ---------------------------------------------------------------- bounds


def _live_size(q, k, p, scale, mask):
    """S_i = max over live keys of |scale| |q_i| . |k_j| (+ |float mask|), shape (..., L, 1)."""
    size = abs(scale) * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))  # (..., L, S)
    if mask is not None and mask.dtype != np.bool_:
        size = size + np.where(np.isfinite(mask), np.abs(mask), 0.0)
    return np.max(np.where(p > 0, size, 0.0), axis=-1, keepdims=True)


def weights_bound(q, k, p, scale, dtype, mask=None):
    """|weights - truth| <= R_i p_ij + floor, with R_i the tolerance module's row factor."""
    E, S = q.shape[-1], k.shape[-2]
    size = _live_size(q, k, np.nan_to_num(p), scale, mask)
    parts = (Rounding(dtype, E, S), Rounding("float64", E, S))
    factor = sum(np.vectorize(r.factor)(r.score_gamma * size) for r in parts)
    floor = sum(r.weight_floor for r in parts)
    return factor * np.nan_to_num(p) + floor


def assert_close(name, found, truth, bound):
    """Shape, then NaN/inf positions, then |found - truth| <= bound, naming the worst entry."""
    found, truth = np.asarray(found, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    assert found.shape == truth.shape, f"{name}: shape {found.shape} != truth {truth.shape}"
    nan_found, nan_truth = np.isnan(found), np.isnan(truth)
    assert np.array_equal(nan_found, nan_truth), f"{name}: NaN at different places"
    inf_found, inf_truth = np.isinf(found), np.isinf(truth)
    assert np.array_equal(inf_found, inf_truth), f"{name}: inf at different places"
    same = nan_truth | (found == truth)  # NaN/inf sit at the same places (checked above)
    diff = np.abs(np.where(same, 0.0, found) - np.where(same, 0.0, truth))
    bound = np.broadcast_to(bound, diff.shape)
    worst = np.unravel_index(np.argmax(diff - bound), diff.shape)
    assert np.all(diff <= bound), (
        f"{name}: |diff| {diff[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
    )


# ---------------------------------------------------------------- cases


fast_pass = nc.fast_pass  # the kernel's own switch: with or without the no-max pass


def make_case(seed, lead=(2,), L=5, S=7, E=4, Ev=3, mask=None, logit=1.0):
    """Seeded q, k, v (and a mask with one fully masked row per (L, S) block)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*lead, L, E)) * logit
    k = rng.standard_normal((*lead, S, E))
    v = rng.standard_normal((*lead, S, Ev))
    attn_mask = None
    if mask is not None:
        allowed = rng.random((*lead, L, S)) > 0.4
        allowed[..., 1, :] = False  # a fully masked row
        allowed[..., 2, :] = True
        if mask == "bool":
            attn_mask = allowed
        else:
            attn_mask = np.where(allowed, rng.standard_normal(allowed.shape), -np.inf)
    return q, k, v, attn_mask


def truth(q, k, v, **kw):
    """The ground truth's (output, weights) as float64 arrays."""
    kw = {a: (b.tolist() if isinstance(b, np.ndarray) else b) for a, b in kw.items()}
    out, w = scratch.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist(), **kw)
    return np.array(out), np.array(w)


OPTIONS = [
    {},
    {"is_causal": True},
    {"mask": "bool"},
    {"mask": "float"},
    {"scale": -0.7},
    {"scale": 0.0},
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("L,S", [(5, 7), (6, 3)])
def test_both_kernels_match_ground_truth(policy, opts, L, S):
    """Explicit and chunked (tiny blocks: several chunks and blocks) vs the ground truth."""
    opts = dict(opts)
    q, k, v, mask = make_case(L * 10 + S, L=L, S=S, mask=opts.pop("mask", None))
    kw = dict(opts, attn_mask=mask, masked_rows=policy)
    out_t, w_t = truth(q, k, v, **kw)
    scale = opts.get("scale", 1 / np.sqrt(q.shape[-1]))
    explicit = nb.scaled_dot_product_attention(q, k, v, **kw)
    assert explicit.kernel == "explicit"
    assert_close("weights", explicit.weights, w_t, weights_bound(q, k, w_t, scale, "float64", mask))
    assert_close(
        "output", explicit.output, out_t, output_bound(q, k, v, w_t, scale, "float64", mask)
    )
    for block, fast in [
        ((2, 3), True),
        ((2, 3), False),
        ((3, 2), False),
        ((1, 1), True),
        (None, True),
        (None, False),
    ]:
        with fast_pass(fast):
            chunked = nb.scaled_dot_product_attention(
                q, k, v, need_weights=False, block_size=block, **kw
            )
        assert chunked.kernel == "chunked-online-softmax" and chunked.weights is None
        blocks = S if block is None else -(-S // block[1])
        assert_close(
            f"chunked output {block} fast={fast}",
            chunked.output,
            out_t,
            output_bound(q, k, v, w_t, scale, "float64", mask, blocks),
        )
    if policy == "zero" and mask is not None:  # the fully masked row is exactly zero
        assert np.all(explicit.output[:, 1] == 0) and np.all(chunked.output[:, 1] == 0)


@pytest.mark.parametrize("policy", POLICIES)
def test_large_logits_need_the_max_subtraction(policy):
    """Scores of about 1e4 overflow exp unless the row max is subtracted (both kernels)."""
    q, k, v, mask = make_case(3, L=4, S=6, mask="bool", logit=1e4)
    out_t, w_t = truth(q, k, v, attn_mask=mask, masked_rows=policy)
    assert np.nanmax(np.abs(q @ np.swapaxes(k, -1, -2))) > 1e4
    scale = 0.5
    for need_weights in (True, False):
        res = nb.scaled_dot_product_attention(
            q, k, v, mask, masked_rows=policy, need_weights=need_weights, block_size=(2, 2)
        )
        assert_close(
            f"output need_weights={need_weights}",
            res.output,
            out_t,
            output_bound(q, k, v, w_t, scale, "float64", mask, 3),
        )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_very_negative_scores_are_not_mistaken_for_masked_rows(dtype):
    """Scores near -1e3 underflow exp to 0 in both dtypes; the row still has a softmax."""
    rng = np.random.default_rng(12)
    k = np.abs(rng.standard_normal((6, 4))) + 1
    q = np.full((3, 4), -500.0)  # every score about -1e3 or below
    q[1] = rng.standard_normal(4)  # one ordinary row next to them
    v = rng.standard_normal((6, 2))
    q, k, v = (a.astype(dtype) for a in (q, k, v))
    out_t, w_t = truth(q.astype(np.float64), k, v, scale=1.0)
    res = nb.scaled_dot_product_attention(q, k, v, scale=1.0, need_weights=False)
    assert_close("output", res.output, out_t, output_bound(q, k, v, w_t, 1.0, dtype, None, 1))
    assert np.abs(out_t[0]).max() > 0.1  # the truth is not the zero of a masked row


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_grouped_query_attention(monkeypatch, need_weights, threads):
    """Query head h reads key/value head h // (Hq // Hkv), on one thread or spread over cores."""
    if threads:
        monkeypatch.setattr(nc, "PARALLEL_MIN", 0)
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 6, 5, 4))
    k = rng.standard_normal((2, 2, 7, 4))
    v = rng.standard_normal((2, 2, 7, 3))
    mask = rng.random((6, 5, 7)) > 0.3  # one mask per query head, broadcast over the batch
    out_t, w_t = truth(q, k, v, attn_mask=mask, enable_gqa=True)
    res = nb.scaled_dot_product_attention(
        q, k, v, mask, enable_gqa=True, need_weights=need_weights, block_size=(2, 3)
    )
    k_r, v_r = np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1)
    assert_close(
        "gqa output", res.output, out_t, output_bound(q, k_r, v_r, w_t, 0.5, "float64", None, 3)
    )


def test_float32_inputs_and_dtype_argument():
    """float32 arrays and tensors give float32; dtype= overrides; lists give float64."""
    q, k, v, mask = make_case(5, L=6, S=9, mask="float")
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    # the truth on the float32-rounded values, so only the kernel's own rounding is left
    out_t, w_t = truth(q32.astype(np.float64), k32, v32, attn_mask=mask.astype(np.float32))
    m32 = mask.astype(np.float32)
    for need_weights, block in [(True, None), (False, (4, 4)), (False, None)]:
        res = nb.scaled_dot_product_attention(
            q32, k32, v32, m32, need_weights=need_weights, block_size=block
        )
        assert res.output.dtype == np.float32
        blocks = 3 if block else 1
        assert_close(
            f"float32 output {block}",
            res.output,
            out_t,
            output_bound(q32, k32, v32, w_t, 0.5, "float32", m32, blocks),
        )
    assert (
        nb.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist())[0].dtype == np.float64
    )
    assert nb.scaled_dot_product_attention(q, k, v, dtype="float32")[1].dtype == np.float32


def test_float32_tensors_give_float32():
    """torch float32 tensors are read without torch imported here, and stay float32."""
    torch = pytest.importorskip("torch")
    q, k, v, _ = make_case(5, L=6, S=9, mask="float")
    tensors = [torch.from_numpy(a.astype(np.float32)) for a in (q, k, v)]
    found = nb.scaled_dot_product_attention(*tensors)
    assert found.output.dtype == np.float32 and found.weights.dtype == np.float32
    assert np.array_equal(  # bit for bit: the tensors' own memory, read as arrays: the same call
        found.output, nb.scaled_dot_product_attention(*(t.numpy() for t in tensors)).output
    )


def test_registry_exposes_the_module():
    """scratch.backends.get("numpy") runs this module's kernels."""
    backend = scratch.backends.get("numpy")
    q, k, v, _ = make_case(1)
    assert backend.dtypes == ("float64", "float32")
    assert backend.scaled_dot_product_attention(q, k, v, need_weights=False).kernel == (
        "chunked-online-softmax"
    )


def test_fast_pass_used_on_typical_scores_and_not_on_huge_logits(monkeypatch):
    """Typical scores never need the safe pass; logits of 1e4 overflow exp and fall back to it."""
    calls = []
    safe = nc._Tiles.safe

    def spy(self, *args):
        calls.append(args[:2])
        return safe(self, *args)

    monkeypatch.setattr(nc._Tiles, "safe", spy)
    q, k, v, mask = make_case(6, L=8, S=40, mask="bool")
    kw = dict(need_weights=False, block_size=(4, 16))
    nb.scaled_dot_product_attention(q, k, v, mask, **kw)
    assert calls == []  # row 1 is fully masked: its zero denominator is expected
    calls.clear()
    nb.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    # causal rows with few keys may have a denominator sum_j exp(s_ij) below 1: only the
    # smallest row range holding them (within its chunk of 4) is redone by the safe pass
    scores = np.tril(np.exp(q @ np.swapaxes(k, 1, 2) / 2))  # (2, 8, 40), 0 above the diagonal
    expected = []
    for small in scores.sum(axis=-1) < 1:  # (8,) per batch entry
        for c0 in (0, 4):
            bad = np.flatnonzero(small[c0 : c0 + 4])
            if bad.size:
                expected.append((c0 + bad[0], c0 + bad[-1] + 1))
    assert calls == expected and expected  # this seed has such rows
    calls.clear()
    nb.scaled_dot_product_attention(q * 1e4, k, v, mask, **kw)
    assert calls == [(0, 4), (4, 8)] * 2  # overflow: each query chunk of each batch entry


def test_shared_tasks_run_once_each_and_a_failure_is_raised():
    """The calling thread and the pool's threads take every task exactly once; an exception
    in any of them reaches the caller."""
    seen: list[int] = []
    nt.share(list(range(40)), 2, seen.append)  # list.append is atomic under the GIL
    assert sorted(seen) == list(range(40))

    def fail_on_7(task: int) -> None:
        if task == 7:
            raise ValueError("task 7 failed")

    with pytest.raises(ValueError, match="task 7 failed"):
        nt.share(list(range(40)), 2, fail_on_7)


@pytest.mark.parametrize("lead,blocks", [((2, 3), (2, 4)), ((1,), None)])
@pytest.mark.parametrize("masking", ["none", "bool", "float", "causal"])
def test_worker_threads_match_ground_truth(monkeypatch, masking, lead, blocks):
    """Query chunks on worker threads (BLAS on one thread meanwhile, restored after); one
    problem with the default sizes is cut into one chunk per core."""
    monkeypatch.setattr(nc, "PARALLEL_MIN", 0)
    q, k, v, mask = make_case(
        14, lead=lead, L=9, S=11, mask="float" if masking == "float" else "bool"
    )
    kw = dict(
        attn_mask=mask if masking in ("bool", "float") else None, is_causal=masking == "causal"
    )
    out_t, w_t = truth(q, k, v, **kw)
    control = nt.openblas_threads()
    before = None if control is None else control[0]()
    res = nb.scaled_dot_product_attention(q, k, v, need_weights=False, block_size=blocks, **kw)
    assert_close(
        "threaded output",
        res.output,
        out_t,
        output_bound(q, k, v, w_t, 0.5, "float64", kw["attn_mask"], 3),
    )
    if nt.cores() > 1 and control is not None:
        assert "threads (this one included)" in res.detail
    if control is not None:
        assert control[0]() == before


def test_each_thread_keeps_the_buffer_sets_of_the_shapes_it_used_last():
    """Calls alternating between two shapes (a window layer's 8192-row chunks, a global layer's
    1024) find their buffers again; a third shape replaces the set used longest ago; the
    outputs of alternating calls are those of fresh buffers."""
    assert nc.TILE_SETS == 2
    sizes = [(64, 32, 8, np.float32, 8), (128, 32, 8, np.float32, 8), (256, 32, 8, np.float32, 8)]
    a, b = nc._tiles(*sizes[0]), nc._tiles(*sizes[1])
    assert nc._tiles(*sizes[0]) is a and nc._tiles(*sizes[1]) is b  # no new buffers
    c = nc._tiles(*sizes[2])  # a, used longest ago, goes
    assert nc._tiles(*sizes[1]) is b and nc._tiles(*sizes[2]) is c
    assert nc._tiles(*sizes[0]) is not a
    q, k, v, _ = make_case(15, lead=(2,), L=12, S=12)

    def outputs() -> list:  # a causal call in chunks of 4 rows, then one in chunks of 8
        return [
            nb.scaled_dot_product_attention(
                q, k, v, need_weights=False, is_causal=causal, block_size=blocks
            ).output
            for causal, blocks in ((True, (4, 4)), (False, (8, 4)))
        ]

    first = outputs()
    # bit for bit: the same calls on the same shapes and inputs; only the buffers' contents differ
    for _ in range(2):  # each shape's kept buffers now hold the other call's numbers
        assert all(np.array_equal(x, y) for x, y in zip(first, outputs()))


# ---------------------------------------------------------------- property: chunked == explicit


@given(
    L=st.integers(1, 9),
    S=st.integers(1, 9),
    chunk=st.integers(1, 5),
    block=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    masking=st.sampled_from(["none", "bool", "float", "causal"]),
    policy=st.sampled_from(POLICIES),
    fast=st.booleans(),
)
def test_chunked_equals_explicit(L, S, chunk, block, seed, masking, policy, fast):
    """For any shapes and tile sizes the chunked kernel agrees with the explicit one."""
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((L, 3)) * 3,
        rng.standard_normal((S, 3)),
        rng.standard_normal((S, 2)),
    )
    mask = None
    if masking == "bool":
        mask = rng.random((L, S)) > 0.5
    elif masking == "float":
        mask = np.where(rng.random((L, S)) > 0.5, rng.standard_normal((L, S)), -np.inf)
    kw = dict(attn_mask=mask, is_causal=masking == "causal", masked_rows=policy)
    out_e, w_e = nb.scaled_dot_product_attention(q, k, v, **kw)
    with fast_pass(fast):
        out_c, _ = nb.scaled_dot_product_attention(
            q, k, v, need_weights=False, block_size=(chunk, block), **kw
        )
    bound = output_bound(q, k, v, w_e, 3**-0.5, "float64", mask, -(-S // block))
    assert_close("chunked vs explicit", out_c, out_e, bound)


# ---------------------------------------------------------------- multi-head and trace


def mha_case(seed, lead=(2,)):
    """Cross-attention inputs with 4 query heads, 2 kv heads (d_head 3, d_v 2), biases, w_o."""
    rng = np.random.default_rng(seed)
    r = rng.standard_normal
    x, xk = r((*lead, 5, 8)), r((*lead, 6, 8))
    weights = dict(w_q=r((8, 12)), w_k=r((8, 6)), w_v=r((8, 4)), w_o=r((8, 5)))
    extras = dict(b_q=r(12), b_o=r(5), num_heads=4, num_kv_heads=2)
    mask = rng.random((5, 6)) > 0.3
    mask[3] = False  # a fully masked row
    return x, xk, weights, extras, mask


def _lists(kw):
    """Arrays in a keyword dict as nested lists, for the ground truth."""
    return {a: (b.tolist() if isinstance(b, np.ndarray) else b) for a, b in kw.items()}


def _heads(m, heads, group=1):
    """(n, heads * d) -> (heads * group, n, d), each head repeated `group` times."""
    n, width = m.shape
    return np.repeat(m.reshape(n, heads, width // heads).transpose(1, 0, 2), group, axis=0)


def trace_bounds(t, x, xk, w, extras):
    """Bounds on |float64 kernel - ground truth| for every step of a multi-head trace.

    Each step's bound is propagated from its inputs' bounds: |fl(a @ b) - a_t @ b_t| <=
    da @ (|b| + db) + |a| @ db + g(n) (|a| + da) @ (|b| + db), plus u |truth| for the
    ground truth's own correctly rounded result; softmax by the tolerance module's factor.
    """
    u = UNIT_ROUNDOFF["float64"]
    val = {name: np.array(t[name].tolist()) for name in t.names()}

    def product(a, da, b, db, truth_value):  # a @ b with both factors uncertain
        n = a.shape[-1]
        return (
            da @ (np.abs(b) + db)
            + np.abs(a) @ db
            + (n + 2) * u * ((np.abs(a) + da) @ (np.abs(b) + db))
            + u * np.abs(truth_value)
        )

    zero = np.zeros_like
    d = {}
    d["q"] = product(x, zero(x), w["w_q"], zero(w["w_q"]), val["q"]) + u * np.abs(extras["b_q"])
    d["k"] = product(xk, zero(xk), w["w_k"], zero(w["w_k"]), val["k"])
    d["v"] = product(xk, zero(xk), w["w_v"], zero(w["w_v"]), val["v"])
    H, Hkv = extras["num_heads"], extras["num_kv_heads"]
    g = H // Hkv
    q_h, dq_h = _heads(val["q"], H), _heads(d["q"], H)  # (H, L, dh)
    k_h, dk_h = _heads(val["k"], Hkv, g), _heads(d["k"], Hkv, g)  # (H, S, dh)
    v_h, dv_h = _heads(val["v"], Hkv, g), _heads(d["v"], Hkv, g)  # (H, S, dv)
    kT, dkT = np.swapaxes(k_h, 1, 2), np.swapaxes(dk_h, 1, 2)
    d["scores"] = product(q_h, dq_h, kT, dkT, val["scores"])
    d["scaled"] = abs(t.scale) * d["scores"] + 3 * u * np.abs(val["scaled"])
    d["masked"] = np.where(np.isinf(val["masked"]), 0.0, d["scaled"])
    w_t = val["weights"]
    live = np.where(w_t > 0, d["scaled"] + 2 * u * np.abs(val["scaled"]), 0.0)
    delta = live.max(axis=-1, keepdims=True)  # (H, L, 1): score perturbation per row
    rounding = Rounding("float64", q_h.shape[-1], k_h.shape[1])
    factor = np.vectorize(rounding.factor)(delta) + rounding.factor(0.0)  # kernel + truth
    d["weights"] = factor * w_t + 2 * rounding.weight_floor
    d["head_outputs"] = product(w_t, d["weights"], v_h, dv_h, val["head_outputs"])
    d["concat"] = d["head_outputs"].transpose(1, 0, 2).reshape(val["concat"].shape)
    w_o = w["w_o"]
    d["output"] = product(val["concat"], d["concat"], w_o, zero(w_o), val["output"])
    d["output"] += u * np.abs(extras["b_o"])
    return val, d


def test_trace_matches_ground_truth_trace():
    """Same step names, formulas, notes, axes and shapes; values within derived bounds."""
    x, xk, w, extras, mask = mha_case(33, lead=())
    kw = dict(key=xk, attn_mask=mask, masked_rows="uniform", tokens=list("abcde"), **w, **extras)
    t = scratch.trace_attention(x.tolist(), **_lists(kw))
    n = nb.trace_attention(x, **kw)
    assert n.names() == t.names()
    assert (n.tokens, n.key_tokens, n.scale, n.num_heads, n.num_kv_heads, n.allowed) == (
        t.tokens,
        t.key_tokens,
        t.scale,
        t.num_heads,
        t.num_kv_heads,
        t.allowed,
    )
    assert n.source == dataclasses.replace(t.source, backend="numpy")
    assert n.described() == {**t.described(), "backend": "numpy"}
    val, bound = trace_bounds(t, x, xk, w, extras)
    for a, b in zip(t, n):
        assert (b.name, b.formula, b.note, b.axes, b.shape) == (
            a.name,
            a.formula,
            a.note,
            a.axes,
            a.shape,
        ), a.name
        assert isinstance(b.value, np.ndarray), b.name
        assert_close(a.name, b.value, val[a.name], bound.get(a.name, 0.0))
    assert np.array_equal(np.isneginf(n["masked"].value), np.isneginf(val["masked"]))
    assert np.all(n["weights"].value[:, 3] == 1 / 6)  # the uniform policy, exactly


@pytest.mark.parametrize("need_weights", [True, False])
def test_multi_head_matches_ground_truth(need_weights):
    """Batched projections, GQA heads, w_o and b_o, an (L, S) mask broadcast over the heads."""
    x, xk, w, extras, mask = mha_case(21)
    args = [w["w_q"], w["w_k"], w["w_v"], w["w_o"]]
    res = nb.multi_head_attention(
        x, xk, xk, *args, attn_mask=mask, need_weights=need_weights, block_size=(2, 2), **extras
    )
    assert res.kernel == ("explicit" if need_weights else "chunked-online-softmax")
    out_t, w_t = scratch.multi_head_attention(
        x.tolist(),
        xk.tolist(),
        xk.tolist(),
        *(a.tolist() for a in args),
        attn_mask=mask.tolist(),
        **_lists(extras),
    )
    for b in range(2):  # bounds from the ground truth's trace of each batch entry
        t = scratch.trace_attention(
            x[b].tolist(),
            key=xk[b].tolist(),
            attn_mask=mask.tolist(),
            **_lists(w),
            **_lists(extras),
        )
        val, bound = trace_bounds(t, x[b], xk[b], w, extras)
        rescale = 2 * 3 * (2 * EXP_ULPS + 2) * UNIT_ROUNDOFF["float64"]  # 3 key blocks
        extra = 0.0 if need_weights else rescale * (np.abs(val["concat"]) @ np.abs(w["w_o"]))
        assert_close("mha output", res.output[b], out_t[b], bound["output"] + extra)
        if need_weights:
            assert_close("mha weights", res.weights[b], w_t[b], bound["weights"])
    assert (res.weights is None) == (not need_weights)


# ---------------------------------------------------------------- dropout


def test_dropout_reproducible_and_consistent():
    """A seed repeats; output == weights @ v; kept weights are the undropped ones / (1 - p)."""
    q, k, v, mask = make_case(8, mask="bool")
    p = 0.4
    a = nb.scaled_dot_product_attention(q, k, v, mask, dropout_p=p, rng=7)
    b = nb.scaled_dot_product_attention(q, k, v, mask, dropout_p=p, rng=np.random.default_rng(7))
    assert np.array_equal(a.output, b.output) and np.array_equal(a.weights, b.weights)
    plain = nb.scaled_dot_product_attention(q, k, v, mask)
    dropped = a.weights == 0
    assert 0.2 < dropped[plain.weights > 0].mean() < 0.6
    kept = ~dropped
    assert np.allclose(a.weights[kept], plain.weights[kept] / (1 - p), rtol=4e-16, atol=0)
    assert np.allclose(a.output, a.weights @ v, rtol=0, atol=1e-15)
    c = nb.scaled_dot_product_attention(q, k, v, mask, dropout_p=p, rng=8)
    assert not np.array_equal(a.weights, c.weights)


@pytest.mark.parametrize("policy", POLICIES)
def test_dropout_same_draws_as_ground_truth(policy):
    """With a random.Random both kernels drop exactly the ground truth's entries."""
    q, k, v, mask = make_case(9, mask="bool")
    out_t, w_t = truth(
        q, k, v, attn_mask=mask, dropout_p=0.3, rng=random.Random(5), masked_rows=policy
    )
    res = nb.scaled_dot_product_attention(
        q, k, v, mask, dropout_p=0.3, rng=random.Random(5), masked_rows=policy
    )
    assert np.array_equal(res.weights == 0, w_t == 0)
    assert_close(
        "dropout weights", res.weights, w_t, weights_bound(q, k, w_t, 0.5, "float64", mask) / 0.7
    )
    chunked = nb.scaled_dot_product_attention(
        q,
        k,
        v,
        mask,
        dropout_p=0.3,
        rng=random.Random(5),
        masked_rows=policy,
        need_weights=False,
        block_size=(2, 3),
    )
    assert_close(
        "dropout chunked output",
        chunked.output,
        out_t,
        output_bound(q, k, v, w_t, 0.5, "float64", mask, 3),
    )


# ---------------------------------------------------------------- memory of the chunked kernel


def test_chunked_kernel_never_builds_the_score_matrix():
    """Peak allocation stays far below one (L, S) float32 matrix (tracemalloc sees NumPy)."""
    rng = np.random.default_rng(0)
    L = S = 2048
    q, k, v = (rng.standard_normal((n, 16), dtype=np.float32) for n in (L, S, S))
    tracemalloc.start()
    try:
        nb.scaled_dot_product_attention(
            q, k, v, is_causal=True, need_weights=False, block_size=(128, 256)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    score_matrix = L * S * 4  # 16 MiB
    assert peak < score_matrix / 8, f"peak {peak / 2**20:.1f} MiB"


# ---------------------------------------------------------------- bad input


def _message(fn, *args, **kw):
    """The (type, message) an exception carries; every message starts by naming an argument."""
    with pytest.raises((ValueError, TypeError), match=r"^[a-z_]+: ") as info:
        fn(*args, **kw)
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    "change",
    [
        {"key": [[1.0, 2.0, 3.0]]},  # width
        {"value": [[1.0], [2.0]]},  # length
        {"scale": float("nan")},
        {"scale": "big"},
        {"dropout_p": 1.0},
        {"masked_rows": "ignore"},
        {"attn_mask": [[True, False]]},  # shape
        {"attn_mask": [[1, 0, 1], [0, 1, 1]]},  # ints are ambiguous
        {"attn_mask": [[True, 0.5, 1.0], [0.0, 0.0, 0.0]]},  # bools mixed with floats
        {"attn_mask": [[True] * 3] * 2, "is_causal": True},
        {"query": [[1.0, 2.0], [3.0]]},  # ragged
        {"query": [[1.0, "x"], [3.0, 4.0]]},
        {"value": [[True], [False], [True]]},
        {"is_causal": 1},
    ],
    ids=lambda c: ",".join(c),
)
def test_bad_input_same_error_as_ground_truth(change):
    """Shared validation: the same exception type, naming the same argument."""
    args = dict(
        query=[[1.0, 2.0], [3.0, 4.0]],
        key=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        value=[[1.0], [2.0], [3.0]],
    )
    args.update(change)
    kind_t, text_t = _message(scratch.scaled_dot_product_attention, **args)
    kind_n, text_n = _message(nb.scaled_dot_product_attention, **args)
    assert kind_n is kind_t, (text_n, text_t)
    assert text_n.split(":")[0] == text_t.split(":")[0], (text_n, text_t)


@pytest.mark.parametrize(
    "change, name, where",
    [
        ({"query": np.array([[1.0, np.nan], [3.0, 4.0]])}, "query", "query[0][1]"),
        ({"key": [[1.0, 0.0], [0.0, float("inf")], [1.0, 1.0]]}, "key", "key[1][1]"),
        (
            {"attn_mask": np.array([[0.0, np.nan, 0.0], [0.0, 0.0, 0.0]])},
            "attn_mask",
            "attn_mask[0][1]",
        ),
        ({"dtype": "float16"}, "dtype", "float16"),
        ({"dropout_p": 0.5, "rng": "seed"}, "rng", "str"),
        ({"need_weights": False, "block_size": (0, 4)}, "block_size", "0"),
        ({"query": "hello"}, "query", "str"),
    ],
)
def test_bad_input_names_argument_and_position(change, name, where):
    """Non-finite numbers, bad dtype/rng/block sizes: the message says which and where."""
    args = dict(
        query=[[1.0, 2.0], [3.0, 4.0]],
        key=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        value=[[1.0], [2.0], [3.0]],
    )
    args.update(change)
    _, text = _message(nb.scaled_dot_product_attention, **args)
    assert text.startswith(name) and where in text, text


def test_multi_head_bad_input():
    """Projection shapes and heads are checked with messages naming the argument."""
    x, xk, w, _, _ = mha_case(2)
    _, text = _message(nb.multi_head_attention, x, xk, xk, w["w_q"][:5], w["w_k"], w["w_v"])
    assert text.startswith("w_q")
    _, text = _message(
        nb.multi_head_attention,
        x,
        xk,
        xk,
        w["w_q"],
        w["w_k"],
        w["w_v"],
        num_heads=4,
        num_kv_heads=3,
    )
    assert text.startswith("num_kv_heads")
    _, text = _message(nb.trace_attention, x)  # a trace is one 2-D example
    assert text.startswith("x")


@pytest.mark.parametrize(
    "change",
    [
        {"w_q": (7, 12)},  # rows differ from the input width
        {"w_k": (8, 4)},  # key heads 2 wide, query heads 3
        {"w_v": (8, 3)},  # 3 columns for 2 kv heads
        {"w_o": (6, 5)},  # rows != num_heads * d_v
        {"b_q": (11,)},
        {"b_o": (4,)},
        {"value": (2, 5, 8)},  # value length differs from key's
        {"key": (3, 6, 8)},  # leading dims differ from query's
        {"num_kv_heads": 3},
        {"w_o": None},  # b_o without w_o
    ],
    ids=lambda c: ",".join(c),
)
def test_multi_head_shape_errors_are_the_ground_truths(change):
    """One shape plan: a bad multi-head shape gets the ground truth's message, word for word."""
    x, xk, w, extras, _ = mha_case(3)
    rng = np.random.default_rng(4)
    args = dict(query=x, key=xk, value=xk, **w, **extras)
    for name, shape in change.items():
        args[name] = shape if name == "num_kv_heads" or shape is None else rng.random(shape)
    kind_t, text_t = _message(scratch.multi_head_attention, **_lists(args))
    kind_n, text_n = _message(nb.multi_head_attention, **args)
    assert (kind_n, text_n) == (kind_t, text_t)


# ---------------------------------------------------------------- extreme inputs


def test_scale_too_large_to_fold_into_q_is_applied_per_tile():
    """q * scale overflows float32 while the scores stay finite: the chunked path must not
    fold the scale into q (it would give NaN); equal huge logits give uniform weights exactly."""
    q = np.full((2, 3), 1e20, dtype=np.float32)
    k = np.full((2, 3), 1e-30, dtype=np.float32)
    v = np.array([[2.0, 3.0], [4.0, 5.0]], dtype=np.float32)
    truth = scratch.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist(), scale=1e20)
    assert truth[0] == [[3.0, 4.0], [3.0, 4.0]]  # logits 3e10 for both keys: uniform
    for need_weights in (True, False):
        found = nb.scaled_dot_product_attention(q, k, v, scale=1e20, need_weights=need_weights)
        assert found.output.tolist() == truth[0], (need_weights, found.output)


def test_scale_is_folded_into_q_only_where_no_element_overflows_or_goes_subnormal():
    """Each worker folds the scale into its chunk of q unless a product overflows or lands
    below float32's smallest normal number (bits of q lost); a zero stays zero and is fine."""
    tiles = nc._Tiles(4, 4, 2, np.dtype(np.float32), 3)
    fine = np.array([[1e-30, 0.0, 2.0], [-3.0, 4.0, 0.0]], dtype=np.float32)
    folded, tile_scale = tiles.fold(fine, 0.01)
    assert tile_scale is None and np.array_equal(folded, fine * np.float32(0.01))
    for q, factor in (([[1e-37, 0.0, 2.0]], 0.01), ([[1e38, 1.0, 0.0]], 10.0)):
        q = np.array(q, dtype=np.float32)
        folded, tile_scale = tiles.fold(q, factor)
        assert tile_scale == factor and folded is q, (q, factor)


def test_float_mask_beyond_float32_range_stays_finite():
    """A float64 mask value of -1e300 is 'very unlikely', not 'masked': in float32 it must not
    overflow to -inf, or a row of them would count as fully masked."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((3, 4), dtype=np.float32) for _ in range(3))
    mask = np.zeros((3, 3))
    mask[0, :] = -1e300  # every key equally unlikely: uniform weights, output = mean of v
    mask[1, 1] = -1e300  # one key as good as masked
    truth, p = scratch.scaled_dot_product_attention(
        q.tolist(), k.tolist(), v.tolist(), attn_mask=mask.tolist(), masked_rows="nan"
    )
    v64 = v.astype(np.float64)
    np.testing.assert_array_equal(np.array(p[0]), np.full(3, 1 / 3))
    u = UNIT_ROUNDOFF["float32"]
    for need_weights in (True, False):
        found = nb.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, masked_rows="nan", need_weights=need_weights
        ).output
        # row 0: fl(1/3) weights, a 3-term float32 sum: (u + g(3)) sum_j |v_j| / 3 <= 5u mean|v|
        assert_close("row 0", found[0], truth[0], 5 * u * np.abs(v64).mean(axis=0))
        assert not np.isnan(found).any()
        q64, k64 = q.astype(np.float64), k.astype(np.float64)
        bound = output_bound(q64, k64, v64, np.array(p), 0.5, "float32", mask)
        assert_close("row 1", found[1], truth[1], bound[1])


def test_need_weights_must_be_a_bool():
    q = np.ones((2, 3))
    for fn, extra in (
        (nb.scaled_dot_product_attention, ()),
        (nb.multi_head_attention, (np.eye(3), np.eye(3), np.eye(3))),
    ):
        with pytest.raises(TypeError, match="need_weights: expected True or False"):
            fn(q, q, q, *extra, need_weights="no")


def test_multi_head_result_dtype_counts_w_o():
    """float32 data with a float64 w_o: the result is float64 (the widest input wins)."""
    x = np.ones((2, 4), dtype=np.float32)
    w = np.eye(4, dtype=np.float32)
    out = nb.multi_head_attention(x, x, x, w, w, w, w.astype(np.float64), num_heads=2)[0]
    assert out.dtype == np.float64
    assert nb.multi_head_attention(x, x, x, w, w, w, w, num_heads=2)[0].dtype == np.float32


def test_result_survives_copy_and_pickle():
    import copy
    import pickle

    found = nb.scaled_dot_product_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1)))
    for again in (copy.copy(found), copy.deepcopy(found), pickle.loads(pickle.dumps(found))):
        assert again.kernel == found.kernel == "explicit"
        np.testing.assert_array_equal(again.output, found.output)
        np.testing.assert_array_equal(again.weights, found.weights)


def test_data_too_large_for_the_dtype_is_named_not_called_inf():
    """1e300 is finite: in float32 it is 'too large', with its position, not 'found inf'."""
    big = np.array([[0.5, 1e300], [1.0, 2.0]])
    small = np.ones((2, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"key: 1e\+300 at key\[0\]\[1\] is too large for float32"):
        nb.scaled_dot_product_attention(small, big, small, dtype="float32")
    assert nb.scaled_dot_product_attention(small, big, small).output.dtype == np.float64


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_finite_check_takes_numpy_matrix_input():
    """np.matrix stays 2-D when reshaped: the quick check must still see one flat vector."""
    rng = np.random.default_rng(22)
    m = np.asmatrix(rng.standard_normal((4, 8)))
    found = nb.scaled_dot_product_attention(m, m, m, need_weights=False).output
    plain = nb.scaled_dot_product_attention(m.A, m.A, m.A, need_weights=False).output
    np.testing.assert_array_equal(found, plain)
    bad = m.copy()
    bad[2, 3] = np.nan
    with pytest.raises(
        ValueError, match=r"query: expected finite numbers, found nan at query\[2\]\[3\]"
    ):
        nb.scaled_dot_product_attention(bad, m, m)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_finite_check_refuses_each_non_finite_value_and_accepts_huge_finite_ones(dtype, layout):
    """The quick check (one sum of squares) must never pass NaN or +-inf; a sum that overflows
    on huge finite values is a false alarm the element-by-element check then clears."""
    rng = np.random.default_rng(21)
    base = rng.standard_normal((2, 3, 5, 8)).astype(dtype)
    pick = (lambda a: a) if layout == "contiguous" else (lambda a: a[:, :, ::2, ::3])
    huge = base.copy()
    huge[1, 2, 4, 6] = np.finfo(dtype).max / 2  # its square overflows
    assert (
        nb.scaled_dot_product_attention(pick(huge), pick(base), pick(base), need_weights=False)
        is not None
    )
    position = "[1][2][2][0]" if layout == "contiguous" else "[1][2][1][0]"
    for bad in (np.nan, np.inf, -np.inf):
        q = base.copy()
        q[1, 2, 2, 2] = q[1, 2, 4, 6] = q[1, 2, 2, 0] = bad  # the first in row-major order named
        with pytest.raises(
            ValueError, match=r"query: expected finite numbers, found -?(nan|inf) at"
        ):
            nb.scaled_dot_product_attention(pick(q), pick(base), pick(base))
        _, text = _message(nb.scaled_dot_product_attention, pick(q), pick(base), pick(base))
        assert text.endswith(f"query{position}"), text


# ---------------------------------------------------------------- host-dependent exponential


@pytest.mark.parametrize("choice", ["exp2", "exp"])
@pytest.mark.parametrize("masking", ["none", "bool", "causal", "gqa"])
@pytest.mark.parametrize("policy", POLICIES)
def test_float32_chunked_kernel_with_either_exponential(monkeypatch, choice, masking, policy):
    """float32 with exp2 (scale * log2(e) folded into q) and with exp: both within the bound
    whatever the host picks, with masks, causal, GQA and every masked_rows policy."""
    monkeypatch.setattr(nc, "exp_choice", lambda: (choice, f"{choice} (test)"))
    lead = (2, 6) if masking == "gqa" else (2,)
    q, k, v, mask = make_case(31, lead=lead, L=9, S=11, E=8, mask="bool")
    if masking == "gqa":
        k, v = k[:, :2], v[:, :2]  # 6 query heads share 2 key/value heads
    q32, k32, v32 = (a.astype(np.float32) for a in (q * 3, k, v))  # logits up to about 30
    kw = dict(
        attn_mask=mask if masking == "bool" else None,
        is_causal=masking == "causal",
        enable_gqa=masking == "gqa",
        masked_rows=policy,
    )
    out_t, w_t = truth(q32.astype(np.float64), k32, v32, **kw)
    res = nb.scaled_dot_product_attention(
        q32, k32, v32, need_weights=False, block_size=(4, 4), **kw
    )
    assert res.detail.startswith(f"{choice} (test)")
    k_r, v_r = k32, v32
    if masking == "gqa":
        k_r, v_r = np.repeat(k32, 3, axis=1), np.repeat(v32, 3, axis=1)
    bound = output_bound(q32, k_r, v_r, w_t, 1 / np.sqrt(8), "float32", kw["attn_mask"], 3)
    assert_close(f"{choice} {masking} {policy}", res.output, out_t, bound)


def test_the_host_choice_is_recorded_in_the_result():
    """float32 without a float mask uses the host's choice; float64 and float masks use exp."""
    q, k, v, mask = make_case(2, L=4, S=5, mask="float")
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    name, why = nc.exp_choice()
    assert nb.scaled_dot_product_attention(q32, k32, v32, need_weights=False).detail == why
    with_mask = nb.scaled_dot_product_attention(
        q32, k32, v32, mask.astype(np.float32), need_weights=False
    )
    in_64 = nb.scaled_dot_product_attention(q, k, v, need_weights=False)
    if name == "exp2":
        assert with_mask.detail.startswith("exp (a float mask") and in_64.detail.startswith(
            "exp (float64"
        )
    else:
        assert with_mask.detail == in_64.detail == why
    assert nb.scaled_dot_product_attention(q32, k32, v32).detail == ""  # explicit: no choice


def test_rows_with_a_large_bound_subtract_it_and_skip_the_safe_pass(monkeypatch):
    """Logits of 200 overflow float32's exp; the per-row offset keeps them in range, so the
    fast pass alone gives the answer (no safe pass) and it matches the ground truth."""
    calls = []
    safe = nc._Tiles.safe

    def spy(self, *args):
        calls.append(args[:2])
        return safe(self, *args)

    monkeypatch.setattr(nc._Tiles, "safe", spy)
    rng = np.random.default_rng(8)
    k = rng.standard_normal((1, 16, 4))
    k = (2 * k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)  # |k_j| = 2
    q = (k[:, :6] * 100).astype(np.float32)  # q_i parallel to k_i: score_ii = 200 = the bound
    v = rng.standard_normal((1, 16, 3)).astype(np.float32)
    out_t, w_t = truth(q.astype(np.float64), k, v)
    res = nb.scaled_dot_product_attention(q, k, v, need_weights=False, block_size=(3, 8))
    assert calls == []
    assert_close(
        "large logits", res.output, out_t, output_bound(q, k, v, w_t, 0.5, "float32", None, 2)
    )
    assert np.max(q.astype(np.float64) @ k[0].T.astype(np.float64) * 0.5) > 199


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bool_mask_adds_minus_inf_where_unseen_and_keeps_every_other_bit(dtype, seed):
    """add_mask's one pass equals np.where(mask, s, s - inf) bit for bit: -0.0, NaN and +inf
    scores included (a NaN or +inf where masked stays NaN, as in torch's reference)."""
    from scratch.backends.numpy_backend import add_mask

    rng = np.random.default_rng(seed)
    scaled = rng.standard_normal((2, 3, 6, 7)).astype(dtype)
    scaled.flat[rng.choice(scaled.size, 20, replace=False)] = [np.nan, np.inf, -np.inf, -0.0] * 5
    for mask in (rng.random((6, 7)) < 0.5, rng.random((2, 3, 6, 7)) < 0.5):
        with np.errstate(invalid="ignore"):
            expected = np.where(mask, scaled, scaled - np.inf)
            found = add_mask(scaled, mask)
        assert found.dtype == dtype and found.tobytes() == expected.tobytes()

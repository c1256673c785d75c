"""The ground truth against PyTorch itself, in float64.

`scratch.scaled_dot_product_attention` vs `torch.nn.functional.scaled_dot_product_attention`,
and `scratch.multi_head_attention` vs `torch.nn.MultiheadAttention` with the weights copied
across. Tolerances come from a float64 rounding-error bound (`float64_bound`, `trace_bounds`);
the planted-mistake tests show that the same checks fail on a missing transpose, a wrong scale,
softmax over the wrong axis or a mask read with the wrong convention.
"""

from __future__ import annotations

import math
import random

import pytest

import scratch

torch = pytest.importorskip("torch")
F = torch.nn.functional

from test_backends_conformance import (  # noqa: E402  (after the importorskip on purpose)
    assert_within,
    make_mask,
    random_tensor,
    trace_bounds,
)

U = 2.0**-53  # float64 unit roundoff


def g(n: float) -> float:
    """Higham's gamma_n = n u / (1 - n u) for float64: the bound on n successive roundings."""
    return n * U / (1.0 - n * U)


def float64_bound(q, k, v, weights, scale, attn_mask=None, enable_gqa=False) -> list:
    """Per-element bound on |torch float64 SDPA - ground truth|, as nested lists (..., L, Ev).

    For one side (a float64 kernel, any summation order, online softmax allowed):
      |err_ic| <= (expm1(2 g(E+4) S_i) (1 + g(2S+16)) + g(2S+16)) * sum_j p_ij |v_jc| + floor
    with S_i = max over live keys j of |scale| sum_l |q_il k_jl| + |finite mask_ij|.
    g(E+4) S_i bounds the error of a logit (E products and sums, the scale, the mask add and the
    max subtraction); moving every logit by at most delta changes each weight by a factor within
    exp(+-2 delta); 2S+16 roundings cover the softmax sum, a few-ulp exp, the division, the
    rescaling steps of an online (blocked) softmax and the S-term sum of p_ij v_jc. The ground
    truth rounds at most as often (its sums are exact fsums), so the bound used is twice that.
    Rows whose keys are all masked must be exactly zero (bound 0).
    """
    qt, kt, vt, p = (torch.tensor(x, dtype=torch.float64) for x in (q, k, v, weights))
    E, S = qt.shape[-1], kt.shape[-2]
    if enable_gqa and kt.shape[-3] != qt.shape[-3]:
        group = qt.shape[-3] // kt.shape[-3]
        kt, vt = kt.repeat_interleave(group, -3), vt.repeat_interleave(group, -3)
    # step 1: S_ij = |scale| |q| @ |k|^T + |mask|      (..., L, E) @ (..., E, S) -> (..., L, S)
    size = abs(scale) * (qt.abs() @ kt.abs().transpose(-1, -2))
    if attn_mask is not None:
        mask = torch.tensor(attn_mask)
        if mask.dtype != torch.bool:
            size = size + torch.where(mask.isfinite(), mask.abs(), 0.0)
    S_i = torch.where(p > 0, size, 0.0).amax(-1, keepdim=True)  # (..., L, 1)
    # step 2: the relative factor, then times sum_j p_ij |v_jc|    (..., L, S) @ (..., S, Ev)
    rel = torch.expm1(2 * g(E + 4) * S_i) * (1 + g(2 * S + 16)) + g(2 * S + 16)
    bound = 2 * (rel * (p @ vt.abs()) + (S + 1) * 2.0**-1074 * 8)
    empty = (p == 0).all(-1, keepdim=True)
    return torch.where(empty, 0.0, bound).tolist()


def _sdpa_torch(q, k, v, **kwargs) -> list:
    """torch's SDPA on float64 tensors (bool masks keep True = may attend, as in ours)."""
    t = {n: torch.tensor(x, dtype=torch.float64) for n, x in (("q", q), ("k", k), ("v", v))}
    mask = kwargs.pop("attn_mask", None)
    if mask is not None:
        mask = torch.tensor(mask)
        mask = mask if mask.dtype == torch.bool else mask.double()
    out = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=mask, **kwargs)
    return out.tolist()


# name: (query lead, kv lead, L, S, E, Ev, options); masks are drawn per case below
CASES = {
    "plain": ((), (), 3, 4, 5, 2, {}),
    "batch-heads": ((2, 3), (2, 3), 4, 3, 4, 4, {}),
    "bool-mask": ((2,), (2,), 4, 5, 3, 2, {"mask": "bool"}),
    "bool-mask-broadcast": ((2, 2), (2, 2), 3, 4, 3, 3, {"mask": "bool-broadcast"}),
    "float-mask": ((2, 2), (2, 2), 4, 4, 4, 4, {"mask": "float"}),
    "float-mask-empty-row": ((2,), (2,), 4, 3, 2, 3, {"mask": "float-empty"}),
    "bool-mask-empty-row": ((1, 2), (1, 2), 4, 3, 4, 4, {"mask": "bool-empty"}),
    "causal-L<S": ((2, 2), (2, 2), 3, 6, 4, 4, {"is_causal": True}),
    "causal-L>S": ((2, 2), (2, 2), 6, 3, 4, 4, {"is_causal": True}),
    "causal-3d": ((2,), (2,), 5, 5, 3, 2, {"is_causal": True}),
    "scale-custom": ((2,), (2,), 3, 4, 4, 4, {"scale": 0.37}),
    "scale-zero": ((2,), (2,), 3, 4, 4, 4, {"scale": 0.0}),
    "scale-negative": ((2, 2), (2, 2), 3, 4, 4, 4, {"scale": -1.3}),
    "scale-negative-mask": ((2,), (2,), 4, 4, 3, 3, {"scale": -0.8, "mask": "bool"}),
    "gqa-4-2": ((2, 4), (2, 2), 3, 5, 4, 4, {"enable_gqa": True}),
    "gqa-4-1-causal": ((4,), (1,), 5, 3, 2, 2, {"enable_gqa": True, "is_causal": True}),
    "gqa-mask": ((1, 6), (1, 3), 4, 4, 3, 5, {"enable_gqa": True, "mask": "float"}),
    "large-logits": ((2,), (2,), 3, 4, 4, 4, {"size": 100.0}),
}


def build(name: str):
    """Seeded inputs and keyword arguments for one named case."""
    q_lead, kv_lead, L, S, E, Ev, options = CASES[name]
    rng = random.Random(name)
    options = dict(options)
    size = options.pop("size", 2.0)
    q = random_tensor(rng, q_lead + (L, E), "float64", size)
    k = random_tensor(rng, kv_lead + (S, E), "float64", size)
    v = random_tensor(rng, kv_lead + (S, Ev), "float64")
    kind = options.pop("mask", None)
    if kind is not None:
        shape = {"bool-broadcast": (q_lead[0], 1, L, S)}.get(kind, q_lead + (L, S))
        empty = 1 if kind.endswith("empty") else None
        options["attn_mask"] = make_mask(rng, kind.split("-")[0], shape, empty)
    return q, k, v, options


@pytest.mark.parametrize("name", sorted(CASES))
def test_sdpa_matches_torch(name: str) -> None:
    q, k, v, options = build(name)
    want, weights = scratch.scaled_dot_product_attention(q, k, v, **options)
    got = _sdpa_torch(q, k, v, **options)
    scale = options.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(scratch.shape_of(q)[-1])
    bound = float64_bound(q, k, v, weights, scale, options.get("attn_mask"),
                          options.get("enable_gqa", False))  # fmt: skip
    assert_within("output", got, want, bound, name)


@pytest.mark.parametrize("scale", [0.0, -0.6])
def test_causal_with_scale_at_most_zero(scale: float) -> None:
    """torch 2.13's fused CPU kernel gives NaN for is_causal with scale <= 0; its math kernel
    and the same mask given explicitly agree with the ground truth."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, _ = build("causal-L>S")
    want, weights = scratch.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    bound = float64_bound(q, k, v, weights, scale)
    with sdpa_kernel(SDPBackend.MATH):
        got = _sdpa_torch(q, k, v, is_causal=True, scale=scale)
    assert_within("output (math kernel)", got, want, bound, f"scale={scale}")
    tril = scratch.causal_mask(len(q[0][0]), len(k[0][0]))
    got = _sdpa_torch(q, k, v, attn_mask=tril, scale=scale)
    assert_within("output (explicit tril mask)", got, want, bound, f"scale={scale}")


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_score_at_a_masked_key_makes_the_row_nan_like_torch(bad: float) -> None:
    """Masks add -inf (torch's reference): NaN or +inf behind a mask still gives NaN."""
    q, v = [[1.0], [2.0], [0.5]], [[1.0], [2.0], [3.0]]
    k = [[0.5], [1.0], [bad]]  # key 2: masked for rows 0 and 1 (bool mask) / rows 0, 1 (causal)
    mask = [[True, True, False], [True, False, False], [True, True, True]]
    for options in ({"attn_mask": mask}, {"is_causal": True}):
        want = scratch.scaled_dot_product_attention(q, k, v, **options)[0]
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            got = _sdpa_torch(q, k, v, **options)
        assert [math.isnan(r[0]) for r in want] == [math.isnan(r[0]) for r in got], options
        assert all(math.isnan(r[0]) for r in want), (options, want)


# ---------------------------------------------------------------- planted mistakes


def _wrong(name: str, q, k, v, options) -> list:
    """Attention with one deliberate mistake, in torch float64."""
    qt, kt, vt = (torch.tensor(x, dtype=torch.float64) for x in (q, k, v))
    scale = 1.0 / math.sqrt(qt.shape[-1])
    if name == "missing-transpose":
        scores = qt @ kt  # needs E == S; should be q @ k^T
    else:
        scores = qt @ kt.transpose(-1, -2)
    if name == "wrong-scale":
        scale = 1.0 / qt.shape[-1]  # 1/E instead of 1/sqrt(E)
    masked = scores * scale
    mask = options.get("attn_mask")
    if mask is not None:
        allowed = torch.tensor(mask)
        if name == "mask-inverted":
            allowed = ~allowed  # torch.nn.MultiheadAttention's convention, misread
        masked = masked.masked_fill(~allowed, -math.inf)
    axis = -2 if name == "softmax-axis" else -1
    return (torch.softmax(masked, dim=axis) @ vt).tolist()


@pytest.mark.parametrize("mistake", ["missing-transpose", "wrong-scale", "softmax-axis",
                                     "mask-inverted"])  # fmt: skip
def test_bound_catches_planted_mistakes(mistake: str) -> None:
    """The float64 bound is tight enough that each classic mistake fails the check."""
    rng = random.Random(mistake)
    L = E = 4  # S = L too, so the missing transpose q @ k still has the right shape
    q, k, v = (random_tensor(rng, (2, L, E), "float64") for _ in range(3))
    options = {}
    if mistake == "mask-inverted":
        options["attn_mask"] = [
            [True, False, True, True],
            [True, True, False, True],
            [False, True, True, True],
            [True, True, True, False],
        ]
    want, weights = scratch.scaled_dot_product_attention(q, k, v, **options)
    bound = float64_bound(q, k, v, weights, 0.5, options.get("attn_mask"))
    right = _wrong("none", q, k, v, options)
    assert_within("output", right, want, bound, "correct torch pipeline")
    with pytest.raises(AssertionError, match="output"):
        assert_within("output", _wrong(mistake, q, k, v, options), want, bound, mistake)


# ---------------------------------------------------------------- multi-head attention


def _torch_mha(x, key, value, w, num_heads, attn_mask=None):
    """torch.nn.MultiheadAttention with our weights copied in; returns (output, weights)."""
    d_model = len(w["w_q"])
    kdim, vdim = len(w["w_k"]), len(w["w_v"])
    mha = torch.nn.MultiheadAttention(
        d_model, num_heads, bias=True, batch_first=True, kdim=kdim, vdim=vdim,
        dtype=torch.float64,
    )  # fmt: skip
    T = {n: torch.tensor(m, dtype=torch.float64) for n, m in w.items()}
    with torch.no_grad():
        # torch computes x @ W^T, so its weight rows are the columns of our w_q, w_k, w_v
        if mha.in_proj_weight is not None:
            mha.in_proj_weight.copy_(torch.cat([T["w_q"].T, T["w_k"].T, T["w_v"].T]))
        else:
            mha.q_proj_weight.copy_(T["w_q"].T)
            mha.k_proj_weight.copy_(T["w_k"].T)
            mha.v_proj_weight.copy_(T["w_v"].T)
        mha.in_proj_bias.copy_(torch.cat([T["b_q"], T["b_k"], T["b_v"]]))
        mha.out_proj.weight.copy_(T["w_o"].T)
        mha.out_proj.bias.copy_(T["b_o"])
    mask = None
    if attn_mask is not None:
        mask = torch.tensor(attn_mask)
        mask = ~mask if mask.dtype == torch.bool else mask.double()  # torch: True = masked
    out, weights = mha(
        torch.tensor(x, dtype=torch.float64), torch.tensor(key, dtype=torch.float64),
        torch.tensor(value, dtype=torch.float64), attn_mask=mask, need_weights=True,
        average_attn_weights=False,
    )  # fmt: skip
    return out.tolist(), weights.tolist()


def _mha_inputs(seed: str, B: int, L: int, S: int, d_model: int, H: int, kdim: int, vdim: int):
    """Seeded inputs and weights (ours: x @ w) for a multi-head case."""
    rng = random.Random(seed)
    x = random_tensor(rng, (B, L, d_model), "float64")
    key = random_tensor(rng, (B, S, kdim), "float64")
    value = random_tensor(rng, (B, S, vdim), "float64")
    shapes = {"w_q": (d_model, d_model), "w_k": (kdim, d_model), "w_v": (vdim, d_model),
              "w_o": (d_model, d_model), "b_q": (d_model,), "b_k": (d_model,),
              "b_v": (d_model,), "b_o": (d_model,)}  # fmt: skip
    w = {n: random_tensor(rng, s, "float64", 1.0) for n, s in shapes.items()}
    return x, key, value, w


MHA_CASES = {
    "self-1-head": (2, 4, 4, 3, 1, None, None),
    "self-2-heads-bool": (2, 4, 4, 4, 2, None, "bool"),
    "self-3-heads-float": (1, 3, 3, 6, 3, None, "float"),
    "cross-kdim-vdim": (2, 3, 5, 4, 2, (3, 5), None),
    "cross-mask": (2, 4, 3, 4, 4, (2, 6), "bool"),
}


@pytest.mark.parametrize("name", sorted(MHA_CASES))
def test_multi_head_matches_torch(name: str) -> None:
    B, L, S, d_model, H, dims, kind = MHA_CASES[name]
    cross = dims is not None
    kdim, vdim = dims if cross else (d_model, d_model)
    x, key, value, w = _mha_inputs(name, B, L, S, d_model, H, kdim, vdim)
    if not cross:
        key = value = x
    mask = None
    if kind is not None:
        mask = make_mask(random.Random(name + "mask"), kind, (L, S), None)
        for row in mask:  # keep every row attending somewhere (torch MHA gives NaN otherwise)
            row[0] = True if kind == "bool" else 0.0
    want_out, want_w = scratch.multi_head_attention(x, key, value, **w, num_heads=H,
                                                    attn_mask=mask)  # fmt: skip
    got_out, got_w = _torch_mha(x, key, value, w, H, mask)
    for b in range(B):
        kwargs = dict(w, x=x[b], num_heads=H, attn_mask=mask)
        if cross:
            kwargs.update(key=key[b], value=value[b])
        ref = scratch.trace_attention(**kwargs)
        bounds = trace_bounds(ref, kwargs, "float64")
        assert_within("output", got_out[b], want_out[b], bounds["output"].tolist(), name)
        assert_within("weights", got_w[b], want_w[b], bounds["weights"].tolist(), name)


@pytest.mark.parametrize("mistake", ["w_q-not-transposed", "mask-not-inverted"])
def test_multi_head_bound_catches_planted_mistakes(mistake: str) -> None:
    """Copying w_q without the transpose, or passing our mask unconverted, fails the check."""
    B, L, S, d_model, H = 1, 4, 4, 4, 2
    x, _, _, w = _mha_inputs(mistake, B, L, S, d_model, H, d_model, d_model)
    mask = [[True, False, True, True], [True, True, False, False], [True, True, True, False],
            [True, False, False, True]]  # fmt: skip
    want_out, want_w = scratch.multi_head_attention(x, x, x, **w, num_heads=H, attn_mask=mask)
    kwargs = dict(w, x=x[0], num_heads=H, attn_mask=mask)
    bounds = trace_bounds(scratch.trace_attention(**kwargs), kwargs, "float64")
    wrong_w = dict(w, w_q=[list(r) for r in zip(*w["w_q"])]) if mistake.startswith("w_q") else w
    wrong_mask = [[not a for a in row] for row in mask] if mistake.startswith("mask") else mask
    got_out, _ = _torch_mha(x, x, x, wrong_w, H, wrong_mask)
    with pytest.raises(AssertionError, match="output"):
        assert_within("output", got_out[0], want_out[0], bounds["output"].tolist(), mistake)

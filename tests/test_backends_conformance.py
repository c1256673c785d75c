"""Every available backend against the ground truth, on the same already-rounded inputs.

Inputs are rounded to the dtype under test first (pure Python, struct), then the ground truth
runs on them as float64 lists, so the only differences left are the backend's own roundings.
Outputs are checked against `scratch.tolerance` (the issue-3 bound); weights against the same
bound with value = identity (weights are what attention returns when v = I); traces step by step
against a running error bound (`trace_bounds`) that follows the errors through every step.
"""

from __future__ import annotations

import math
import random
import re
import struct
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scratch
import scratch.backends as backends
from scratch.bounds.tolerance import (
    ACCUMULATE,
    EXP_ULPS,
    SMALLEST_SUBNORMAL,
    UNIT_ROUNDOFF,
    gamma,
    tolerance,
)
from scratch.trace.compare import compare_traces

ALL_DTYPES = ("float64", "float32", "float16", "bfloat16")
U64 = UNIT_ROUNDOFF["float64"]
AVAILABLE = backends.available()
MASK_VALUES = (0.0, -1.0, 0.5, -2.0, -math.inf)  # exact in every dtype


# ---------------------------------------------------------------- rounding and conversion


def round_to(x: float, dtype: str) -> float:
    """x rounded to the nearest value of `dtype` (float64 kept), returned as a Python float."""
    if dtype == "float64":
        return x
    if dtype == "float16":
        return struct.unpack("<e", struct.pack("<e", x))[0]
    single = struct.unpack("<f", struct.pack("<f", x))[0]
    if dtype == "float32":
        return single
    bits = struct.unpack("<I", struct.pack("<f", single))[0]  # bfloat16: top 16 bits of float32
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round half to even
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def random_tensor(rng: random.Random, shape: tuple[int, ...], dtype: str, size: float = 2.0):
    """Nested lists of uniform(-size, size) values, already rounded to `dtype`."""
    if not shape:
        return round_to(rng.uniform(-size, size), dtype)
    return [random_tensor(rng, shape[1:], dtype, size) for _ in range(shape[0])]


def to_lists(x: object) -> object:
    """A backend's array (torch tensor, NumPy array, nested lists) as nested float64 lists."""
    if x is None:
        return None
    if hasattr(x, "detach"):
        return x.detach().cpu().double().tolist()
    if hasattr(x, "astype"):
        return x.astype("float64").tolist()
    return x


def shape(x: object) -> tuple[int, ...]:
    """Shape of a regular nested list (first entries walked)."""
    dims = []
    while isinstance(x, (list, tuple)):
        dims.append(len(x))
        x = x[0]
    return tuple(dims)


def flat(x: object) -> list[float]:
    """All entries of a nested list, flattened row-major."""
    level = [x]
    while level and isinstance(level[0], (list, tuple)):
        level = [y for row in level for y in row]
    return [float(y) for y in level]


def dtype_name(x: object) -> str:
    """'float32' for a tensor/array of float32, 'float64' for nested lists."""
    return str(getattr(x, "dtype", "float64")).removeprefix("torch.")


def assert_within(what: str, got: object, want: object, bound: object, context: str) -> None:
    """Shape first, then NaN/inf placement, then |got - want| <= bound element by element."""
    got_shape, want_shape = shape(got), shape(want)
    assert got_shape == want_shape, f"{what}: shape {got_shape} != {want_shape} ({context})"
    worst, where = -1.0, None
    for n, (g, w, b) in enumerate(zip(flat(got), flat(want), flat(bound), strict=True)):
        if math.isnan(w) or math.isnan(g):
            assert math.isnan(w) and math.isnan(g), (
                f"{what}: NaN mismatch at flat index {n}: got {g}, want {w} ({context})"
            )
            continue
        if math.isinf(w) or math.isinf(g):
            assert g == w, f"{what}: got {g}, want {w} at flat index {n} ({context})"
            continue
        excess = abs(g - w) - b
        if excess > worst:
            worst, where = excess, (n, g, w, b)
    if worst > 0:
        n, g, w, b = where
        raise AssertionError(
            f"{what}: largest excess at flat index {n}: got {g!r}, want {w!r}, "
            f"|diff| {abs(g - w):.3e} > bound {b:.3e} ({context})"
        )


# ---------------------------------------------------------------- cases


@dataclass
class Case:
    """One scaled_dot_product_attention call, with its inputs already rounded to `dtype`."""

    dtype: str
    query: list
    key: list
    value: list
    kwargs: dict = field(default_factory=dict)

    def label(self) -> str:
        shapes = tuple(shape(t) for t in (self.query, self.key, self.value))
        mask = self.kwargs.get("attn_mask")
        options = {k: v for k, v in self.kwargs.items() if k != "attn_mask"}
        mask_shape = None if mask is None else shape(mask)
        return f"dtype={self.dtype} shapes={shapes} mask={mask_shape} {options}"


def make_mask(rng: random.Random, kind: str, shape: tuple[int, ...], empty_row: int | None):
    """A bool (True = may attend) or float (added) mask; `empty_row` masks one row fully."""
    L, S = shape[-2:]

    def build(dims: tuple[int, ...]):
        if len(dims) > 2:
            return [build(dims[1:]) for _ in range(dims[0])]
        rows = []
        for i in range(L):
            if kind == "bool":
                row = [rng.random() < 0.7 for _ in range(S)]
                rows.append([False] * S if i == empty_row else row)
            else:
                row = [rng.choice(MASK_VALUES) for _ in range(S)]
                rows.append([-math.inf] * S if i == empty_row else row)
        return rows

    return build(shape)


@st.composite
def sdpa_cases(draw, dtypes=ALL_DTYPES) -> Case:
    """Leading dims, L != S, Ev != E, masks, causal, scale, GQA, empty rows, big logits."""
    dtype = draw(st.sampled_from(dtypes))
    gqa = draw(st.booleans())
    if gqa:
        kv_heads, group = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        batch = draw(st.sampled_from([(), (2,)]))
        q_lead, kv_lead = batch + (kv_heads * group,), batch + (kv_heads,)
    else:
        q_lead = kv_lead = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
    L, S = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    E = draw(st.integers(1, 4))
    Ev = E if draw(st.booleans()) else draw(st.integers(1, 4))  # Ev == E lets fused kernels run
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    big = dtype in ("float32", "float64") and draw(st.booleans())
    size = 100.0 if big else 2.0  # big: |q_il k_jl| up to 1e4, logits of order 1e4
    query = random_tensor(rng, q_lead + (L, E), dtype, size)
    key = random_tensor(rng, kv_lead + (S, E), dtype, size)
    value = random_tensor(rng, kv_lead + (S, Ev), dtype)
    kwargs = {
        "scale": draw(st.sampled_from([None, 0.0, -0.5, 0.3, 2.0])),
        "masked_rows": draw(st.sampled_from(scratch.MASKED_ROWS)),
    }
    if gqa:
        kwargs["enable_gqa"] = True
    kind = draw(st.sampled_from(["none", "bool", "float", "causal", "bottom-right"]))
    if kind == "causal":  # top-left tril(ones(L, S)); never empties a row
        kwargs["is_causal"] = True
    elif kind == "bottom-right":  # rows i < L - S are fully masked when L > S
        kwargs["attn_mask"] = scratch.causal_mask(L, S, "bottom-right")
    elif kind in ("bool", "float"):
        lead_shape = draw(st.sampled_from(["LS", "full", "broadcast"]))
        mask_lead = {"LS": (), "full": q_lead, "broadcast": tuple(1 for _ in q_lead[:1])}
        empty_row = draw(st.one_of(st.none(), st.integers(0, L - 1)))
        kwargs["attn_mask"] = make_mask(rng, kind, mask_lead[lead_shape] + (L, S), empty_row)
    return Case(dtype, query, key, value, kwargs)


def identity_values(key: list, S: int) -> list:
    """value = identity (S, S) under every leading index of `key`: attention then gives p."""
    eye = [[1.0 if i == j else 0.0 for j in range(S)] for i in range(S)]
    lead = shape(key)[:-2]
    out = eye
    for size in reversed(lead):
        out = [out] * size
    return out


def weights_bound(case: Case, weights: list) -> list:
    """Bound on |weights - truth|: the output bound of attention with value = identity."""
    S = shape(case.key)[-2]
    return tolerance(
        case.query, case.key, identity_values(case.key, S), weights,
        scale=case.kwargs.get("scale"), dtype=case.dtype,
        attn_mask=case.kwargs.get("attn_mask"), enable_gqa=case.kwargs.get("enable_gqa", False),
    )  # fmt: skip


def check_sdpa(backend_name: str, case: Case, need_weights: bool) -> None:
    """One backend, one case, one path: output (and weights) within the bound of the truth."""
    backend = backends.get(backend_name)
    want_out, want_w = scratch.scaled_dot_product_attention(
        case.query, case.key, case.value, **case.kwargs
    )
    result = backend.scaled_dot_product_attention(
        case.query, case.key, case.value, **case.kwargs, need_weights=need_weights,
        dtype=None if backend_name == "scratch" else case.dtype,
    )  # fmt: skip
    context = f"{backend_name} need_weights={need_weights} kernel={result.kernel} {case.label()}"
    assert result.kernel in backend.kernels, context
    if need_weights:
        assert result.kernel == "explicit", context
    else:
        assert result.weights is None, context
    assert dtype_name(result.output) == case.dtype, context
    bound = tolerance(
        case.query, case.key, case.value, want_w, scale=case.kwargs.get("scale"),
        dtype=case.dtype, attn_mask=case.kwargs.get("attn_mask"),
        enable_gqa=case.kwargs.get("enable_gqa", False),
    )  # fmt: skip
    assert_within("output", to_lists(result.output), want_out, bound, context)
    if need_weights:
        assert dtype_name(result.weights) == case.dtype, context
        assert_within("weights", to_lists(result.weights), want_w, weights_bound(case, want_w),
                      context)  # fmt: skip


@pytest.mark.parametrize("backend_name", AVAILABLE)
@settings(max_examples=150)
@given(data=st.data())
def test_sdpa_matches_ground_truth(backend_name: str, data: st.DataObject) -> None:
    case = data.draw(sdpa_cases(backends.get(backend_name).dtypes), label="case")
    for need_weights in (True, False):
        check_sdpa(backend_name, case, need_weights)


@pytest.mark.parametrize("backend_name", AVAILABLE)
@pytest.mark.parametrize("scale", [None, 0.0, -0.5])
@pytest.mark.parametrize(("L", "S"), [(3, 5), (5, 3)])
@pytest.mark.parametrize("kind", ["causal", "bool", "gqa-causal"])
def test_sdpa_edge_grid(backend_name: str, scale, L: int, S: int, kind: str) -> None:
    """Fixed 4-D cases the random search may miss: causal with scale <= 0 (torch 2.13's fused
    CPU kernel returns NaN there unless the backend works around it), L < S and L > S."""
    for dtype in backends.get(backend_name).dtypes:
        rng = random.Random(L * 10 + S)
        heads_kv = 1 if kind == "gqa-causal" else 2
        q = random_tensor(rng, (2, 2, L, 4), dtype)
        k = random_tensor(rng, (2, heads_kv, S, 4), dtype)
        v = random_tensor(rng, (2, heads_kv, S, 4), dtype)  # Ev = E: the fused kernel runs
        kwargs = {"scale": scale}
        if kind == "bool":
            kwargs["attn_mask"] = make_mask(rng, "bool", (L, S), None)
        else:
            kwargs["is_causal"] = True
            kwargs["enable_gqa"] = kind == "gqa-causal"
        for need_weights in (True, False):
            check_sdpa(backend_name, Case(dtype, q, k, v, kwargs), need_weights)


# ---------------------------------------------------------------- masked rows, both torch paths


@pytest.mark.parametrize("masked_rows", scratch.MASKED_ROWS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("mask_kind", ["bool", "float", "bottom-right"])
def test_torch_masked_rows_both_paths(masked_rows: str, dtype: str, mask_kind: str) -> None:
    pytest.importorskip("torch")
    check_masked_rows("torch-cpu", masked_rows, dtype, mask_kind)


def check_masked_rows(backend_name: str, masked_rows: str, dtype: str, mask_kind: str) -> None:
    """Fully masked rows: exact zeros, exact NaN rows, or weights exactly 1/S, on both paths."""
    rng = random.Random(7)
    L, S = 5, 3
    q = random_tensor(rng, (2, L, 4), dtype)
    k = random_tensor(rng, (2, S, 4), dtype)
    Ev = 2 if mask_kind == "bottom-right" else 4  # Ev == E: torch's fused kernel runs
    v = random_tensor(rng, (2, S, Ev), dtype)
    if mask_kind == "bottom-right":
        mask = scratch.causal_mask(L, S, "bottom-right")  # rows i < L - S are empty
    else:
        mask = make_mask(rng, mask_kind, (L, S), 3)
        mask[0] = [True] * S if mask_kind == "bool" else [0.0] * S
    empty = [i for i, row in enumerate(mask) if all(a is False or a == -math.inf for a in row)]
    assert empty == [0, 1] if mask_kind == "bottom-right" else 3 in empty
    case = Case(dtype, q, k, v, {"attn_mask": mask, "masked_rows": masked_rows})
    for need_weights in (True, False):
        result = backends.get(backend_name).scaled_dot_product_attention(
            q, k, v, attn_mask=mask, masked_rows=masked_rows, need_weights=need_weights,
            dtype=dtype,
        )  # fmt: skip
        out = to_lists(result.output)
        for b in range(2):
            for i in range(L):
                row = out[b][i]
                if i not in empty:
                    assert all(math.isfinite(x) for x in row), (need_weights, b, i, row)
                elif masked_rows == "zero":
                    assert row == [0.0] * Ev, (need_weights, b, i, row)
                elif masked_rows == "nan":
                    assert all(math.isnan(x) for x in row), (need_weights, b, i, row)
        if need_weights:
            w = to_lists(result.weights)
            fill = {"zero": 0.0, "uniform": round_to(1.0 / S, dtype)}.get(masked_rows)
            for b in range(2):
                for i in empty:
                    if fill is None:
                        assert all(math.isnan(x) for x in w[b][i])
                    else:
                        assert w[b][i] == [fill] * S, (b, i, w[b][i])
        check_sdpa(backend_name, case, need_weights)  # "uniform": output = mean of v, in bound


# ---------------------------------------------------------------- traces, step by step


def _np():
    """NumPy for the bound arithmetic of traces (skips cleanly without it)."""
    return pytest.importorskip("numpy")


def attention_bounds(q, k, v, eq, ek, ev, masked, p, scale, float_mask, dtype):
    """Running error bound for one attention on (..., L, E) float64 arrays (kv already expanded).

    q, k, v are the true inputs and eq, ek, ev bounds on the backend's input errors; masked and p
    are the true masked scores and weights. With u the accumulation unit roundoff, u_s the
    storage one (0 unless float16/bfloat16) and G(n) = g(n, u) + g(n, 2^-53) (backend plus ground
    truth), per element:
      scores: |eq| @ (|k|+ek)^T + |q| @ ek^T + G(E+1) (|q|+eq) @ (|k|+ek)^T
      scaled: |scale| e_scores + G(1) (|scaled| + |scale| e_scores)
      masked: e_scaled (+ G(1) (|masked| + e_scaled) for a float mask); exact where -inf
      weights: p * ((1 + expm1(2 delta_i)) (1 + G(S + 2m)) (1 + u_s) - 1) + underflow floor,
               delta_i = max over live j of e_masked + G(2) 2 max |masked_i.| (max subtraction)
      output: (e_w @ (|v|+ev) + p @ ev + G(S+1) (p+e_w) @ (|v|+ev)) (1 + u_s) + u_s |output|
    Each stored (displayed) step adds u_s times its size. Returns the bounds by step name.
    """
    np = _np()
    ua = UNIT_ROUNDOFF[ACCUMULATE[dtype]]
    us = 0.0 if ACCUMULATE[dtype] == dtype else UNIT_ROUNDOFF[dtype]

    def G(n: float) -> float:
        return gamma(n, ua) + gamma(n, U64)

    E, S = q.shape[-1], k.shape[-2]
    aq, ak, av = np.abs(q), np.abs(k), np.abs(v)
    kt = np.swapaxes(ak + ek, -1, -2)
    # step 1: scores = q @ k^T           (..., L, E) @ (..., E, S) -> (..., L, S)
    e_scores = eq @ kt + aq @ np.swapaxes(ek, -1, -2) + G(E + 1) * ((aq + eq) @ kt)
    scores = np.abs(q @ np.swapaxes(k, -1, -2))
    # step 2: scaled = scores * scale
    e_scaled = abs(scale) * e_scores + G(1) * (abs(scale) * (scores + e_scores))
    # step 3: masked (-inf positions are compared exactly, bound 0 there)
    live = np.isfinite(masked)
    a_masked = np.where(live, np.abs(masked), 0.0)
    e_masked = e_scaled + (G(1) * (a_masked + e_scaled) if float_mask else 0.0)
    e_masked = np.where(live, e_masked, 0.0)
    # step 4: weights = softmax(masked)
    delta = np.max(e_masked, axis=-1, keepdims=True) + G(2) * 2 * np.max(
        a_masked, -1, keepdims=True
    )
    soft = np.expm1(np.minimum(2 * delta, 700.0))
    p0 = np.where(np.isnan(p), 0.0, p)
    acc = ACCUMULATE[dtype]
    w_floor = 2 * EXP_ULPS * SMALLEST_SUBNORMAL[acc] + (SMALLEST_SUBNORMAL[dtype] if us else 0)
    e_w = p0 * ((1 + soft) * (1 + G(S + 4 * EXP_ULPS)) * (1 + us) - 1) + w_floor
    # step 5: output = weights @ v        (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    out = np.abs(p0 @ v)
    e_out = (e_w @ (av + ev) + p0 @ ev + G(S + 1) * ((p0 + e_w) @ (av + ev))) * (1 + us)
    e_out = (
        e_out
        + us * out
        + (S + 1) * SMALLEST_SUBNORMAL[acc]
        + (SMALLEST_SUBNORMAL[dtype] if us else 0)
    )
    shown = {
        "scores": e_scores + us * (scores + e_scores),
        "scaled": e_scaled + us * (abs(scale) * scores + e_scaled),
        "masked": e_masked + us * (a_masked + e_masked),
        "weights": e_w,
        "output": e_out,
    }
    return shown


def _projection_bound(np, x, w, b, dtype):
    """Bound on a stored projection x @ w + b: ((1 + G(d+2))(1 + u_s) - 1)(|x| @ |w| + |b|)."""
    if w is None:
        return np.zeros_like(x)
    ua = UNIT_ROUNDOFF[ACCUMULATE[dtype]]
    us = 0.0 if ACCUMULATE[dtype] == dtype else UNIT_ROUNDOFF[dtype]
    d = w.shape[0]
    rel = (1 + gamma(d + 2, ua) + gamma(d + 2, U64)) * (1 + us) - 1
    size = np.abs(x) @ np.abs(w) + (0.0 if b is None else np.abs(b))
    return rel * size


def trace_bounds(ref: scratch.Trace, kwargs: dict, dtype: str) -> dict:
    """Per-step bounds on |backend step - ground-truth step| for a trace of `kwargs`."""
    np = _np()
    A = {name: np.array(ref[name].tolist(), dtype=float) for name in ref.names()}

    def arr(name):
        value = kwargs.get(name)
        return None if value is None else np.array(value, dtype=float)

    H, Hkv = ref.num_heads, ref.num_kv_heads
    multi = "head_outputs" in A
    bounds = {
        name: np.zeros_like(A[name]) for name in ("x", "key_input", "value_input") if name in A
    }
    for name in ("w_q", "w_k", "w_v", "w_o"):
        if name in A:
            bounds[name] = np.zeros_like(A[name])
    src_k = A.get("key_input", A["x"])
    src_v = A.get("value_input", src_k)
    for name, src in (("q", A["x"]), ("k", src_k), ("v", src_v)):
        bounds[name] = _projection_bound(np, src, arr(f"w_{name}"), arr(f"b_{name}"), dtype)

    def heads(m, n):  # (rows, n*d) -> (H, rows, d), kv heads repeated for GQA
        out = np.stack(np.split(m, n, axis=-1))
        return np.repeat(out, H // n, axis=0)

    q, k, v = heads(A["q"], H), heads(A["k"], Hkv), heads(A["v"], Hkv)
    eq, ek, ev = heads(bounds["q"], H), heads(bounds["k"], Hkv), heads(bounds["v"], Hkv)
    masked = A["masked"] if multi else A["masked"][None]
    p = A["weights"] if multi else A["weights"][None]
    float_mask = ref.source.mask == "float"
    att = attention_bounds(q, k, v, eq, ek, ev, masked, p, ref.scale, float_mask, dtype)
    for name in ("scores", "scaled", "masked", "weights"):
        bounds[name] = att[name] if multi else att[name][0]
    if not multi:
        bounds["output"] = att["output"][0]
        return bounds
    bounds["head_outputs"] = att["output"]
    e_concat = np.concatenate(list(att["output"]), axis=-1)  # (H, L, dv) -> (L, H*dv)
    if "concat" not in A:
        bounds["output"] = e_concat
        return bounds
    bounds["concat"] = e_concat
    wo, bo = arr("w_o"), arr("b_o")
    ua = UNIT_ROUNDOFF[ACCUMULATE[dtype]]
    us = 0.0 if ACCUMULATE[dtype] == dtype else UNIT_ROUNDOFF[dtype]
    n = wo.shape[0]
    rel = (1 + gamma(n + 2, ua) + gamma(n + 2, U64)) * (1 + us) - 1
    size = (np.abs(A["concat"]) + e_concat) @ np.abs(wo) + (0.0 if bo is None else np.abs(bo))
    bounds["output"] = e_concat @ np.abs(wo) + rel * size
    return bounds


def assert_traces_match(trace: scratch.Trace, ref: scratch.Trace, kwargs: dict, dtype: str,
                        backend_name: str) -> None:  # fmt: skip
    """Every field, then every step: name, formula, axes, shape, then values within bound."""
    context = f"{backend_name} dtype={dtype} {sorted(kwargs)}"
    assert trace.names() == ref.names(), context
    for field_name in ("tokens", "key_tokens", "num_heads", "num_kv_heads", "allowed"):
        assert getattr(trace, field_name) == getattr(ref, field_name), (field_name, context)
    assert trace.scale == ref.scale, context
    ran = dict(backend=backend_name, dtype=dtype, kernel="explicit")
    assert trace.source == replace(ref.source, **ran), context
    assert trace.described() == dict(ref.described(), **ran), context
    for step, want in zip(trace, ref, strict=True):
        assert (step.formula, step.axes) == (want.formula, want.axes), (step.name, context)
        assert step.shape == want.shape, f"step {step.name}: shape {step.shape} != {want.shape}"
        assert dtype_name(step.value) == dtype, (step.name, context)
    # each step against its own bound, given the differences of the steps it reads (local);
    # 16-bit: compare_traces' "masked" bound leaves out rounding the stored step (see report)
    if dtype in ("float32", "float64"):
        for check in compare_traces(trace, ref, dtype=dtype):
            assert check.ok, f"step {check.name}: {check.message} ({context})"
    # and each step against the running bound from the inputs alone (global, independent code)
    bounds = trace_bounds(ref, kwargs, dtype)
    for step, want in zip(trace, ref, strict=True):
        assert_within(f"step {step.name}", step.tolist(), want.tolist(), bounds[step.name].tolist(),
                      context)  # fmt: skip


@st.composite
def trace_cases(draw, dtypes=ALL_DTYPES) -> tuple[str, dict]:
    """Self- and cross-attention worked examples: heads, GQA, projections, biases, masks."""
    dtype = draw(st.sampled_from(dtypes))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    L, d_model = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    H = draw(st.sampled_from([1, 2]))
    Hkv = draw(st.sampled_from([h for h in (1, 2) if H % h == 0]))
    d_head, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kwargs: dict = {"x": random_tensor(rng, (L, d_model), dtype), "num_heads": H}
    S = L
    if draw(st.booleans()):  # cross-attention: keys and values from another sequence
        S = draw(st.integers(1, 4))
        kwargs["key"] = random_tensor(rng, (S, d_model + 1), dtype)
        if draw(st.booleans()):
            kwargs["value"] = random_tensor(rng, (S, 2), dtype)
    project = H > 1 or "key" in kwargs or draw(st.booleans())
    if project:
        widths = {"q": H * d_head, "k": Hkv * d_head, "v": Hkv * d_v}
        inputs = {"q": d_model, "k": d_model + ("key" in kwargs), "v": d_model + ("key" in kwargs)}
        if "value" in kwargs:
            inputs["v"] = 2
        kwargs["num_kv_heads"] = Hkv
        biases = draw(st.booleans())
        for n in "qkv":
            kwargs[f"w_{n}"] = random_tensor(rng, (inputs[n], widths[n]), dtype, 1.0)
            if biases:
                kwargs[f"b_{n}"] = random_tensor(rng, (widths[n],), dtype, 1.0)
        if draw(st.booleans()):
            kwargs["w_o"] = random_tensor(rng, (H * d_v, 3), dtype, 1.0)
            if biases:
                kwargs["b_o"] = random_tensor(rng, (3,), dtype, 1.0)
    kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    if kind == "causal":
        kwargs["is_causal"] = True
    elif kind != "none":
        empty = draw(st.one_of(st.none(), st.integers(0, L - 1)))
        kwargs["attn_mask"] = make_mask(rng, kind, (L, S), empty)
    kwargs["masked_rows"] = draw(st.sampled_from(scratch.MASKED_ROWS))
    kwargs["scale"] = draw(st.sampled_from([None, 0.0, -0.5, 0.75]))
    return dtype, kwargs


@pytest.mark.parametrize("backend_name", AVAILABLE)
@settings(max_examples=100)
@given(data=st.data())
def test_trace_matches_ground_truth(backend_name: str, data: st.DataObject) -> None:
    dtype, kwargs = data.draw(trace_cases(backends.get(backend_name).dtypes), label="case")
    ref = scratch.trace_attention(**kwargs)
    options = {} if backend_name == "scratch" else {"dtype": dtype}
    trace = backends.get(backend_name).trace_attention(**kwargs, **options)
    assert_traces_match(trace, ref, kwargs, dtype, backend_name)


# ---------------------------------------------------------------- multi-head attention


@pytest.mark.parametrize("backend_name", AVAILABLE)
@given(data=st.data(), batch=st.integers(1, 2))
def test_multi_head_matches_ground_truth(backend_name: str, data: st.DataObject, batch: int):
    """Batched multi-head attention: each batch entry within the bound of its worked example."""
    dtype, kwargs = data.draw(trace_cases(backends.get(backend_name).dtypes), label="case")
    if "w_q" not in kwargs:
        return  # no projections: that is a trace-only case
    kw = dict(kwargs)
    x = kw.pop("x")
    key = kw.pop("key", x)
    value = kw.pop("value", key)
    rng = random.Random(batch)
    xs = [x] + [random_tensor(rng, shape(x), dtype) for _ in range(batch - 1)]
    ks = [key if key is not x else xs[b] for b in range(batch)]
    vs = [value if value is not key else ks[b] for b in range(batch)]
    w = {n: kw.pop(n) for n in ("w_q", "w_k", "w_v")}
    options = {} if backend_name == "scratch" else {"dtype": dtype}
    for need_weights in (True, False):
        result = backends.get(backend_name).multi_head_attention(
            xs, ks, vs, **w, **kw, need_weights=need_weights, **options
        )
        out, weights = to_lists(result.output), to_lists(result.weights)
        for b in range(batch):
            trace_kwargs = dict(kwargs, x=xs[b])
            if "key" in kwargs:
                trace_kwargs["key"] = ks[b]
            ref = scratch.trace_attention(**trace_kwargs)
            bounds = trace_bounds(ref, trace_kwargs, dtype)
            context = f"{backend_name} need_weights={need_weights} batch {b} dtype={dtype}"
            assert_within("output", out[b], ref["output"].tolist(), bounds["output"].tolist(),
                          context)  # fmt: skip
            if need_weights:
                want = ref["weights"].tolist()
                bound = bounds["weights"].tolist()
                if ref.num_heads == 1 and "head_outputs" not in ref:
                    want, bound = [want], [bound]  # single-head traces drop the head axis
                assert_within("weights", weights[b], want, bound, context)
            else:
                assert weights is None


# ---------------------------------------------------------------- registry


def test_available_lists_what_imports() -> None:
    names = backends.available()
    assert names[0] == "scratch"
    assert set(names) <= set(backends.KNOWN)
    for name in names:
        backend = backends.get(name)
        assert backend.name == name
        assert "float64" in backend.dtypes
        assert callable(backend.trace_attention)


def test_get_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError, match=r"name: unknown backend 'cupy'.*scratch"):
        backends.get("cupy")
    with pytest.raises(TypeError, match="name"):
        backends.get(3)


def test_get_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(backends, "_probes", {})
    monkeypatch.setattr(backends, "_backends", {})
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a)
    )
    assert "torch-cpu" not in backends.available()
    with pytest.raises(
        ValueError, match=r"name: backend 'torch' is unavailable.*torch is not inst"
    ):
        backends.get("torch")


def test_torch_alias_and_cuda_reason() -> None:
    torch = pytest.importorskip("torch")
    picked = backends.get("torch")
    assert picked.name == ("torch-cuda" if torch.cuda.is_available() else "torch-cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"torch-cuda.*cuda.is_available\(\) is False"):
            backends.get("torch-cuda")


def test_backend_is_frozen() -> None:
    backend = backends.get("scratch")
    with pytest.raises(AttributeError, match="cannot assign"):
        backend.name = "other"  # type: ignore[misc]
    assert backend.kernels == ("explicit",)


def test_import_is_stdlib_only() -> None:
    import subprocess
    import sys

    code = (
        "import sys, scratch, scratch.backends; print(sorted({'numpy', 'torch'} & {*sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_scratch_backend_float64_only_and_no_weights() -> None:
    backend = backends.get("scratch")
    q = [[1.0, 2.0], [0.5, -1.0]]
    result = backend.scaled_dot_product_attention(q, q, q, need_weights=False)
    assert result.weights is None and result.kernel == "explicit"
    assert result.output == scratch.scaled_dot_product_attention(q, q, q)[0]
    with pytest.raises(ValueError, match="dtype"):
        backend.scaled_dot_product_attention(q, q, q, dtype="float32")


# ---------------------------------------------------------------- torch backend: inputs and errors


def _torch_backend():
    """The torch-cpu backend (skips cleanly without torch)."""
    pytest.importorskip("torch")
    return backends.get("torch-cpu")


def test_torch_result_dtypes_follow_inputs() -> None:
    import numpy as np
    import torch

    tb = _torch_backend()
    q = [[1.0, 2.0], [0.5, -1.0], [0.0, 3.0]]
    assert tb.scaled_dot_product_attention(q, q, q).output.dtype == torch.float64
    as32 = np.array(q, dtype=np.float32)
    for need_weights in (True, False):
        r = tb.scaled_dot_product_attention(as32, as32, as32, need_weights=need_weights)
        assert r.output.dtype == torch.float32 and r.output.device.type == "cpu"
    half = torch.tensor(q, dtype=torch.float16)
    r = tb.scaled_dot_product_attention(half, half, half)
    assert (r.output.dtype, r.weights.dtype) == (torch.float16, torch.float16)
    ints = torch.tensor([[1, 2], [0, -1]])
    assert tb.scaled_dot_product_attention(ints, ints, ints).output.dtype == torch.float64
    r = tb.scaled_dot_product_attention(q, q, q, dtype="bfloat16", need_weights=False)
    assert r.output.dtype == torch.bfloat16 and r.kernel == "torch-sdpa"


BAD_INPUTS = {
    "ragged query": (([[1.0, 2.0], [3.0]], [[1.0, 2.0]], [[1.0]]), {}),
    "text in key": (([[1.0, 2.0]], [[1.0, "x"]], [[1.0]]), {}),
    "bool in value": (([[1.0, 2.0]], [[1.0, 2.0]], [[True]]), {}),
    "key width": (([[1.0, 2.0]], [[1.0, 2.0, 3.0]], [[1.0]]), {}),
    "value length": (([[1.0, 2.0]], [[1.0, 2.0]], [[1.0], [2.0]]), {}),
    "int mask": (([[1.0, 2.0]], [[1.0, 2.0]], [[1.0]]), {"attn_mask": [[1]]}),
    "mask shape": (([[1.0, 2.0]], [[1.0, 2.0]], [[1.0]]), {"attn_mask": [[True, False]]}),
    "mask and causal": (([[1.0]], [[1.0]], [[1.0]]), {"attn_mask": [[True]], "is_causal": True}),
    "scale inf": (([[1.0]], [[1.0]], [[1.0]]), {"scale": math.inf}),
    "scale text": (([[1.0]], [[1.0]], [[1.0]]), {"scale": "big"}),
    "dropout 1": (([[1.0]], [[1.0]], [[1.0]]), {"dropout_p": 1.0}),
    "policy": (([[1.0]], [[1.0]], [[1.0]]), {"masked_rows": "skip"}),
    "gqa heads": (([[[1.0]]] * 3, [[[1.0]]] * 2, [[[1.0]]] * 2), {"enable_gqa": True}),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_torch_errors_match_ground_truth(name: str) -> None:
    """Bad list input raises the ground truth's exception type and message, word for word."""
    tb = _torch_backend()
    args, kwargs = BAD_INPUTS[name]
    with pytest.raises((ValueError, TypeError), match=r"^[a-z_]+\b") as truth:
        scratch.scaled_dot_product_attention(*args, **kwargs)
    for need_weights in (True, False):
        with pytest.raises(truth.type, match=re.escape(str(truth.value))) as ours:
            tb.scaled_dot_product_attention(*args, **kwargs, need_weights=need_weights)
        assert str(ours.value) == str(truth.value)


@pytest.mark.parametrize("name", ["scratch", "torch-cpu"])
def test_need_weights_must_be_a_bool(name: str) -> None:
    """need_weights=1 is refused with the shared check_flag message, not taken as truthy."""
    if name not in backends.available():
        pytest.skip(f"{name} is not available here")
    backend = backends.get(name)
    with pytest.raises(TypeError, match="^need_weights: expected True or False, found int 1$"):
        backend.scaled_dot_product_attention([[1.0]], [[1.0]], [[1.0]], need_weights=1)


TRACE_BAD_HEADS = {
    "x width": {"x": [[1.0, 2.0, 3.0]] * 2, "num_heads": 2},
    "value width": {"x": [[1.0, 2.0]] * 2, "value": [[1.0, 2.0, 3.0]] * 2, "num_heads": 2},
}


@pytest.mark.parametrize("name", sorted(TRACE_BAD_HEADS))
def test_torch_trace_refuses_widths_that_do_not_split_into_heads(name: str) -> None:
    """No projections and a width that num_heads does not divide: the truth's ValueError."""
    tb = _torch_backend()
    kwargs = TRACE_BAD_HEADS[name]
    with pytest.raises(ValueError, match=r"^[a-z_]+\b") as truth:
        scratch.trace_attention(**kwargs)
    # this was a RuntimeError from torch's reshape
    with pytest.raises(ValueError, match=re.escape(str(truth.value))) as ours:
        tb.trace_attention(**kwargs)
    assert str(ours.value) == str(truth.value)


def test_torch_rejects_bad_tensors_naming_the_argument() -> None:
    import torch

    tb = _torch_backend()
    q = torch.ones(2, 3)
    with pytest.raises(TypeError, match="query.*bool"):
        tb.scaled_dot_product_attention(q.bool(), q, q)
    with pytest.raises(TypeError, match="attn_mask.*ambiguous"):
        tb.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="dtype: expected None or one of"):
        tb.scaled_dot_product_attention(q, q, q, dtype="int8")
    with pytest.raises(ValueError, match="key"):
        tb.scaled_dot_product_attention(q, torch.ones(2, 4), q)
    with pytest.raises(TypeError, match="rng"):
        tb.scaled_dot_product_attention(q, q, q, dropout_p=0.5, rng="seed")


def test_torch_dropout_explicit_path() -> None:
    """Seeded dropout: reproducible, each weight 0 or p0/(1-p), and output == weights @ v."""
    tb = _torch_backend()
    rng = random.Random(3)
    q, k, v = (random_tensor(rng, (4, 24, 3), "float64") for _ in range(3))
    p = 0.2
    first = tb.scaled_dot_product_attention(q, k, v, dropout_p=p, rng=11)
    again = tb.scaled_dot_product_attention(q, k, v, dropout_p=p, rng=11)
    assert first.weights.equal(again.weights) and first.output.equal(again.output)
    kept_w = to_lists(first.weights)
    _, p0 = scratch.scaled_dot_product_attention(q, k, v)
    case = Case("float64", q, k, v)
    bound = weights_bound(case, p0)
    flat_w, flat_p0, flat_b = flat(kept_w), flat(p0), flat(bound)
    dropped = sum(w == 0.0 for w in flat_w) / len(flat_w)  # 2304 weights, sd of the share 0.008
    assert abs(dropped - p) < 0.05, f"dropped {dropped:.3f} of the weights, expected about {p}"
    for w, w0, b in zip(flat_w, flat_p0, flat_b, strict=True):
        assert w == 0.0 or abs(w * (1 - p) - w0) <= b + 2 * U64 * w0, (w, w0)
    # the returned weights are the dropped ones: output == weights @ v (float64 bound)
    want = [scratch.matmul(wb, vb) for wb, vb in zip(kept_w, v, strict=True)]
    bound = tolerance(q, k, v, kept_w, dtype="float64")  # uses |weights| @ |v| like any p
    assert_within("output", to_lists(first.output), want, bound, "dropout output")


def test_torch_dropout_fused_path_is_seeded_and_leaves_global_rng() -> None:
    import torch

    tb = _torch_backend()
    q = torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    state = torch.random.get_rng_state()
    a = tb.scaled_dot_product_attention(q, q, q, dropout_p=0.5, rng=5, need_weights=False)
    b = tb.scaled_dot_product_attention(q, q, q, dropout_p=0.5, rng=5, need_weights=False)
    c = tb.scaled_dot_product_attention(q, q, q, dropout_p=0.5, rng=6, need_weights=False)
    assert torch.random.get_rng_state().equal(state)
    assert a.output.equal(b.output) and not a.output.equal(c.output)
    gen = torch.Generator().manual_seed(5)
    d = tb.scaled_dot_product_attention(q, q, q, dropout_p=0.5, rng=gen, need_weights=False)
    assert d.kernel == "torch-sdpa" and d.output.shape == (2, 8, 4)


@pytest.mark.parametrize("need_weights", [True, False])
def test_torch_float16_keeps_large_finite_mask_values_finite(need_weights: bool) -> None:
    """A -1e9 mask entry means 'very unlikely', not 'masked': in float16 it must not become -inf.

    Adding -1e9 in float32 wipes out the scores' differences, so no tight bound applies to row 0;
    what must hold is that it is still a weighted average of the value rows (inside their range),
    not the zero row of a fully masked one."""
    tb = _torch_backend()
    q = [[0.5, -1.0], [1.0, 0.25]]
    v = [[1.0, 2.0], [3.0, 4.0]]  # every average of these rows is far from 0
    mask = [[-1e9, -1e9], [0.0, -1e9]]
    got = tb.scaled_dot_product_attention(
        q, q, v, attn_mask=mask, dtype="float16", need_weights=need_weights
    )
    row = to_lists(got.output)[0]
    assert 1.0 <= row[0] <= 3.0 and 2.0 <= row[1] <= 4.0, row

"""The torch backend on a CUDA GPU: the key conformance checks on device "cuda".

Skipped cleanly (with the reason) when torch is missing or no GPU is visible. The hypothesis
conformance tests in test_backends_conformance.py also cover "torch-cuda" whenever
`scratch.backends.available()` lists it; these add device placement, both kernels per dtype,
the masked_rows policies, traces and seeded dropout on the GPU.
"""

from __future__ import annotations

import random

import pytest

import scratch
import scratch.backends as backends

torch = pytest.importorskip("torch")

from test_backends_conformance import (  # noqa: E402  (after the importorskip on purpose)
    ALL_DTYPES,
    Case,
    assert_traces_match,
    check_masked_rows,
    check_sdpa,
    make_mask,
    random_tensor,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA GPU (torch.cuda.is_available() is False)"
    ),
]


def test_cuda_backend_is_listed_and_picked() -> None:
    assert "torch-cuda" in backends.available()
    assert backends.get("torch").name == "torch-cuda"


def test_results_live_on_the_gpu() -> None:
    cuda = backends.get("torch-cuda")
    q = torch.randn(2, 3, 4, dtype=torch.float32)  # a CPU tensor is moved to the device
    for need_weights in (True, False):
        result = cuda.scaled_dot_product_attention(q, q, q, need_weights=need_weights)
        assert result.output.device.type == "cuda"
        assert result.output.dtype == torch.float32
        assert result.kernel == ("explicit" if need_weights else "torch-sdpa")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("kind", ["none", "bool", "float", "causal", "causal-scale-0", "gqa"])
@pytest.mark.parametrize(("L", "S"), [(3, 6), (6, 3)])
def test_sdpa_matches_ground_truth_on_cuda(dtype: str, kind: str, L: int, S: int) -> None:
    rng = random.Random(f"{dtype}{kind}{L}{S}")
    heads_kv = 1 if kind == "gqa" else 2
    q = random_tensor(rng, (2, 2, L, 8), dtype)
    k = random_tensor(rng, (2, heads_kv, S, 8), dtype)
    v = random_tensor(rng, (2, heads_kv, S, 8), dtype)
    kwargs: dict = {}
    if kind in ("bool", "float"):
        kwargs["attn_mask"] = make_mask(rng, kind, (L, S), 1)
        kwargs["masked_rows"] = "uniform"
    elif kind.startswith("causal"):
        kwargs["is_causal"] = True
        kwargs["scale"] = 0.0 if kind.endswith("0") else None
    elif kind == "gqa":
        kwargs["enable_gqa"] = True
    for need_weights in (True, False):
        check_sdpa("torch-cuda", Case(dtype, q, k, v, kwargs), need_weights)


@pytest.mark.parametrize("masked_rows", scratch.MASKED_ROWS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("mask_kind", ["bool", "float", "bottom-right"])
def test_masked_rows_on_cuda(masked_rows: str, dtype: str, mask_kind: str) -> None:
    check_masked_rows("torch-cuda", masked_rows, dtype, mask_kind)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_trace_on_cuda(dtype: str) -> None:
    rng = random.Random(dtype)
    kwargs = {
        "x": random_tensor(rng, (4, 3), dtype),
        "w_q": random_tensor(rng, (3, 4), dtype, 1.0),
        "w_k": random_tensor(rng, (3, 2), dtype, 1.0),
        "w_v": random_tensor(rng, (3, 2), dtype, 1.0),
        "w_o": random_tensor(rng, (4, 3), dtype, 1.0),
        "num_heads": 2,
        "num_kv_heads": 1,
        "is_causal": True,
    }
    ref = scratch.trace_attention(**kwargs)
    trace = backends.get("torch-cuda").trace_attention(**kwargs, dtype=dtype)
    assert trace["weights"].value.device.type == "cuda"
    assert_traces_match(trace, ref, kwargs, dtype, "torch-cuda")


def test_seeded_dropout_on_cuda() -> None:
    cuda = backends.get("torch-cuda")
    q = torch.randn(2, 16, 8, dtype=torch.float32, device="cuda")
    for need_weights in (True, False):
        a = cuda.scaled_dot_product_attention(q, q, q, dropout_p=0.3, rng=4,
                                              need_weights=need_weights)  # fmt: skip
        b = cuda.scaled_dot_product_attention(q, q, q, dropout_p=0.3, rng=4,
                                              need_weights=need_weights)  # fmt: skip
        assert a.output.equal(b.output)

"""An Options.variant an SDPA pipeline cannot compute yet is refused by name, never ignored.

The ground truth's SDPA (forward, backward), the NumPy backend (explicit, chunked,
both backwards) and the torch backend (explicit, fused, both backwards) compute is_causal
(Causal(0)) and attn_mask (GivenMask); a window, another diagonal or a combination with either
raises NotImplementedError naming `variant` and the pipeline. scratch.flex_attention computes
them (tests/test_flex_variants.py).
"""

import random

import pytest

from scratch.backward import sdpa as backward
from scratch.core import attention
from scratch.core.options import Options
from scratch.variants import Causal, SlidingWindow, Softcap

L, S, E = 4, 5, 3
UNSUPPORTED = [SlidingWindow(1, 0), Causal(1), Softcap(5.0)]


def _data(seed: int = 0) -> tuple[list, list, list, list]:
    rng = random.Random(seed)
    m = lambda r, c: [[rng.uniform(-1, 1) for _ in range(c)] for _ in range(r)]  # noqa: E731
    return m(L, E), m(S, E), m(S, E), m(L, E)


def _pipelines():
    """(name in the message, call(q, k, v, dO, options)) for every SDPA pipeline."""
    found = [
        ("the ground truth", lambda q, k, v, g, o: attention.forward(q, k, v, o)),
        ("the ground truth", lambda q, k, v, g, o: backward.gradients_of(q, k, v, g, o)),
    ]
    np = pytest.importorskip("numpy")
    from scratch.backends import numpy_backend, numpy_backward

    a = np.asarray
    for weights in (True, False):
        found.append(("numpy", lambda q, k, v, g, o, w=weights: numpy_backend.attention_result(
            a(q), a(k), a(v), o, need_weights=w)))  # fmt: skip
    for kernel in ("explicit", "tiled"):
        found.append(("numpy", lambda q, k, v, g, o, n=kernel: numpy_backward.gradients_of(
            a(q), a(k), a(v), a(g), o, kernel=n)))  # fmt: skip
    pytest.importorskip("torch")
    from scratch.backends import torch_backend, torch_backward

    for weights in (True, False):
        found.append(("torch", lambda q, k, v, g, o, w=weights: torch_backend.attention_result(
            q, k, v, o, need_weights=w)))  # fmt: skip
    for kernel in ("autograd", "explicit"):
        found.append(("torch", lambda q, k, v, g, o, n=kernel: torch_backward.gradients_of(
            q, k, v, g, o, kernel=n)))  # fmt: skip
    return found


@pytest.mark.parametrize("variant", UNSUPPORTED, ids=repr)
@pytest.mark.parametrize("with_causal", [False, True])
def test_every_pipeline_refuses_what_it_cannot_compute(variant, with_causal):
    q, k, v, g = _data()
    options = Options(is_causal=with_causal, variant=variant)
    for name, call in _pipelines():
        with pytest.raises(NotImplementedError, match=rf"variant: .*{name}.*computes is_causal"):
            call(q, k, v, g, options)


@pytest.mark.parametrize(
    "options", [Options(), Options(is_causal=True), Options(variant=Causal(0))]
)
def test_what_they_compute_still_runs(options):
    """Causal(0) given as `variant` is is_causal: the same numbers, bit for bit."""
    q, k, v, g = _data(1)
    expected = attention.forward(q, k, v, Options(is_causal=options.attention_variant is not None))
    assert attention.forward(q, k, v, options) == expected
    for _, call in _pipelines():
        call(q, k, v, g, options)  # runs: no refusal

"""The benchmark's contenders: every attention kernel here as a zero-argument call on shared inputs.

Used by scratch.bench.table; the plain-Python kernel limit and NumPy's full-size matmuls are
reference rows, not kernels of the project.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import mul

from scratch.bench.pure_backward import backward_contenders

E = 64
PYTHON_MAX_L = 256  # plain-Python rows: L = 256 takes about a second per run
EXPLICIT_MAX_L = 4096  # explicit kernels build (L, S) matrices: 4 GiB each at 32768


def python_kernel_limit(q: list, k: list, v: list, weights: list) -> list:
    """Only the two matrix products, as fsum dot products: scores and weights @ v."""
    scores = [[math.fsum(map(mul, q_i, k_j)) for k_j in k] for q_i in q]  # (L, E) @ (E, S)
    v_t = list(zip(*v))  # (Ev, S): columns of v
    output = [[math.fsum(map(mul, w_i, v_c)) for v_c in v_t] for w_i in weights]  # (L, S) @ (S, Ev)
    return [scores, output]


FLOOR_ROW = "numpy matmuls alone, full size (reference)"
NOISE_ROW = "numpy chunked, same call again (noise floor)"
NOISE_L = 4096  # where the NumPy goal's call is also timed as a second row, against itself


def numpy_matmuls_alone(q, k, v) -> Callable[[], object]:
    """Just q @ k^T and scores @ v into preallocated full-size buffers, no softmax, on
    OpenBLAS's own threads: a reference, not a ceiling (a tiled kernel with one worker per core
    keeps its tiles in cache and runs its products faster than these)."""
    import numpy as np

    scores = np.empty((q.shape[0], k.shape[0]), dtype=q.dtype)  # (L, S)
    output = np.empty((q.shape[0], v.shape[1]), dtype=q.dtype)  # (L, Ev)

    def run() -> np.ndarray:
        np.matmul(q, k.T, out=scores)  # (L, E) @ (E, S) -> (L, S)
        return np.matmul(scores, v, out=output)  # (L, S) @ (S, Ev) -> (L, Ev)

    return run


def contenders(L: int, device: str) -> list[tuple[str, Callable[[], object], str]]:
    """(name, zero-argument call, memory method) for every kernel that runs at this L."""
    import numpy as np

    import scratch
    from scratch import backends

    rng = np.random.default_rng(L)
    # (batch 1, head 1, L, E): torch's fused CPU kernel wants 4-D input (2-D falls back to
    # its math kernel, about 4x slower at L = 4096); NumPy treats the leading 1s as a loop
    q, k, v = (rng.standard_normal((1, 1, L, E), dtype=np.float32) for _ in range(3))
    numpy_be = backends.get("numpy")
    rows: list[tuple[str, Callable[[], object], str]] = []

    def add(name: str, fn: Callable[[], object], memory: str = "tracemalloc") -> None:
        rows.append((name, fn, memory))

    if device == "cpu" and L <= PYTHON_MAX_L:
        lists = [a[0, 0].tolist() for a in (q, k, v)]  # the same float32 values, as floats
        # the ground truth's own weights, so the limit multiplies exactly the same matrices
        weights = scratch.scaled_dot_product_attention(*lists)[1]
        add("ground truth (scratch)", lambda: scratch.scaled_dot_product_attention(*lists))
        add("pure-Python kernel limit", lambda: python_kernel_limit(*lists, weights))
        dO = rng.standard_normal((L, E), dtype=np.float32).tolist()  # the backward's grad_output
        rows += backward_contenders(*lists, dO)
    if device == "cpu":
        if L <= EXPLICIT_MAX_L:
            add("numpy explicit", lambda: numpy_be.scaled_dot_product_attention(q, k, v))

        def chunked() -> object:
            return numpy_be.scaled_dot_product_attention(q, k, v, need_weights=False)

        add("numpy chunked", chunked)
        if L == NOISE_L:  # how far one call's timings differ from themselves in this run
            add(NOISE_ROW, chunked, "n/a")
        if L <= EXPLICIT_MAX_L:
            add(FLOOR_ROW, numpy_matmuls_alone(q[0, 0], k[0, 0], v[0, 0]), "n/a")
    try:
        import torch
    except ImportError:
        return rows
    name = f"torch-{device}"
    if name not in backends.available():
        return rows
    tq, tk, tv = (torch.from_numpy(a).to(device) for a in (q, k, v))
    memory = "cuda" if device == "cuda" else "rss"
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def synced(fn: Callable[[], object]) -> Callable[[], object]:
        if device != "cuda":
            return fn
        return lambda: (fn(), torch.cuda.synchronize())

    torch_be = backends.get(name)
    if L <= EXPLICIT_MAX_L:
        add(
            f"torch explicit ({device})",
            synced(lambda: torch_be.scaled_dot_product_attention(tq, tk, tv)),
            memory,
        )
    if L <= EXPLICIT_MAX_L or device == "cuda":  # its goal is at 4096 (CUDA: 32768 too)
        fast = synced(lambda: torch_be.scaled_dot_product_attention(tq, tk, tv, need_weights=False))
        add(f"torch backend fast ({device})", fast, memory)
    add(f"torch SDPA ({device})", synced(lambda: sdpa(tq, tk, tv)), memory)
    if L <= EXPLICIT_MAX_L:  # for reference: (L, E) input takes torch's unfused math kernel
        tq2, tk2, tv2 = (t[0, 0] for t in (tq, tk, tv))
        add(f"torch SDPA, 2-D input ({device})", synced(lambda: sdpa(tq2, tk2, tv2)), memory)
    return rows

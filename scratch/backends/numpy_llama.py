"""The Llama family's fast NumPy forward: products and heads shared among the cores, kept buffers.

The same arithmetic as the readable forward (scratch.models.llama), arranged for speed: OpenBLAS
held to one thread while our own threads share each product's output features and the heads in
blocks, q, k, v (and gate, up) in one product each, a key/value cache. A test
(tests/test_models_fast_path.py) checks it against the readable forward;
docs/notes/llama_speed.md holds the measurements behind each choice.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass

import numpy as np

from scratch.backends.numpy_threads import cores, share, single_threaded_blas
from scratch.ops import progress
from scratch.variants import Causal

SHARED_ROWS = 2  # under this many tokens a step's products go to OpenBLAS's own threads
BLOCKS_PER_CORE = 1  # blocks of output features per core in each product
ATTENTION_ROWS = 8  # query rows per core at least for a layer's attention to be shared
ROW_KEYS = 256  # a query row's fixed cost in a layer's attention, in keys
SCRATCH_BYTES = 8 << 20  # the largest buffer `scratch` keeps per thread and name
_SCRATCH = threading.local()  # each thread's kept buffers


@dataclass(frozen=True)
class Cache:
    """Each layer's rotated keys and values so far: k, v (kv_heads, S, d_head) per layer."""

    k: tuple
    v: tuple

    @property
    def length(self) -> int:
        """S: the tokens held."""
        return self.k[0].shape[1] if self.k else 0


def rms_norm(
    x: np.ndarray, weight: np.ndarray, eps: float, out: np.ndarray | None = None
) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (into `out` when given)."""
    out = np.divide(x, np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps), out=out)
    return np.multiply(out, weight, out=out)


def angles(positions: np.ndarray, d: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (T, d/2) of the angles positions[t] * base^(-2i/d): once per step."""
    angle = positions[:, None] * base ** (-np.arange(d // 2) * 2.0 / d)  # (T, d/2)
    return np.cos(angle), np.sin(angle)


def turn(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """x (..., d) with each pair (i, i + d/2) turned by the angle whose cos and sin (broadcast
    against x[..., :d/2]) are given; into `out` (x's shape) when given, else a new array."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]  # (..., d/2) each
    if out is None:
        out = np.empty(x.shape)
    first, second, term = out[..., :half], out[..., half:], np.empty(a.shape)
    np.subtract(np.multiply(a, cos, out=first), np.multiply(b, sin, out=term), out=first)
    np.add(np.multiply(b, cos, out=second), np.multiply(a, sin, out=term), out=second)
    return out


def forward(config: object, w: dict, ids: list[int]) -> tuple[np.ndarray, list, np.ndarray]:
    """(attentions (layers, heads, T, T), attention inputs, logits (T, vocab)) of a whole text."""
    return step(config, w, ids)[:3]


def step(
    config: object, w: dict, ids: list[int], cache: Cache | None = None
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, Cache]:
    """ids after the cache: (attentions (layers, heads, T, S), attention inputs (T, d_model) per
    layer, logits (T, vocab), the cache grown by T). Under SHARED_ROWS tokens OpenBLAS's own
    threads do the products; else ours, OpenBLAS held to one thread (docs/notes/llama_speed.md)."""
    if len(ids) < SHARED_ROWS:
        return _step(config, w, ids, cache)
    with single_threaded_blas():
        return _step(config, w, ids, cache)


def blocks(n: int, unit: int = 8) -> list[slice]:
    """n output features (or heads) in BLOCKS_PER_CORE blocks per core, each a multiple of
    `unit` wide (8 features: whole SIMD widths; 1 head) but the last (a core that finishes
    early takes the next block); every feature's arithmetic is the same in any block."""
    parts = max(1, min(cores() * BLOCKS_PER_CORE, n // unit))
    width = math.ceil(n / parts / unit) * unit  # n / parts, rounded up to a multiple of unit
    return [slice(i, min(i + width, n)) for i in range(0, n, width)]


def linear(x: np.ndarray, weight: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x @ weight.T (T, out) for weight (out, in), the output features shared among the cores
    (under SHARED_ROWS rows: one product, OpenBLAS's threads); into `out` when given."""
    if x.shape[0] < SHARED_ROWS:
        return np.matmul(x, weight.T, out=out)
    if out is None:
        out = np.empty((x.shape[0], weight.shape[0]))

    def work(cols: slice) -> None:
        np.matmul(x, weight[cols].T, out=out[:, cols])

    share(blocks(weight.shape[0]), cores(), work)
    return out


def _step(
    c: object, w: dict, ids: list[int], cache: Cache | None
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, Cache]:
    """step's work, OpenBLAS on one thread."""
    past = cache.length if cache is not None else 0
    T, d, H, G = len(ids), c.d_head, c.heads, c.kv_heads
    positions = np.arange(past, past + T, dtype=np.float64)  # the new tokens' true positions
    heads = lambda m, n: m.reshape(T, n, d).transpose(1, 0, 2)  # noqa: E731 (T, n*d) -> (n, T, d)
    cos, sin = (a[:, None] for a in angles(positions, d, c.rope_base))  # (T, 1, d/2): all layers
    seen = Causal.aligned("bottom-right", T, past + T).tile(range(T), range(past + T))  # (T, S)
    h = w["token_embd.weight"][ids]  # (T, d_model)
    # what the step returns or keeps, one array each for all layers (numpy asks large arrays
    # for huge pages); the layers' temporaries in kept buffers (`scratch`)
    attentions = np.zeros((c.layers, H, T, past + T))  # every layer's weights, written in place
    all_inputs = np.empty((c.layers, T, c.d_model))  # each layer's attention input
    all_qkv = np.empty((c.layers, T, (H + 2 * G) * d))  # v stays a view of it (the cache's)
    all_k = np.empty((c.layers, G, T, d))  # the new tokens' rotated keys
    inputs, ks, vs = [], [], []
    tick = progress.current()  # stage "forward", in layers: a cancel is seen between layers
    for n in range(c.layers):
        p = f"blk.{n}."
        x = rms_norm(h, w[p + "attn_norm.weight"], c.eps, out=all_inputs[n])  # (T, d_model)
        inputs.append(x)
        w_qkv, b_qkv = w[p + "attn_qkv.weight"], w.get(p + "attn_qkv.bias")  # bias: Qwen2's
        qkv, turned = _projections(c, x, w_qkv, cos, sin, all_qkv[n], b_qkv)
        q = heads(turned[:, : H * d], H)  # (H, T, d)
        k = all_k[n]  # (G, T, d)
        np.copyto(k, heads(turned[:, H * d :], G))
        v = heads(qkv[:, (H + G) * d :], G)  # (G, T, d)
        if cache is not None:
            k = np.concatenate([cache.k[n], k], axis=1)  # (G, S, d)
            v = np.concatenate([cache.v[n], v], axis=1)
        ks.append(k)
        vs.append(v)
        context = _attention(q, k, v, seen, attentions[n])  # (T, H d); weights (H, T, S)
        h += linear(context, w[p + "attn_output.weight"], scratch("residual", h.shape))
        m = rms_norm(h, w[p + "ffn_norm.weight"], c.eps, out=scratch("norm", h.shape))
        inner = _swiglu(m, w[p + "ffn_gate_up.weight"])  # (T, d_inner)
        h += linear(inner, w[p + "ffn_down.weight"], scratch("residual", h.shape))
        tick("forward", n + 1, c.layers)
    h = rms_norm(h, w["output_norm.weight"], c.eps)  # (T, d_model)
    logits = linear(h, w["output.weight"])  # the output head (tied: the token table): (T, vocab)
    return attentions, inputs, logits, Cache(tuple(ks), tuple(vs))


def _projections(
    c: object, x: np.ndarray, w_qkv: np.ndarray, cos: np.ndarray, sin: np.ndarray,
    out: np.ndarray | None = None, b_qkv: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """x @ w_qkv.T (+ b_qkv if given) (T, (H + 2G) d) with w_qkv = [w_q; w_k; w_v] (into `out`
    when given), and its q and k heads turned by RoPE (T, (H + G) d, in this thread's kept
    buffer: read it before the next layer); cos, sin (T, 1, d/2). Shared among the cores in
    blocks of whole heads, each block turning its own q and k heads right after its product."""
    T, d, turning = x.shape[0], c.d_head, c.heads + c.kv_heads
    n = w_qkv.shape[0] // d  # heads of q, k and v
    qkv = np.empty((T, n * d)) if out is None else out
    turned = scratch("turned", (T, turning * d))

    def work(block: slice) -> None:
        cols = slice(block.start * d, block.stop * d)
        np.matmul(x, w_qkv[cols].T, out=qkv[:, cols])  # (T, d_model) @ (d_model, heads d)
        if b_qkv is not None:
            qkv[:, cols] += b_qkv[cols]
        if block.start < turning:  # q and k heads: (T, heads, d), turned pair by pair
            cols = slice(block.start * d, min(block.stop, turning) * d)
            turn(qkv[:, cols].reshape(T, -1, d), cos, sin, turned[:, cols].reshape(T, -1, d))

    if T < SHARED_ROWS:  # one product, OpenBLAS's threads
        work(slice(0, n))
        return qkv, turned
    share(blocks(n, unit=1), cores(), work)  # blocks of whole heads
    return qkv, turned


def _attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, seen: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Causal attention of q (H, T, d) over k, v (G, S, d), seen (T, S) the causal cells (query
    i at S - T + i), written into weights (H, T, S), which must hold zeros: the context (T, H d).
    Every head at once, the query rows shared among the cores in blocks (`row_blocks`), a block
    computing only the keys its last row sees (the cells right of them stay 0)."""
    (H, T, d), (G, S) = q.shape, k.shape[:2]
    scale = 1.0 / math.sqrt(d)
    hidden = ~seen
    context = scratch("context", (T, H, d))  # read by the output product, then free
    qg = q.reshape(G, H // G, T, d)  # query heads by the kv head they read
    kt = k.transpose(0, 2, 1)[:, None]  # (G, 1, d, S)
    wg = weights.reshape(G, H // G, T, S)

    def work(rows: slice) -> None:
        keys = S - T + rows.stop  # the keys the block's last row sees: the others see fewer
        s = wg[:, :, rows, :keys]  # (G, H/G, n, keys): these rows of every head
        np.matmul(qg[:, :, rows], kt[..., :keys], out=s)  # (G, H/G, n, d) @ (G, 1, d, keys)
        s *= scale
        np.copyto(s, -np.inf, where=hidden[rows, :keys])
        s -= s.max(axis=-1, keepdims=True)  # subtract the row max: no overflow
        np.exp(s, out=s, where=seen[rows, :keys])  # hidden cells skip exp(-inf), a slow path ...
        np.copyto(s, 0.0, where=hidden[rows, :keys])  # ... and weigh 0
        s /= s.sum(axis=-1, keepdims=True)
        out = context[rows].reshape(-1, G, H // G, d).transpose(1, 2, 0, 3)  # (G, H/G, n, d)
        np.matmul(s, v[:, None, :keys], out=out)  # (G, H/G, n, keys) @ (G, 1, keys, d)

    parts = max(1, min(cores(), T // ATTENTION_ROWS))
    blocks_of_rows = row_blocks(T, S - T, parts)
    share(blocks_of_rows, len(blocks_of_rows), work)
    return context.reshape(T, H * d)


@functools.lru_cache(maxsize=64)
def row_blocks(T: int, past: int, parts: int) -> tuple[slice, ...]:
    """T query rows after `past` cached tokens in at most `parts` blocks of consecutive rows,
    the largest block's cost as small as it can be. A block computes the keys its last row sees;
    its cost is rows x (ROW_KEYS + keys): NumPy's per-row work on every head (the max, the sum,
    the masked copies) costs about what ROW_KEYS more keys would."""

    def cost(r0: int, r1: int) -> int:
        return (r1 - r0) * (ROW_KEYS + past + r1)

    def cut(limit: int) -> tuple[slice, ...] | None:  # greedy: each block as long as it may be
        out, r0 = [], 0
        while r0 < T:
            r1 = r0 + 1
            while r1 < T and cost(r0, r1 + 1) <= limit:
                r1 += 1
            out.append(slice(r0, r1))
            r0 = r1
        return tuple(out) if len(out) <= parts else None

    low, high = 0, cost(0, T)  # cut(high) is one block; search the smallest limit that fits
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if cut(middle) else (middle + 1, high)
    return cut(high)


def _swiglu(m: np.ndarray, w_gate_up: np.ndarray) -> np.ndarray:
    """silu(m @ w_gate.T) * (m @ w_up.T) (T, d_inner), w_gate_up = [w_gate; w_up] (2 d_inner,
    d_model); each block of features gets its gate and up rows together, in buffers its thread
    keeps (`scratch`)."""
    inner = w_gate_up.shape[0] // 2
    if m.shape[0] < SHARED_ROWS:  # a generation step: one product, OpenBLAS's threads
        both = m @ w_gate_up.T  # (T, 2 d_inner)
        return np.multiply(silu(both[:, :inner]), both[:, inner:])
    out = scratch("swiglu", (m.shape[0], inner))  # read by the down product, then free

    def work(cols: slice) -> None:
        shape = (m.shape[0], cols.stop - cols.start)  # (T, block)
        gate, up, act = scratch("gate", shape), scratch("up", shape), scratch("silu", shape)
        np.matmul(m, w_gate_up[cols].T, out=gate)  # (T, d_model) @ (d_model, block)
        np.matmul(m, w_gate_up[inner + cols.start : inner + cols.stop].T, out=up)
        np.multiply(silu(gate, out=act), up, out=out[:, cols])

    share(blocks(inner), cores(), work)
    return out


def scratch(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A float64 array of `shape` in this thread's buffer `name`, kept between calls up to
    SCRATCH_BYTES (larger ones are made fresh): fresh temporaries each layer cost page faults."""
    size = math.prod(shape)
    if size * 8 > SCRATCH_BYTES:
        return np.empty(shape)
    kept = getattr(_SCRATCH, name, None)
    if kept is None or kept.size < size:
        kept = np.empty(max(size, 1))
        setattr(_SCRATCH, name, kept)
    return kept[:size].reshape(shape)


def silu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * sigmoid(x) as x / (1 + exp(-x)) (into `out` when given): where exp(-x) overflows to
    inf the quotient is -0."""
    out = np.negative(x, out=out)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1.0
    return np.divide(x, out, out=out)

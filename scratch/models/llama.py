"""Llama family (SmolLM2): the decoder forward in NumPy float64, with a key/value cache.

RMSNorm, rotary positions (RoPE, "half" pairing: feature i turns with i + d_head/2, as in
Hugging Face; the GGUF reader has put llama.cpp's interleaved rows back), grouped-query
attention (query head h reads key/value head h // group), SwiGLU and the tied output head.
Weights are (out, in), as PyTorch's Linear stores them: x @ w.T.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass

import numpy as np

from .. import progress
from ..backends.numpy_threads import cores, share, single_threaded_blas
from ..variants import Causal
from .config import Config

PAIRING = "half"  # how features pair for rotation once the GGUF reader has unpermuted q and k
SHARED_ROWS = 2  # tokens from which products and heads are shared among our threads (see step)
# blocks of output features per core in each product. One: the 128-token run took 0.956-0.960x
# the time of two per core (paired medians of three 30-round A/Bs, the 2-core dev host idle),
# 0.964x beside one busy process and 0.950x beside three: fewer hand-offs and packings of x
# gain more than a core that finishes early taking another block
BLOCKS_PER_CORE = 1
ATTENTION_ROWS = 8  # query rows per core at least for a layer's attention to be shared
# a query row's fixed cost in a layer's attention, in keys: one layer at 128 tokens, rows in
# blocks of 64 x 128 keys, 79 x 79 and 49 x 128 took 0.70-0.73, 0.76 and 0.54 ms on one core
# of the 2-core dev host (9 heads): per row 7.6 us, per key and row 0.028 us, about 270 keys
ROW_KEYS = 256
SCRATCH_BYTES = 8 << 20  # the largest buffer `scratch` keeps per thread and name (T = 682 at
# SmolLM2's widest, 1536 features; about 5 MiB in all per thread at 128 tokens)
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


def rotate(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """RoPE on (..., T, d): pair (i, i + d/2) of row t turns by positions[t] * base^(-2i/d)."""
    return turn(x, *angles(positions, x.shape[-1], base))


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


def kv_head(config: Config, head: int) -> int:
    """The key/value head query head `head` reads: heads come in groups of heads // kv_heads."""
    return head // (config.heads // config.kv_heads)


def step(
    config: Config, w: dict, ids: list[int], cache: Cache | None = None
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, Cache]:
    """ids after the cache: (attentions (layers, heads, T, S), attention inputs (T, d_model) per
    layer, logits (T, vocab), the cache grown by T).

    OpenBLAS is held to one thread and each product's output features (the weight's rows) are
    shared among this process's cores in blocks, the heads likewise: on a busy machine
    OpenBLAS's own threads wait for each other (a 128-token run took 15 s instead of 3.4 s at
    load 15), and splitting the weights rather than the text's rows packs each weight once, not
    once per core. A single new token (a generation step; fewer than SHARED_ROWS) goes to
    OpenBLAS's own threads instead: its products are matrix-vector products, and handing a
    block to our worker costs a thread wake-up each time, where OpenBLAS's threads spin between
    calls. Measured on the 2-core dev host, a cached step after 128 tokens, medians of
    alternating rounds in one process, the numbers bit for bit the same on this host's OpenBLAS:
    idle 59 ms against 95 ms (16 rounds); beside two busy processes 152 against 168 ms; beside
    six, 613 against 291 ms (spinning threads lose under heavy load). More tokens gain less
    idle (8-32 tokens 0.85-0.93x the time, 64 0.95x, 128 level) and would lose as much loaded,
    so they stay with our blocks."""
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
    c: Config, w: dict, ids: list[int], cache: Cache | None
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
        qkv, turned = _projections(c, x, w[p + "attn_qkv.weight"], cos, sin, all_qkv[n])
        q = heads(turned[:, : H * d], H)  # (H, T, d)
        k = all_k[n]  # (G, T, d)
        np.copyto(k, heads(turned[:, H * d :], G))
        v = heads(qkv[:, (H + G) * d :], G)  # (G, T, d)
        if cache is not None:
            k = np.concatenate([cache.k[n], k], axis=1)  # (G, S, d)
            v = np.concatenate([cache.v[n], v], axis=1)
        ks.append(k)
        vs.append(v)
        context = _attention(c, q, k, v, seen, attentions[n])  # (T, H d); weights (H, T, S)
        h += linear(context, w[p + "attn_output.weight"], scratch("residual", h.shape))
        m = rms_norm(h, w[p + "ffn_norm.weight"], c.eps, out=scratch("norm", h.shape))
        inner = _swiglu(m, w[p + "ffn_gate_up.weight"])  # (T, d_inner)
        h += linear(inner, w[p + "ffn_down.weight"], scratch("residual", h.shape))
        tick("forward", n + 1, c.layers)
    h = rms_norm(h, w["output_norm.weight"], c.eps)  # (T, d_model)
    logits = linear(h, w["token_embd.weight"])  # the head tied to the token table: (T, vocab)
    return attentions, inputs, logits, Cache(tuple(ks), tuple(vs))


def _projections(
    c: Config, x: np.ndarray, w_qkv: np.ndarray, cos: np.ndarray, sin: np.ndarray,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """x @ w_qkv.T (T, (H + 2G) d) with w_qkv = [w_q; w_k; w_v] (into `out` when given), and its
    q and k heads turned by RoPE (T, (H + G) d, in this thread's kept buffer: read it before the
    next layer); cos, sin (T, 1, d/2). Shared among the cores in blocks of whole
    heads, each block turning its own q and k heads right after its product (30 layers' at 128
    tokens: 0.948x the time of the product and then two rotations, paired medians of 40
    alternating rounds on the 2-core dev host; the same numbers bit for bit given the product)."""
    T, d, turning = x.shape[0], c.d_head, c.heads + c.kv_heads
    n = w_qkv.shape[0] // d  # heads of q, k and v
    qkv = np.empty((T, n * d)) if out is None else out
    turned = scratch("turned", (T, turning * d))

    def work(block: slice) -> None:
        cols = slice(block.start * d, block.stop * d)
        np.matmul(x, w_qkv[cols].T, out=qkv[:, cols])  # (T, d_model) @ (d_model, heads d)
        if block.start < turning:  # q and k heads: (T, heads, d), turned pair by pair
            cols = slice(block.start * d, min(block.stop, turning) * d)
            turn(qkv[:, cols].reshape(T, -1, d), cos, sin, turned[:, cols].reshape(T, -1, d))

    if T < SHARED_ROWS:  # one product, OpenBLAS's threads
        work(slice(0, n))
        return qkv, turned
    share(blocks(n, unit=1), cores(), work)  # blocks of whole heads
    return qkv, turned


def _attention(
    c: Config, q: np.ndarray, k: np.ndarray, v: np.ndarray, seen: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Causal attention of q (H, T, d) over k, v (G, S, d), seen (T, S) the causal cells (query
    i at S - T + i), written into weights (H, T, S), which must hold zeros: the context (T, H d).
    Every head at once, the query rows shared among the cores in blocks (`row_blocks`), a block
    computing only the keys its last row sees (the cells right of them stay 0): ten NumPy calls
    per core instead of ten per head. One layer at 128 tokens: 0.86-0.98 ms against 0.94-1.06 ms
    with every key and the rows in halves (medians of 400 alternating calls, three runs)."""
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
    SCRATCH_BYTES (larger ones are made fresh). glibc gives memory freed at the top of the main
    thread's heap back to the system, so a layer's temporaries made fresh each layer cost page
    faults on the next: 14,400 a 128-token run (almost all in the main thread's blocks), 520
    with the temporaries kept and what the step returns made once for all layers; the run
    547-565 ms against 574-595 ms (medians of 8 runs in each of three alternating pairs of
    processes, the 2-core dev host; 548 against 508 ms with glibc told to keep its memory)."""
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


def forward(
    config: Config, w: dict, ids: list[int]
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(attentions (layers, heads, T, T), attention inputs, logits (T, vocab)) of a whole text."""
    return step(config, w, ids)[:3]


def head_weights(config: Config, w: dict, layer: int, head: int) -> dict[str, np.ndarray]:
    """w_q of query head `head`, w_k and w_v of the key/value head it reads: (d_model, d_head)
    each, right-multiplied (x @ w_q); no biases."""
    d, g, p = config.d_head, kv_head(config, head), f"blk.{layer}."
    cols = lambda name, i: w[p + name][i * d : (i + 1) * d].T  # noqa: E731 (d_model, d)
    return {"w_q": cols("attn_q.weight", head), "w_k": cols("attn_k.weight", g),
            "w_v": cols("attn_v.weight", g)}  # fmt: skip


def ground_truth(run: object, layer: int, head: int) -> object:
    """The pure-Python Trace of one head: q, k, v projected by fsum sums, turned by
    scratch.rotary, key/value head h // group, causal."""
    from ..linalg import matmul
    from ..rope import rotary
    from ..trace import trace_attention

    c = run.model.config
    x = run.inputs[layer].tolist()  # (T, d_model)
    w = {name: m.tolist() for name, m in head_weights(c, run.model.weights, layer, head).items()}
    positions = list(range(len(run.ids)))
    turn = lambda m: rotary(m, positions, base=c.rope_base, pairing=PAIRING)  # noqa: E731
    q = turn(matmul(x, w["w_q"]))  # (T, d_model) @ (d_model, d) -> (T, d)
    k = turn(matmul(x, w["w_k"]))  # (T, d)
    v = matmul(x, w["w_v"])  # (T, d)
    return trace_attention(q, k, v, tokens=run.tokens, is_causal=True)

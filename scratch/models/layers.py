"""The few NumPy building blocks a Transformer layer needs, in float64."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from scratch.variants import Causal

_erf = np.vectorize(math.erf, otypes=[np.float64])


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (biased variance)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (BERT's 'gelu')."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's 'gelu_new': 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), written as exp(-log(1 + exp(-x))) so no exp overflows."""
    return np.exp(-np.logaddexp(0.0, -x))


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(x, 0.0)


# transformers' ACT2FN names (transformers/activations.py) with no weights of their own; the
# ones with learned parameters (prelu, xielu) or not worth a line (sqrtsoftplus) are refused
ACTIVATIONS = {
    "gelu": gelu,
    "gelu_python": gelu,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_python_tanh": gelu_tanh,
    "gelu_accurate": gelu_tanh,
    "gelu_fast": lambda x: 0.5 * x * (1.0 + np.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "gelu_10": lambda x: np.clip(gelu(x), -10.0, 10.0),
    "quick_gelu": lambda x: x * sigmoid(1.702 * x),
    "laplace": lambda x: 0.5 * (1.0 + _erf((x - 0.707107) / (0.282095 * math.sqrt(2.0)))),
    "relu": relu,
    "relu2": lambda x: relu(x) ** 2,
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "leaky_relu": lambda x: np.where(x >= 0.0, x, 0.01 * x),  # torch's default slope
    "hardswish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "silu": lambda x: x * sigmoid(x),
    "swish": lambda x: x * sigmoid(x),
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),  # x tanh(softplus(x))
    "sigmoid": sigmoid,
    "tanh": np.tanh,
    "linear": lambda x: x,
}


def attention_heads(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, causal: bool, scale: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-head attention on projected q, k, v (T, C): (weights (H, T, T), context (T, C)).

    scale None is 1/sqrt(d_head), as in PyTorch; GPT-2 configs may ask for another.
    """
    T, C = q.shape
    d = C // heads
    split = lambda m: m.reshape(T, heads, d).transpose(1, 0, 2)  # noqa: E731 (T, C) -> (H, T, d)
    weights, context = head_attention(split(q), split(k), split(v), causal, scale)
    return weights, context.transpose(1, 0, 2).reshape(T, C)  # (T, H*d)


def head_attention(
    qh: np.ndarray, kh: np.ndarray, vh: np.ndarray, causal: bool, scale: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-head q (H, T, d) over k, v (H, S, d): (weights (H, T, S), context (H, T, d)).

    Causal rows align bottom-right: with S > T (a cache), query i sits at position S - T + i."""
    T, S, d = qh.shape[1], kh.shape[1], qh.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores = qh @ kh.transpose(0, 2, 1) * scale  # (H, T, d) @ (H, d, S) -> (H, T, S)
    if causal:  # the causal variant, bottom-right (top-left when S == T)
        seen = Causal.aligned("bottom-right", T, S).tile(range(T), range(S))  # (T, S)
        scores = np.where(seen, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)  # subtract the row max: no overflow
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)  # (H, T, S)
    return weights, weights @ vh  # (H, T, S) @ (H, S, d) -> (H, T, d)


def walk(layer: Callable, config: object, w: dict, h: np.ndarray, count: int) -> Iterator[dict]:
    """The first `count` layers' arrays (layer(config, w, n, h): every intermediate by name),
    each layer fed the one before's output ("residual 2"), from h (T, d_model) entering layer 0."""
    for n in range(count):
        arrays = layer(config, w, n, h)
        yield arrays
        h = arrays["residual 2"]


def run_layers(
    embed: Callable, layer: Callable, read: str, config: object, w: dict, ids: list[int]
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """A family's layers on a text: (attentions (layers, heads, T, T), each layer's attention
    input (its arrays[read]), the last layer's output (T, d_model))."""
    h = embed(config, w, ids)  # (T, d_model): layer 0's input
    attentions, inputs = [], []
    for arrays in walk(layer, config, w, h, config.layers):
        attentions.append(arrays["attention"])
        inputs.append(arrays[read])
        h = arrays["residual 2"]
    return np.stack(attentions), inputs, h

"""The few NumPy building blocks a Transformer layer needs, in float64."""

from __future__ import annotations

import math

import numpy as np

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


ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh}


def attention_heads(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-head attention on projected q, k, v (T, C): (weights (H, T, T), context (T, C))."""
    T, C = q.shape
    d = C // heads
    split = lambda m: m.reshape(T, heads, d).transpose(1, 0, 2)  # noqa: E731 (T, C) -> (H, T, d)
    qh, kh, vh = split(q), split(k), split(v)
    scores = qh @ kh.transpose(0, 2, 1) / math.sqrt(d)  # (H, T, d) @ (H, d, T) -> (H, T, T)
    if causal:
        scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    scores = scores - scores.max(
        axis=-1, keepdims=True
    )  # subtract the row max: exp never overflows
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)  # (H, T, T)
    context = weights @ vh  # (H, T, T) @ (H, T, d) -> (H, T, d)
    return weights, context.transpose(1, 0, 2).reshape(T, C)  # (T, H*d)

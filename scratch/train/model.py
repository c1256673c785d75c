"""The tiny transformer, forward and backward written out in NumPy (no autograd).

    x = w_te[tokens] + w_pe[:T]                                   (B, T, D)
    per layer: x = x + attention(norm(x)) @ w_o;  [x = x + mlp(norm(x))]
    logits = norm(x) @ w_u;  loss = mean cross-entropy of the targets

Attention runs through the project's own kernels: the forward is a backend's
scaled_dot_product_attention, the backward its scaled_dot_product_attention_backward (the
"numpy" backend, or "scratch", the pure-Python ground truth, for a tiny check). With NumPy both
are the explicit kernels: a training batch is many short sequences, and the explicit kernels
compute every head of the batch in one pass of array operations, where the chunked and tiled
kernels (made for long sequences) would loop over the (batch, head) pairs in Python.
Every other gradient is written out below, in reverse order of the forward's steps, as
nanoGPT's and llm.c's readers expect. `norm` is the identity unless ModelConfig.norm; the MLP
exists only with ModelConfig.mlp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scratch import backends
from scratch.backends.numpy_threads import share
from scratch.train.config import ModelConfig

LN_EPS = 1e-5


def init_params(config: ModelConfig, rng: np.random.Generator, dtype: str) -> dict:
    """Every weight, drawn as GPT-2 draws them (normal, std 0.02; norms 1 and 0)."""
    D, H, Hkv, dh, V = config.d_model, config.n_heads, config.kv_heads, config.d_head, config.vocab

    def normal(*shape: int) -> np.ndarray:
        return (0.02 * rng.standard_normal(shape)).astype(dtype)

    params = {"w_te": normal(V, D), "w_pe": normal(config.context, D)}
    for n in range(config.n_layers):
        if config.norm:
            params[f"{n}.ln1_g"], params[f"{n}.ln1_b"] = np.ones(D, dtype), np.zeros(D, dtype)
        params[f"{n}.w_q"] = normal(D, H * dh)
        params[f"{n}.w_k"] = normal(D, Hkv * dh)
        params[f"{n}.w_v"] = normal(D, Hkv * dh)
        params[f"{n}.w_o"] = normal(H * dh, D)
        if config.mlp:
            if config.norm:
                params[f"{n}.ln2_g"], params[f"{n}.ln2_b"] = np.ones(D, dtype), np.zeros(D, dtype)
            params[f"{n}.w_fc"], params[f"{n}.b_fc"] = normal(D, 4 * D), np.zeros(4 * D, dtype)
            params[f"{n}.w_proj"], params[f"{n}.b_proj"] = normal(4 * D, D), np.zeros(D, dtype)
    if config.norm:
        params["lnf_g"], params["lnf_b"] = np.ones(D, dtype), np.zeros(D, dtype)
    params["w_u"] = normal(D, V)
    return params


@dataclass
class Forward:
    """What the backward needs from the forward, and what the window shows (weights)."""

    logits: np.ndarray  # (B, T, V)
    loss: float
    losses: np.ndarray  # (B, T) each position's cross-entropy
    saved: list = field(default_factory=list)  # per layer: the tensors its backward reads
    final: tuple = ()  # the last norm's inputs and outputs
    weights: list = field(default_factory=list)  # per layer (B, H, T, T), when asked for


@dataclass(frozen=True)
class AttentionGrads:
    """One layer's attention in the backward: the gradient of the mean loss with respect to its
    output (dO, each head's before w_o) and to its q, k, v (what the kernel's backward gives)."""

    grad_output: np.ndarray  # (B, H, T, dh)
    grad_query: np.ndarray  # (B, H, T, dh)
    grad_key: np.ndarray  # (B, Hkv, T, dh)
    grad_value: np.ndarray  # (B, Hkv, T, dh)


# ---------------------------------------------------------------- pieces and their gradients


def flat(x: np.ndarray) -> np.ndarray:
    """(B, T, n) -> (B*T, n): a weight's gradient sums over every position of the batch."""
    return x.reshape(-1, x.shape[-1])


def dense(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w for x (B, T, n), w (n, m) -> (B, T, m) as one (B*T, n) @ (n, m) product: one BLAS
    call (NumPy's (B, T, n) @ (n, m) makes one small call per sequence, ~1.5x the time here)."""
    return (flat(x) @ w).reshape(x.shape[:-1] + (w.shape[-1],))


def qkv_weights(params: dict, n: int) -> np.ndarray:
    """Layer n's w_q, w_k, w_v side by side: (D, H dh), (D, Hkv dh) x 2 -> (D, (H + 2 Hkv) dh)."""
    return np.concatenate([params[f"{n}.w_q"], params[f"{n}.w_k"], params[f"{n}.w_v"]], axis=1)


def qkv_heads(H: int, Hkv: int) -> tuple[slice, slice, slice]:
    """Where q's, k's and v's heads sit among qkv_weights' H + 2 Hkv column blocks."""
    return slice(0, H), slice(H, H + Hkv), slice(H + Hkv, H + 2 * Hkv)


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, tuple]:
    """(x - mean) / sqrt(var + eps) * g + b over the last axis; and what its backward needs."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centred = x - mean
    rstd = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + LN_EPS)  # (..., 1)
    xhat = centred * rstd
    return xhat * g + b, (xhat, rstd, g)


def layer_norm_backward(dy: np.ndarray, saved: tuple) -> tuple[np.ndarray, ...]:
    """(dx, dg, db) of layer_norm: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat xhat))."""
    xhat, rstd, g = saved
    axes = tuple(range(dy.ndim - 1))
    dg, db = (dy * xhat).sum(axis=axes), dy.sum(axis=axes)
    dxhat = dy * g
    dx = rstd * (
        dxhat
        - dxhat.mean(axis=-1, keepdims=True)
        - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
    )
    return dx, dg, db


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-position loss (B, T), probabilities (B, T, V)): softmax then -log p[target]."""
    top = logits.max(axis=-1, keepdims=True)  # subtract the row max so exp never overflows
    e = np.exp(logits - top)
    total = e.sum(axis=-1, keepdims=True)
    probs = e / total
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]  # (B, T)
    return (np.log(total[..., 0]) + top[..., 0] - picked), probs


# ---------------------------------------------------------------- the model


class Model:
    """The config's model with the attention of one backend ('numpy' or 'scratch')."""

    def __init__(self, config: ModelConfig, backend: str = "numpy") -> None:
        self.config = config
        self.backend = backend
        self.attention = backends.get(backend)

    def _sdpa(self, q, k, v) -> tuple:
        """(output (B, H, T, dh), weights (B, H, T, T)) from the backend's forward."""
        gqa = self.config.kv_heads != self.config.n_heads
        if self.backend == "numpy":  # the explicit kernel: all heads of the batch at once
            found = self.attention.scaled_dot_product_attention(
                q, k, v, is_causal=self.config.causal, enable_gqa=gqa, need_weights=True
            )
            return found[0], found.weights
        found = self.attention.scaled_dot_product_attention(
            q.tolist(), k.tolist(), v.tolist(), is_causal=self.config.causal, enable_gqa=gqa
        )
        return np.asarray(found[0], q.dtype), np.asarray(found[1], q.dtype)

    def _sdpa_backward(self, q, k, v, d_out, out, weights) -> tuple[np.ndarray, ...]:
        """(dq, dk, dv) from the backend's backward kernel; the NumPy one reads the forward's
        output and weights instead of recomputing them."""
        gqa = self.config.kv_heads != self.config.n_heads
        if self.backend == "numpy":  # the explicit backward: all heads of the batch at once
            return self.attention.scaled_dot_product_attention_backward(
                q, k, v, d_out, is_causal=self.config.causal, enable_gqa=gqa, output=out,
                weights=weights,
            )  # fmt: skip
        grads = self.attention.scaled_dot_product_attention_backward(
            q.tolist(), k.tolist(), v.tolist(), d_out.tolist(), is_causal=self.config.causal,
            enable_gqa=gqa,
        )  # fmt: skip
        return tuple(np.asarray(g, dtype=q.dtype) for g in grads)

    def forward(self, params: dict, inputs: np.ndarray, targets: np.ndarray,
                need_weights: bool = False) -> Forward:  # fmt: skip
        """Logits, loss and the saved tensors for `backward`."""
        c = self.config
        B, T = inputs.shape
        H, Hkv, dh = c.n_heads, c.kv_heads, c.d_head
        # step 1: embeddings                                      (B, T, D)
        x = params["w_te"][inputs] + params["w_pe"][:T]
        layers, attention = [], []  # per layer: what its backward reads; the weights
        for n in range(c.n_layers):
            saved = {}
            # step 2: attention, one residual sublayer
            h = x
            if c.norm:
                h, saved["ln1"] = layer_norm(x, params[f"{n}.ln1_g"], params[f"{n}.ln1_b"])
            saved["h"] = h
            # q, k, v in one product, as nanoGPT's c_attn: (B, T, D) @ (D, (H + 2 Hkv) dh)
            qkv = dense(h, qkv_weights(params, n)).reshape(B, T, H + 2 * Hkv, dh)
            q, k, v = (  # each (B, heads, T, dh)
                np.ascontiguousarray(qkv[:, :, heads].transpose(0, 2, 1, 3))
                for heads in qkv_heads(H, Hkv)
            )
            out, weights = self._sdpa(q, k, v)  # (B, H, T, dh), (B, H, T, T)
            if need_weights:
                attention.append(weights)
            merged = out.transpose(0, 2, 1, 3).reshape(B, T, H * dh)  # (B, T, H*dh)
            x = x + dense(merged, params[f"{n}.w_o"])  # (B, T, H*dh) @ (H*dh, D) -> (B, T, D)
            saved.update(q=q, k=k, v=v, out=out, weights=weights, merged=merged)
            if c.mlp:
                # step 3: the MLP, a second residual sublayer
                h2 = x
                if c.norm:
                    h2, saved["ln2"] = layer_norm(x, params[f"{n}.ln2_g"], params[f"{n}.ln2_b"])
                pre = dense(h2, params[f"{n}.w_fc"]) + params[f"{n}.b_fc"]  # (B, T, 4D)
                act = np.maximum(pre, 0)
                x = x + dense(act, params[f"{n}.w_proj"]) + params[f"{n}.b_proj"]
                saved.update(h2=h2, pre=pre, act=act)
            layers.append(saved)
        # step 4: the unembedding and the loss
        hf, lnf = x, None
        if c.norm:
            hf, lnf = layer_norm(x, params["lnf_g"], params["lnf_b"])
        logits = dense(hf, params["w_u"])  # (B, T, D) @ (D, V) -> (B, T, V)
        losses, probs = cross_entropy(logits, targets)
        loss = float(losses.mean(dtype=np.float64))
        return Forward(logits, loss, losses, layers, (hf, lnf, probs, inputs, targets), attention)

    def backward(self, params: dict, fwd: Forward) -> dict:
        """The gradient of the mean loss with respect to every parameter (same keys)."""
        return self._backward(params, fwd)[0]

    def attention_grad_outputs(self, params: dict, fwd: Forward) -> list[AttentionGrads]:
        """Per layer, what `backward` computes at its attention for the forward `fwd`: dO =
        d(mean loss) / d(attention output) (B, H, T, dh), each head's before w_o, and the dq, dk,
        dv it gives."""
        return self._backward(params, fwd)[1]

    def _backward(self, params: dict, fwd: Forward) -> tuple[dict, list[AttentionGrads]]:
        """(the parameters' gradients, per layer its attention's dO, dq, dk, dv)."""
        c = self.config
        hf, lnf, probs, inputs, targets = fwd.final
        B, T = inputs.shape
        H, Hkv, dh = c.n_heads, c.kv_heads, c.d_head
        grads, at_attention = {}, []
        # step 4 back: dlogits = (p - onehot) / (B T)
        dlogits = probs.copy()
        np.put_along_axis(
            dlogits, targets[..., None],
            np.take_along_axis(dlogits, targets[..., None], axis=-1) - 1, axis=-1,
        )  # fmt: skip
        dlogits /= B * T
        grads["w_u"] = flat(hf).T @ flat(dlogits)  # (D, B*T) @ (B*T, V) -> (D, V)
        dx = dense(dlogits, params["w_u"].T)  # (B, T, V) @ (V, D) -> (B, T, D)
        if c.norm:
            dx, grads["lnf_g"], grads["lnf_b"] = layer_norm_backward(dx, lnf)
        for n in reversed(range(c.n_layers)):
            s = fwd.saved[n]
            if c.mlp:
                # step 3 back: x = x_mid + act @ w_proj + b_proj
                grads[f"{n}.w_proj"] = flat(s["act"]).T @ flat(dx)  # (4D, D)
                grads[f"{n}.b_proj"] = dx.sum(axis=(0, 1))
                dpre = dense(dx, params[f"{n}.w_proj"].T) * (s["pre"] > 0)  # ReLU passes where > 0
                grads[f"{n}.w_fc"] = flat(s["h2"]).T @ flat(dpre)  # (D, 4D)
                grads[f"{n}.b_fc"] = dpre.sum(axis=(0, 1))
                dh2 = dense(dpre, params[f"{n}.w_fc"].T)
                if c.norm:
                    dh2, grads[f"{n}.ln2_g"], grads[f"{n}.ln2_b"] = layer_norm_backward(
                        dh2, s["ln2"]
                    )
                dx = dx + dh2  # the residual passes dx on unchanged
            # step 2 back: x = x_in + merged @ w_o
            grads[f"{n}.w_o"] = flat(s["merged"]).T @ flat(dx)  # (H*dh, D)
            d_merged = dense(dx, params[f"{n}.w_o"].T)  # (B, T, H*dh)
            d_out = np.ascontiguousarray(d_merged.reshape(B, T, H, dh).transpose(0, 2, 1, 3))
            found = self._sdpa_backward(s["q"], s["k"], s["v"], d_out, s["out"], s["weights"])
            at_attention.insert(0, AttentionGrads(d_out, *found))  # layer order
            d_qkv = np.empty((B, T, H + 2 * Hkv, dh), dx.dtype)  # dq, dk, dv side by side
            for heads, d in zip(qkv_heads(H, Hkv), found):
                d_qkv[:, :, heads] = d.transpose(0, 2, 1, 3)  # (B, heads, T, dh) -> (B, T, ...)
            d_qkv = d_qkv.reshape(B, T, -1)  # (B, T, (H + 2 Hkv) dh)
            # (D, B*T) @ (B*T, (H + 2 Hkv) dh): w_q's, w_k's and w_v's gradients side by side
            d_weights = flat(s["h"]).T @ flat(d_qkv)
            widths = np.cumsum([H * dh, Hkv * dh])
            for name, d in zip(("w_q", "w_k", "w_v"), np.split(d_weights, widths, axis=1)):
                grads[f"{n}.{name}"] = d
            dh_ = dense(d_qkv, qkv_weights(params, n).T)  # (B, T, (H + 2 Hkv) dh) -> (B, T, D)
            if c.norm:
                dh_, grads[f"{n}.ln1_g"], grads[f"{n}.ln1_b"] = layer_norm_backward(dh_, s["ln1"])
            dx = dx + dh_
        # step 1 back: the embeddings gather rows, so their gradients scatter-add
        one_hot = (inputs.reshape(-1)[:, None] == np.arange(c.vocab)).astype(dx.dtype)  # (B*T, V)
        grads["w_te"] = one_hot.T @ flat(dx)  # (V, B*T) @ (B*T, D): each token's rows summed
        grads["w_pe"] = np.zeros_like(params["w_pe"])
        grads["w_pe"][:T] = dx.sum(axis=0)
        grads = {name: grads[name].astype(params[name].dtype, copy=False) for name in params}
        return grads, at_attention

    def gradients(self, params: dict, inputs: np.ndarray, targets: np.ndarray,
                  shards: int = 1) -> tuple[np.ndarray, dict]:  # fmt: skip
        """(each position's loss (B, T), the mean loss's gradients) for one batch, split into
        `shards` parts of whole sequences run on as many threads (NumPy's array operations
        release the GIL); each part's gradient, of its own mean loss, weighted by its share."""
        B = inputs.shape[0]
        parts = np.array_split(np.arange(B), min(shards, B))
        if len(parts) == 1:  # one thread: this one
            fwd = self.forward(params, inputs, targets)
            return fwd.losses, self.backward(params, fwd)
        found = [None] * len(parts)

        def work(i: int) -> None:
            rows = slice(parts[i][0], parts[i][-1] + 1)
            fwd = self.forward(params, inputs[rows], targets[rows])
            found[i] = fwd.losses, self.backward(params, fwd)

        share(list(range(len(parts))), len(parts), work)
        losses = np.concatenate([f[0] for f in found])  # (B, T)
        shares = [len(rows) / B for rows in parts]  # mean over the batch = sum of share * mean
        grads = {
            name: sum(p.dtype.type(w) * f[1][name] for w, f in zip(shares, found))
            for name, p in params.items()
        }
        return losses, grads


__all__ = ["AttentionGrads", "Forward", "Model", "cross_entropy", "init_params", "layer_norm"]

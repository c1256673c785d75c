"""multi_head_attention_backward against torch.autograd through nn.MultiheadAttention (float64)."""

import math
import random

import pytest

import scratch
from scratch.backward.multihead import multi_head_attention_backward

torch = pytest.importorskip("torch")
T = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
EPS = 2.0**-52


def gauss(rng, *shape):
    if len(shape) == 1:
        return [rng.gauss(0.0, 1.0) for _ in range(shape[0])]
    return [gauss(rng, *shape[1:]) for _ in range(shape[0])]


def close(name, ours, theirs, size=None, rel=256 * EPS):
    """Entry-wise within rel x (size + 1), size = the largest gradient entry of the example.

    Gradients such as grad_b_k are sums of O(1) terms that cancel to ~0 (a key bias shifts
    every score of a row alike, so it has no gradient): their rounding scales with the terms,
    not with the result, hence one size for the whole example. O(1) inputs only.
    """
    a, b = T(ours), theirs.detach()
    assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    size = b.abs().max().item() if size is None else size
    gap = (a - b).abs().max().item()
    assert gap <= rel * (size + 1.0), f"{name}: max diff {gap:.3g}"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("cross", [False, True])
def test_gradients_equal_autograd_through_nn_multihead_attention(seed, cross):
    rng = random.Random(seed)
    B, L, S, E, H = 2, 4, 5 if cross else 4, 6, 2
    kdim = 3 if cross else E
    x = gauss(rng, B, L, E)
    kv = gauss(rng, B, S, kdim) if cross else x
    vv = gauss(rng, B, S, kdim) if cross else x  # cross-attention: value differs from key
    w_q, w_k, w_v, w_o = (
        gauss(rng, E, E),
        gauss(rng, kdim, E),
        gauss(rng, kdim, E),
        gauss(rng, E, E),
    )
    b_q, b_k, b_v, b_o = (gauss(rng, E) for _ in range(4))
    mask = [[rng.choice([0.0, -1.0, -math.inf]) if j else 0.0 for j in range(S)] for _ in range(L)]
    g = gauss(rng, B, L, E)
    mha = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=kdim, batch_first=True).double()
    with torch.no_grad():  # torch multiplies by W^T: ours are the transposes
        if cross:
            mha.q_proj_weight.copy_(T(w_q).T)
            mha.k_proj_weight.copy_(T(w_k).T)
            mha.v_proj_weight.copy_(T(w_v).T)
        else:
            mha.in_proj_weight.copy_(torch.cat([T(w_q).T, T(w_k).T, T(w_v).T]))
        mha.in_proj_bias.copy_(torch.cat([T(b_q), T(b_k), T(b_v)]))
        mha.out_proj.weight.copy_(T(w_o).T)
        mha.out_proj.bias.copy_(T(b_o))
    X = T(x).requires_grad_()
    K = T(kv).requires_grad_() if cross else X
    V = T(vv).requires_grad_() if cross else X
    out, _ = mha(X, K, V, attn_mask=T(mask), need_weights=False)
    out.backward(T(g))
    tensors = [X, *mha.parameters()] + ([K, V] if cross else [])
    size = max(p.grad.abs().max().item() for p in tensors if p.grad is not None)
    ours = multi_head_attention_backward(
        x, kv if cross else None, vv if cross else None, w_q, w_k, w_v, w_o, grad_output=g,
        num_heads=H,
        b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o, attn_mask=mask,
    )  # fmt: skip
    # the forward agrees first (a wrong forward would make every gradient comparison moot)
    fwd, _ = scratch.multi_head_attention(
        x, kv if cross else None, vv if cross else None, w_q, w_k, w_v, w_o, num_heads=H,
        b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o, attn_mask=mask,
    )  # fmt: skip
    close("output", fwd, out)
    close("grad_query", ours.grad_query, X.grad, size)
    if cross:
        close("grad_key", ours.grad_key, K.grad, size)
        close("grad_value", ours.grad_value, V.grad, size)
        close("grad_w_q", ours.grad_w_q, mha.q_proj_weight.grad.T, size)
        close("grad_w_k", ours.grad_w_k, mha.k_proj_weight.grad.T, size)
        close("grad_w_v", ours.grad_w_v, mha.v_proj_weight.grad.T, size)
    else:
        assert ours.grad_key is None and ours.grad_value is None
        w_grad = mha.in_proj_weight.grad
        close("grad_w_q", ours.grad_w_q, w_grad[:E].T, size)
        close("grad_w_k", ours.grad_w_k, w_grad[E : 2 * E].T, size)
        close("grad_w_v", ours.grad_w_v, w_grad[2 * E :].T, size)
    b_grad = mha.in_proj_bias.grad
    close("grad_b_q", ours.grad_b_q, b_grad[:E], size)
    close("grad_b_k", ours.grad_b_k, b_grad[E : 2 * E], size)
    close("grad_b_v", ours.grad_b_v, b_grad[2 * E :], size)
    close("grad_w_o", ours.grad_w_o, mha.out_proj.weight.grad.T, size)
    close("grad_b_o", ours.grad_b_o, mha.out_proj.bias.grad, size)


@pytest.mark.parametrize("seed", range(4))
def test_grouped_query_gradients_equal_autograd_of_the_textbook_pipeline(seed):
    rng = random.Random(seed)
    L, E, H, Hkv, d = 5, 4, 4, 2, 2
    x, g = gauss(rng, L, E), gauss(rng, L, H * d)
    w_q, w_k, w_v = gauss(rng, E, H * d), gauss(rng, E, Hkv * d), gauss(rng, E, Hkv * d)
    X, Wq, Wk, Wv = (T(m).requires_grad_() for m in (x, w_q, w_k, w_v))
    q = (X @ Wq).view(L, H, d).transpose(0, 1)  # (H, L, d)
    k = (X @ Wk).view(L, Hkv, d).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    v = (X @ Wv).view(L, Hkv, d).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    p = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(d)).masked_fill(
        ~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf), dim=-1)  # fmt: skip
    out = (p @ v).transpose(0, 1).reshape(L, H * d)
    out.backward(T(g))
    ours = multi_head_attention_backward(
        x, None, None, w_q, w_k, w_v, grad_output=g, num_heads=H, num_kv_heads=Hkv,
        is_causal=True,
    )  # fmt: skip
    close("grad_query", ours.grad_query, X.grad)
    close("grad_w_q", ours.grad_w_q, Wq.grad)
    close("grad_w_k", ours.grad_w_k, Wk.grad)
    close("grad_w_v", ours.grad_w_v, Wv.grad)
    assert ours.grad_w_o is None and ours.grad_b_q is None


def test_a_wrong_gradient_is_caught():
    # the comparison can fail: a gradient off by one part in 1e9 is far outside 64 eps
    with pytest.raises(AssertionError, match="grad_w_q: max diff"):
        close("grad_w_q", [[1.0 + 1e-9]], T([[1.0]]))


def test_grad_output_of_the_wrong_shape_is_named():
    x = [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match=r"grad_output: expected the output's shape \(2, 2\)"):
        multi_head_attention_backward(x, None, None, x, x, x, grad_output=[[1.0]])

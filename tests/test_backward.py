"""The ground truth's backward pass against torch.autograd in float64."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scratch

torch = pytest.importorskip("torch")
F = torch.nn.functional


def T(x):
    return torch.tensor(x, dtype=torch.float64)


def gauss(rng, shape, size=1.0):
    if len(shape) == 1:
        return [rng.gauss(0.0, size) for _ in range(shape[0])]
    return [gauss(rng, shape[1:], size) for _ in range(shape[0])]


EPS = 2.0**-52


def assert_grads_equal(ours, theirs, sizes=None, names=("grad_query", "grad_key", "grad_value")):
    """Shape first, then NaN positions, then each entry within its own error bound.

    `sizes` holds, per gradient, the same sums taken over absolute values (what rounding
    errors scale with): dS = P * (dP - D) cancels, so a gradient can be far smaller than the
    errors of its terms. n * eps per sum of n terms, with n bounded by the longest sum here.
    Without `sizes` (small, well-scaled inputs only) the largest entry of each gradient serves.
    """
    if sizes is None:
        sizes = [b.abs().nan_to_num(0.0).max().expand(b.shape) for b in theirs]
    for name, a, b, size in zip(names, ours, theirs, sizes):
        a = T(a)
        assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)} vs torch {tuple(b.shape)}"
        assert torch.equal(a.isnan(), b.isnan()), f"{name}: NaN positions differ"
        ok = ~b.isnan()
        diff = (a - b).abs()[ok]
        bound = (24 * EPS * size)[ok]
        worst = (diff - bound).argmax() if diff.numel() else None
        assert worst is None or diff[worst] <= bound[worst], (
            f"{name}: max diff {diff[worst].item():.3g} > bound {bound[worst].item():.3g}"
        )


def magnitudes(q, k, v, g, scale=None, enable_gqa=False, **mask):
    """|dQ|, |dK|, |dV| computed from absolute values: the scale of every rounding error."""
    Q, K, V, G = (T(x) for x in (q, k, v, g))
    if enable_gqa:
        rep = Q.shape[-3] // K.shape[-3]
        K, V = K.repeat_interleave(rep, -3), V.repeat_interleave(rep, -3)
    s = 1 / math.sqrt(Q.shape[-1]) if scale is None else scale
    with torch.no_grad():
        out = F.scaled_dot_product_attention(Q, K, V, scale=scale, **_torch_mask(mask))
        scores = Q @ K.transpose(-2, -1) * s
        masked = scores + _additive(mask, scores)
        P = torch.softmax(masked, dim=-1).nan_to_num(0.0)
        # exp(x - max) carries a relative error of the absolute errors of x and of max, each
        # about eps * |scale| * sum_c |q_ic k_jc| (the score's own rounding)
        spread = abs(s) * Q.abs() @ K.abs().transpose(-2, -1)
        P = P * (2 + spread + spread.amax(-1, keepdim=True))
        dP = G @ V.transpose(-2, -1)
        D = (G * out).sum(-1, keepdim=True)
        dS = P * (dP.abs() + D.abs())
        dq = abs(s) * dS @ K.abs()
        dk = abs(s) * dS.transpose(-2, -1) @ Q.abs()
        dv = P.transpose(-2, -1) @ G.abs()
    if enable_gqa:  # the kv gradients sum the heads of each group
        dk = dk.unflatten(-3, (-1, rep)).sum(-3)
        dv = dv.unflatten(-3, (-1, rep)).sum(-3)
    return dq, dk, dv


def _torch_mask(mask):
    m = mask.get("attn_mask")
    if isinstance(m, list):
        first = m[0] if not isinstance(m[0], list) else m[0][0]
        m = torch.tensor(m) if isinstance(first, bool) else T(m)
    return {"attn_mask": m, "is_causal": mask.get("is_causal", False)}


def _additive(mask, scores):
    """The mask as a tensor added to the scores (-inf where a key is masked)."""
    m = _torch_mask(mask)
    L, S = scores.shape[-2:]
    if m["is_causal"]:
        m["attn_mask"] = torch.ones(L, S, dtype=torch.bool).tril()
    a = m["attn_mask"]
    if a is None:
        return torch.zeros_like(scores)
    if a.dtype == torch.bool:
        return torch.zeros(a.shape, dtype=torch.float64).masked_fill(~a, -math.inf)
    return a


def torch_grads(q, k, v, g, **kwargs):
    Q, K, V = (T(x).requires_grad_() for x in (q, k, v))
    kwargs.update(_torch_mask(kwargs))
    out = F.scaled_dot_product_attention(Q, K, V, **kwargs)
    return torch.autograd.grad(out, (Q, K, V), T(g))


@given(
    seed=st.integers(0, 100_000),
    L=st.integers(1, 6),
    S=st.integers(1, 6),
    E=st.integers(1, 4),
    Ev=st.integers(1, 4),
    mask=st.sampled_from(["none", "causal", "bool", "float", "key-padding"]),
    gqa=st.booleans(),
    scale=st.sampled_from([None, 0.0, -0.7, 2.5]),
    size=st.sampled_from([1.0, 30.0]),  # 30: large logits, saturated softmax rows
)
def test_gradients_equal_autograd_through_torch_sdpa(seed, L, S, E, Ev, mask, gqa, scale, size):
    rng = random.Random(seed)
    Hq, Hkv = (4, 2) if gqa else (2, 2)
    q, k = gauss(rng, (Hq, L, E), size), gauss(rng, (Hkv, S, E), size)
    v, g = gauss(rng, (Hkv, S, Ev)), gauss(rng, (Hq, L, Ev))
    kwargs = {"enable_gqa": gqa, "scale": scale}
    if mask == "causal":
        kwargs["is_causal"] = True
    elif mask == "bool":  # about one row in six fully masked at S = 3
        kwargs["attn_mask"] = [[rng.random() < 0.45 for _ in range(S)] for _ in range(L)]
    elif mask == "float":
        kwargs["attn_mask"] = [[rng.choice([0.0, -2.0, -math.inf]) for _ in range(S)]] * L
    elif mask == "key-padding":  # (1, S): torch refuses 1-D masks, so pass it as one row
        kwargs["attn_mask"] = [[rng.random() < 0.7 for _ in range(S)]]
    ours = scratch.scaled_dot_product_attention_backward(q, k, v, g, **kwargs)
    theirs = torch_grads(q, k, v, g, **dict(kwargs))
    assert_grads_equal(ours, theirs, magnitudes(q, k, v, g, **kwargs))


def test_fully_masked_rows_have_zero_gradients_never_nan():
    q, k, v = [[1.0, 2.0], [3.0, -1.0]], [[0.5, 1.0], [2.0, 0.0]], [[1.0], [2.0]]
    mask = [[False, False], [True, False]]  # row 0 attends nothing
    dq, dk, dv = scratch.scaled_dot_product_attention_backward(q, k, v, [[1.0], [1.0]], mask)
    assert dq[0] == [0.0, 0.0]
    assert_grads_equal((dq, dk, dv), torch_grads(q, k, v, [[1.0], [1.0]], attn_mask=mask))
    # even when grad_output holds inf and NaN in that row, no NaN appears anywhere
    dq, dk, dv = scratch.scaled_dot_product_attention_backward(q, k, v, [[math.inf], [1.0]], mask)
    assert dq[0] == [0.0, 0.0]
    assert not any(math.isnan(x) for m in (dq, dk, dv) for row in m for x in row)
    dq, dk, dv = scratch.scaled_dot_product_attention_backward(q, k, v, [[math.nan], [1.0]], mask)
    assert not any(math.isnan(x) for m in (dq, dk, dv) for row in m for x in row)


def reference_with_policy(q, k, v, g, mask, policy):
    """Autograd through the textbook pipelines the policies name.

    "nan": add -inf where masked (torch's reference adds its mask), softmax gives 0/0.
    "uniform": fill masked scores with a finite -1e9 (masked_fill: no gradient reaches them).
    """
    Q, K, V = (T(x).requires_grad_() for x in (q, k, v))
    scores = Q @ K.transpose(-2, -1) / math.sqrt(len(q[0]))
    allow = torch.tensor(mask)
    if policy == "nan":
        masked = scores + torch.zeros(allow.shape, dtype=torch.float64).masked_fill(
            ~allow, -math.inf
        )
    else:
        masked = scores.masked_fill(~allow, -1e9)
    weights = torch.softmax(masked, dim=-1)
    return torch.autograd.grad(weights @ V, (Q, K, V), T(g))


@pytest.mark.parametrize("policy", ["nan", "uniform"])
@pytest.mark.parametrize("seed", range(6))
def test_masked_rows_policies_match_the_textbook_fills(policy, seed):
    rng = random.Random(seed)
    q, k, v, g = gauss(rng, (3, 2)), gauss(rng, (4, 2)), gauss(rng, (4, 3)), gauss(rng, (3, 3))
    mask = [[rng.random() < 0.6 for _ in range(4)] for _ in range(3)]
    mask[seed % 3] = [False] * 4  # at least one fully masked row
    ours = scratch.scaled_dot_product_attention_backward(q, k, v, g, mask, masked_rows=policy)
    theirs = reference_with_policy(q, k, v, g, mask, policy)
    sizes = [m + t.abs().nan_to_num(0.0).max() for m, t in zip(magnitudes(q, k, v, g), theirs)]
    assert_grads_equal(ours, theirs, sizes)


@pytest.mark.parametrize("seed", range(4))
def test_dropout_reuses_the_forward_mask(seed):
    rng = random.Random(seed)
    q, k, v, g = gauss(rng, (4, 3)), gauss(rng, (5, 3)), gauss(rng, (5, 2)), gauss(rng, (4, 2))
    p = 0.4
    _, dropped = scratch.scaled_dot_product_attention(
        q, k, v, dropout_p=p, rng=random.Random(100 + seed)
    )
    _, plain = scratch.scaled_dot_product_attention(q, k, v)
    keep = [[d != 0.0 for d in row] for row in dropped]  # the forward's own dropout decisions
    assert any(not x for row in keep for x in row)
    Q, K, V = (T(x).requires_grad_() for x in (q, k, v))
    weights = torch.softmax(Q @ K.T / math.sqrt(3), dim=-1) * torch.tensor(keep) / (1 - p)
    theirs = torch.autograd.grad(weights @ V, (Q, K, V), T(g))
    ours = scratch.scaled_dot_product_attention_backward(
        q, k, v, g, dropout_p=p, rng=random.Random(100 + seed)
    )
    assert_grads_equal(ours, theirs)
    other = scratch.scaled_dot_product_attention_backward(
        q, k, v, g, dropout_p=p, rng=random.Random(999)
    )
    assert T(other[0]).sub(theirs[0]).abs().max() > 1e-3  # another mask gives other gradients
    assert plain != dropped


def test_a_planted_mistake_is_caught():
    # the comparison can fail: leaving out the D term (dS = P * dP) is far outside rel 1e-12
    rng = random.Random(7)
    q, k, v, g = gauss(rng, (3, 2)), gauss(rng, (4, 2)), gauss(rng, (4, 2)), gauss(rng, (3, 2))
    Q, K, V = (T(x).requires_grad_() for x in (q, k, v))
    P = torch.softmax(Q @ K.T / math.sqrt(2), dim=-1)
    dS = P * (T(g) @ V.T)  # the mistake: no "- D"
    wrong_dq = (dS @ K / math.sqrt(2)).detach()
    ours = scratch.scaled_dot_product_attention_backward(q, k, v, g)
    with pytest.raises(AssertionError, match="grad_query: max diff"):
        assert_grads_equal(ours[:1], (wrong_dq,), names=("grad_query",))


@pytest.mark.parametrize(
    "args, error, match",
    [
        (dict(grad_output=[[1.0]]), ValueError, r"grad_output: expected the output's shape"),
        (dict(grad_output="x"), TypeError, "grad_output: expected a matrix"),
        (dict(grad_output=[[math.nan, 1.0]] * 2), None, None),  # NaN propagates, no error
        (dict(dropout_p=1.5), ValueError, "dropout_p"),
        (dict(masked_rows="sometimes"), ValueError, "masked_rows"),
        (dict(rng=3), TypeError, "rng: expected a random.Random"),
    ],
)
def test_bad_arguments_are_named(args, error, match):
    x = [[1.0, 0.0], [0.0, 1.0]]
    call = {"query": x, "key": x, "value": x, "grad_output": x, **args}
    if error is None:
        dq, _, _ = scratch.scaled_dot_product_attention_backward(**call)
        assert all(math.isnan(t) for t in dq[0])
        return
    with pytest.raises(error, match=match):
        scratch.scaled_dot_product_attention_backward(**call)

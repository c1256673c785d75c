"""Example + Options -> trace_example: the typed request every backend's trace reads."""

import random

import pytest

import scratch
from scratch import backends
from scratch.core.example import Example
from scratch.core.options import Options


def rand(rng, rows, cols):
    return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]


def _backend(name: str):
    """Backend `name`, or a skip where it is not installed."""
    if name not in backends.available():
        pytest.skip(f"{name} unavailable")
    return backends.get(name)


def _cross_example(seed: int) -> tuple[Example, dict]:
    """A cross-attention GQA example with every projection and bias, and its keywords."""
    rng = random.Random(seed)
    x, key, value = rand(rng, 3, 4), rand(rng, 5, 3), rand(rng, 5, 2)
    params = {
        "w_q": rand(rng, 4, 4),
        "w_k": rand(rng, 3, 2),
        "w_v": rand(rng, 2, 2),
        "w_o": rand(rng, 4, 3),
        "b_q": rand(rng, 1, 4)[0],
        "b_k": rand(rng, 1, 2)[0],
        "b_v": rand(rng, 1, 2)[0],
        "b_o": rand(rng, 1, 3)[0],
    }
    labels = dict(tokens=["a", "b", "c"], key_tokens=["k", "l", "m", "n", "o"])
    heads = dict(num_heads=2, num_kv_heads=1)
    example = Example(x, key, value, params, **labels, **heads)
    kwargs = dict(x=x, key=key, value=value, **params, **labels, **heads)
    return example, kwargs


def test_example_keeps_only_given_params_in_order():
    example = Example([[1.0]], params={"w_v": [[2.0]], "w_q": [[1.0]], "b_o": None})
    assert list(example.params) == ["w_q", "w_v"]
    assert list(example.projections()) == list(scratch.ops.plan.PARAMS)
    assert example.projections()["w_k"] is None
    with pytest.raises(TypeError):
        example.params["w_k"] = [[1.0]]  # read-only


def test_example_refuses_unknown_names_and_value_without_key():
    with pytest.raises(ValueError, match=r"params: unknown name 'wq'"):
        Example([[1.0]], params={"wq": [[1.0]]})
    with pytest.raises(TypeError, match="params: expected a mapping"):
        Example([[1.0]], params=[("w_q", [[1.0]])])
    with pytest.raises(ValueError, match="value: given without key"):
        Example([[1.0]], value=[[1.0]])


def test_value_equal_to_key_is_one_input():
    key = [[1.0, 2.0]]
    assert Example([[1.0, 0.0]], key=key, value=key).value is None


@pytest.mark.parametrize("name", ["scratch", "numpy", "torch-cpu"])
def test_trace_example_is_what_trace_attention_gives(name):
    backend = _backend(name)
    example, kwargs = _cross_example(3)
    mask = [[True, False, True, True, False]] * 3
    options = Options(attn_mask=mask, scale=0.7, masked_rows="nan")
    a = backend.trace_example(example, options, dtype="float64")
    b = backend.trace_attention(
        **kwargs, attn_mask=mask, scale=0.7, masked_rows="nan", dtype="float64"
    )
    assert a.names() == b.names()
    assert a.tokens == b.tokens and a.key_tokens == b.key_tokens
    for step in b:
        assert a[step.name].tolist() == step.tolist(), step.name
    truth = scratch.trace_attention(**kwargs, attn_mask=mask, scale=0.7, masked_rows="nan")
    assert [c.name for c in scratch.compare_traces(a, truth) if not c.ok] == []


@pytest.mark.parametrize("name", ["scratch", "numpy", "torch-cpu"])
def test_trace_example_calls_the_hook_before_attention(name):
    seen = []
    example, _ = _cross_example(4)
    trace = _backend(name).trace_example(
        example, Options(), on_projected=lambda q, k, v, scale: seen.append((q, k, v, scale))
    )
    assert len(seen) == 1
    q, k, v, scale = seen[0]
    assert q is trace["q"].value and k is trace["k"].value and v is trace["v"].value
    assert scale == trace.scale


@pytest.mark.parametrize("name", ["scratch", "numpy", "torch-cpu"])
def test_trace_example_refuses_wrong_types_and_lse(name):
    backend = _backend(name)
    example, kwargs = _cross_example(5)
    with pytest.raises(TypeError, match="example: expected a scratch.Example"):
        backend.trace_example(kwargs, Options())
    with pytest.raises(TypeError, match="options: expected"):
        backend.trace_example(example, {"is_causal": True})
    with pytest.raises(ValueError, match="return_lse"):
        backend.trace_example(example, Options(return_lse=True))
    with pytest.raises(TypeError, match="on_projected"):
        backend.trace_example(example, Options(), on_projected=3)


def test_ground_truth_trace_example_dropout_backward_and_dtype():
    example, kwargs = _cross_example(6)
    dO = rand(random.Random(7), 3, 3)
    options = Options(dropout_p=0.5, rng=random.Random(11))
    a = scratch.trace.forward.trace_example(example, options, grad_output=dO)
    b = scratch.trace_attention(**kwargs, dropout_p=0.5, rng=random.Random(11), grad_output=dO)
    assert a.names() == b.names() and "grad_x" in a
    for step in b:
        assert a[step.name].tolist() == step.tolist(), step.name
    with pytest.raises(ValueError, match="dtype: expected None or 'float64'"):
        scratch.trace.forward.trace_example(example, Options(), dtype="float32")


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_backend_traces_refuse_dropout(name):
    example, _ = _cross_example(8)
    with pytest.raises(ValueError, match="dropout_p: the .* trace has no dropout"):
        _backend(name).trace_example(example, Options(dropout_p=0.1))

"""One front door per kind of call: the keyword signatures written once, Options built once,
the shapes planned once (AttentionPlan) with the GQA group in it."""

import inspect
import random

import pytest

import scratch
from scratch import backends
from scratch.core.front_doors import backward_door, forward_door, multi_head_door, trace_door
from scratch.core.options import Options
from scratch.ops.plan import AttentionPlan, plan_attention

KINDS = (
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "multi_head_attention",
    "trace_attention",
)


def test_plan_attention_decides_dims_and_group_once():
    plan = plan_attention((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 7), enable_gqa=True)
    assert plan == AttentionPlan((2, 4), (2, 2), 3, 6, 5, 7, 2)
    assert plan.scores_shape == (2, 4, 3, 6) and plan.output_shape == (2, 4, 3, 7)
    assert [plan.kv_index((1, h)) for h in range(4)] == [(1, 0), (1, 0), (1, 1), (1, 1)]
    same = plan_attention((4, 3, 5), (4, 6, 5), (4, 6, 7))
    assert same.group == 1 and same.kv_index((3,)) == (3,)
    mqa = plan_attention((6, 3, 5), (1, 6, 5), (1, 6, 7), enable_gqa=True)
    assert mqa.group == 6 and mqa.kv_index((5,)) == (0,)


def test_plan_attention_errors_name_the_argument():
    with pytest.raises(ValueError, match="^key: expected at least 2 dims"):
        plan_attention((4, 6), (6,), (6,))
    with pytest.raises(ValueError, match="^key: 2 key/value heads do not divide 3"):
        plan_attention((3, 2, 4), (2, 2, 4), (2, 2, 4), enable_gqa=True)
    with pytest.raises(ValueError, match="^grad_output: expected the output's shape"):
        plan_attention((2, 4), (3, 4), (3, 5)).check_grad_output((2, 4))


def _recorder(*names):
    """An implementation that returns what it was called with."""

    def impl(*args, **more):
        """records its call"""
        return dict(zip(names, args)), more

    return impl


def test_forward_door_builds_one_options_and_passes_the_rest_on():
    door = forward_door(_recorder("query", "key", "value", "options"))
    rng = random.Random(0)
    called, more = door(1, 2, 3, None, 0.25, True, 0.5, masked_rows="nan", rng=rng, dtype="x")
    assert called["options"] == Options(
        None, True, scale=0.5, dropout_p=0.25, enable_gqa=False, masked_rows="nan", rng=rng
    )
    assert more == {"dtype": "x"}
    own = forward_door(_recorder("query", "key", "value", "options"), own_rng=True)
    called, more = own(1, 2, 3, dropout_p=0.5, rng=7)  # an int seed: this backend's own rule
    assert called["options"].rng is None and more == {"rng": 7}
    with pytest.raises(TypeError, match="rng: expected a random.Random"):
        door(1, 2, 3, dropout_p=0.5, rng=7)  # the ground truth's rule, checked by Options


def test_backward_multi_head_and_trace_doors():
    back = backward_door(_recorder("query", "key", "value", "grad_output", "options"))
    called, _ = back(1, 2, 3, 4, enable_gqa=True)
    assert called["grad_output"] == 4 and called["options"].enable_gqa
    heads = multi_head_door(_recorder("query", "key", "value", "params", "heads", "options"))
    called, _ = heads(1, 2, 3, "wq", "wk", "wv", num_heads=4, num_kv_heads=2, b_o=None)
    assert called["params"]["w_q"] == "wq" and called["heads"] == (4, 2)
    with pytest.raises(TypeError, match="w_k: expected a projection matrix"):
        heads(1, 2, 3, "wq", None, "wv")
    trace = trace_door(_recorder("example", "options"))
    called, more = trace([[1.0]], w_q=[[2.0]], tokens=["a"], is_causal=True, dtype="float64")
    assert isinstance(called["example"], scratch.Example) and called["options"].is_causal
    assert called["example"].params == {"w_q": [[2.0]]} and more == {"dtype": "float64"}


@pytest.mark.parametrize("name", ["scratch", "numpy", "torch-cpu"])
def test_every_backend_speaks_through_the_same_doors(name):
    """Each public function's parameters are the ground truth's door's (the door's own **more
    carries the backend's extras), so the signature exists once."""
    if name not in backends.available():
        pytest.skip(f"{name} unavailable")
    backend = backends.get(name)
    truth = {
        "scaled_dot_product_attention": scratch.scaled_dot_product_attention,
        "scaled_dot_product_attention_backward": scratch.scaled_dot_product_attention_backward,
        "multi_head_attention": scratch.multi_head_attention,
        "trace_attention": scratch.trace_attention,
    }
    for kind in KINDS:
        ours = getattr(backend, kind)
        expected = list(inspect.signature(truth[kind]).parameters)
        assert list(inspect.signature(ours).parameters) == expected, kind
        assert expected[-1] == "more", kind


def test_public_signatures_keep_pytorchs_names():
    params = list(inspect.signature(scratch.scaled_dot_product_attention).parameters)
    assert params[:7] == [
        "query",
        "key",
        "value",
        "attn_mask",
        "dropout_p",
        "is_causal",
        "scale",
    ]
    back = list(inspect.signature(scratch.scaled_dot_product_attention_backward).parameters)
    assert back[:4] == ["query", "key", "value", "grad_output"]


@pytest.mark.parametrize("backend", ["scratch", "numpy", "torch"])
def test_a_misspelled_keyword_is_named_with_the_public_function(backend):
    """The door names itself (not the backend's implementation) and the keyword misspelled."""
    from scratch import backends

    if backend != "scratch":
        pytest.importorskip(backend)
    b = backends.get(backend)
    x = [[1.0, 2.0], [3.0, 4.0]]
    sdpa = scratch.scaled_dot_product_attention
    backward = scratch.scaled_dot_product_attention_backward
    calls = [
        ("scaled_dot_product_attention", lambda: b.scaled_dot_product_attention(x, x, x, casual=1)),
        ("multi_head_attention", lambda: b.multi_head_attention(x, x, x, x, x, x, num_head=2)),
        ("trace_attention", lambda: b.trace_attention(x, w_qq=x)),
        ("scaled_dot_product_attention", lambda: sdpa(x, x, x, is_casual=1)),
        ("scaled_dot_product_attention_backward", lambda: backward(x, x, x, x, is_casual=1)),
    ]  # fmt: skip
    for name, call in calls:
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument"):
            call()


def test_flex_doors_build_one_flex_options():
    """flex_attention's and its backward's keywords, positional or named, become one FlexOptions
    (the backward's has return_lse False); the backend's own keywords pass through."""
    from scratch.core.front_doors import flex_backward_door, flex_door
    from scratch.core.options import FlexOptions

    mod, bm = (lambda s, b, h, i, j: s), object()
    door = flex_door(_recorder("query", "key", "value", "options", "kernel"))
    called, more = door(1, 2, 3, mod, bm, 0.5, True, True, sinks=[0.1], kernel="x")
    assert called["options"] == FlexOptions(mod, bm, 0.5, True, True, [0.1])
    assert more == {"kernel": "x"}
    back = flex_backward_door(_recorder("query", "key", "value", "grad_output", "options"))
    called, _ = back(1, 2, 3, 4, mod, bm, 0.5, True, sinks=[0.2])
    assert called["grad_output"] == 4
    assert called["options"] == FlexOptions(mod, bm, 0.5, True, False, [0.2])


@pytest.mark.parametrize("name", ["scratch", "numpy", "torch-cpu"])
def test_every_flex_attention_keeps_pytorchs_signature(name):
    """flex_attention and its backward: PyTorch's parameters in PyTorch's order on every backend,
    and a misspelled keyword named with the public function."""
    if name not in backends.available():
        pytest.skip(f"{name} unavailable")
    backend = scratch if name == "scratch" else backends.get(name)
    forward = list(inspect.signature(backend.flex_attention).parameters)
    assert forward == ["query", "key", "value", "score_mod", "block_mask", "scale", "enable_gqa",
                       "return_lse", "sinks", "more"]  # fmt: skip
    backward = list(inspect.signature(backend.flex_attention_backward).parameters)
    assert backward == ["query", "key", "value", "grad_output", "score_mod", "block_mask",
                        "scale", "enable_gqa", "sinks", "more"]  # fmt: skip
    x = [[[[1.0, 2.0]]]]
    for fn, args in ((backend.flex_attention, (x, x, x)), (backend.flex_attention_backward,
                                                          (x, x, x, x))):  # fmt: skip
        public = fn.func.__name__ if hasattr(fn, "func") else fn.__name__
        with pytest.raises(TypeError, match=rf"^{public}\(\) got an unexpected keyword argument"):
            fn(*args, enable_gpa=True)

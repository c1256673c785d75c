"""From a session to the core: the example and options the window asks for, and the causal mask
grid a backend gets."""

from __future__ import annotations

import dataclasses

import pytest

import scratch
from gui import controller, core_api
from gui import session as sm
from tests.journey_sessions import journey_typed


def test_example_and_options_map_the_session():
    s = dataclasses.replace(
        journey_typed(),
        scale_mode="custom",
        scale_value=0.5,
        mask_mode="causal-bottom-right",
        masked_rows="nan",
    )
    example, options = controller.example_and_options(s)
    assert options.scale == 0.5 and options.masked_rows == "nan" and "w_q" not in example.params
    assert example.x == [list(r) for r in s.query] and example.tokens == list(s.tokens)
    assert options.attn_mask.tolist() == [[j <= i for j in range(6)] for i in range(6)]
    assert not options.is_causal and options.dropout_p == 0.0
    _, sqrt = controller.example_and_options(dataclasses.replace(s, scale_mode="sqrt"))
    _, none = controller.example_and_options(dataclasses.replace(s, scale_mode="none"))
    assert (sqrt.scale, none.scale) == (None, 1.0)
    _, top = controller.example_and_options(dataclasses.replace(s, mask_mode="causal-top-left"))
    assert top.is_causal is True and top.attn_mask is None
    projected = sm.random_session(1, 3, 4, 2, 3, 2, 1)
    example, _ = controller.example_and_options(projected)
    assert list(example.params) == ["w_q", "w_k", "w_v"] and example.key is None
    assert (example.num_heads, example.num_kv_heads) == (2, 1)


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_the_causal_mask_array_is_the_ground_truths_grid(align):
    """core_api.causal_mask_array (what a backend gets) equals scratch.causal_mask, any shape."""
    for L, S in [(1, 1), (4, 4), (3, 7), (7, 3), (1, 5), (5, 1)]:
        found = core_api.causal_mask_array(L, S, align)
        assert found.dtype == bool and found.tolist() == scratch.causal_mask(L, S, align)
    with pytest.raises(ValueError, match="align: expected 'top-left' or 'bottom-right'"):
        core_api.causal_mask_array(2, 2, "middle")

"""plan_multi_head: the multi-head shape rules on shapes alone; messages name the argument."""

import pytest

from scratch.ops.plan import PARAMS, HeadPlan, plan_multi_head, projections


def test_self_attention_with_projections():
    plan = plan_multi_head((2, 5, 8), w_q=(8, 12), w_k=(8, 12), w_v=(8, 6), w_o=(6, 7), num_heads=3)
    assert plan == HeadPlan((2,), 5, 5, 3, 3, 8, 8, 8, 4, 2, 7)
    assert (plan.group, plan.head_lead, plan.scores_shape) == (1, (2, 3), (2, 3, 5, 5))


def test_cross_grouped_query_attention():
    plan = plan_multi_head(
        (4, 8), (6, 5), (6, 3), w_q=(8, 8), w_k=(5, 4), w_v=(3, 2), num_heads=4, num_kv_heads=2
    )
    assert (plan.L, plan.S, plan.d_head, plan.d_v, plan.group) == (4, 6, 2, 1, 2)
    assert (plan.d_key, plan.d_value, plan.d_out) == (5, 3, 4)


def test_no_projections_split_the_inputs_themselves():
    plan = plan_multi_head((3, 6), num_heads=2)
    assert (plan.d_head, plan.d_v, plan.d_out) == (3, 3, 6)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ({"value": (3, 4)}, ValueError, "value: given without key"),
        ({"num_heads": 0}, ValueError, "num_heads: expected a positive integer"),
        ({"num_heads": 2, "num_kv_heads": 3}, ValueError, "num_kv_heads: 3 does not divide"),
        ({"key": (4,)}, ValueError, "key: expected at least 2 dims"),
        ({"key": (2, 3, 4)}, ValueError, r"key: leading dims must match query's \(\)"),
        ({"key": (3, 4), "value": (2, 4)}, ValueError, "value: length must match key's"),
        ({"w_q": (4, 4, 1)}, ValueError, "w_q: expected a 2-D matrix"),
        ({"w_q": (5, 4)}, ValueError, "w_q: expected 4 rows to match the input width"),
        ({"w_q": (4, 3), "num_heads": 2}, ValueError, "w_q: 3 columns do not split into 2 heads"),
        ({"w_v": (4, 3), "num_heads": 2}, ValueError, r"w_v: 3 columns .* \(num_kv_heads\)"),
        ({"b_q": (4,)}, ValueError, "b_q: given without w_q; expected w_q as well"),
        ({"w_k": (4, 4), "b_k": (3,)}, ValueError, r"b_k: expected shape \(4,\)"),
        ({"b_v": (4,)}, ValueError, "b_v: given without w_v"),
        ({"w_q": (4, 2), "b_q": (4,)}, ValueError, r"b_q: expected shape \(2,\)"),
        ({"num_heads": 3}, ValueError, "query: width 4 does not split into 3 heads"),
        ({"w_k": (4, 2)}, ValueError, "w_k: key heads are 2 wide but query heads are 4 wide"),
        ({"w_o": (3, 2)}, ValueError, r"w_o: expected 4 rows \(num_heads \* d_v\)"),
        ({"b_o": (4,)}, ValueError, "b_o: given without w_o"),
        ({"w_o": (4, 2), "b_o": (4,)}, ValueError, r"b_o: expected shape \(2,\)"),
    ],
)
def test_each_rule_names_its_argument(args, error, match):
    with pytest.raises(error, match=match):
        plan_multi_head((3, 4), **args)


def test_projections_names_the_values_in_params_order():
    values = [object() for _ in PARAMS]
    assert projections(*values) == dict(zip(PARAMS, values))
    names = ["w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"]
    assert list(projections(*[None] * 8)) == names


def test_projections_refuses_the_wrong_count():
    with pytest.raises(TypeError, match="projections: expected 8 values"):
        projections(None, None, None)

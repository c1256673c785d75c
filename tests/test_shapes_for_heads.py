"""scratch.ops.plan.shapes_for_heads is plan_multi_head's inverse: the shapes it gives plan back to
the very heads they were made for (the window's resize asks it, not its own arithmetic)."""

import itertools

from scratch.ops.plan import plan_multi_head, shapes_for_heads


def test_projected_shapes_plan_back_to_their_heads():
    for H, group, d_head, d_v, d_model, d_kv_in in itertools.product(
        (1, 2, 4), (1, 2), (1, 3), (2, 5), (4, 7), (4, 6)
    ):
        Hkv = H // group if H % group == 0 else H
        shapes = shapes_for_heads(5, 3, (H, Hkv), d_head, d_v, (d_model, d_kv_in))
        weights = {n: shapes[n] for n in ("w_q", "w_k", "w_v")}
        plan = plan_multi_head(shapes["query"], shapes["key"], shapes["value"], **weights,
                               num_heads=H, num_kv_heads=Hkv)  # fmt: skip
        want = (5, 3, H, Hkv, d_model, d_kv_in, d_kv_in, d_head, d_v, H * d_v)
        assert (plan.L, plan.S, plan.num_heads, plan.num_kv_heads, plan.d_model, plan.d_key,
                plan.d_value, plan.d_head, plan.d_v, plan.d_out) == want  # fmt: skip


def test_without_inputs_the_tables_are_the_heads_side_by_side():
    for H, Hkv, d_head, d_v in ((1, 1, 2, 3), (4, 2, 3, 1), (6, 3, 1, 4)):
        shapes = shapes_for_heads(4, 7, (H, Hkv), d_head, d_v)
        assert set(shapes) == {"query", "key", "value"}
        # q, k, v as the inputs of a call without projections: each input splits into its heads
        plan = plan_multi_head(shapes["query"], num_heads=H)
        assert (plan.L, plan.d_head) == (4, d_head)
        assert shapes["key"] == (7, Hkv * d_head) and shapes["value"] == (7, Hkv * d_v)


def test_a_resized_session_is_what_the_plan_says():
    from gui.state import session as sm
    from gui.state.input_modes import with_mode

    s = sm.random_session(0, num_tokens=3, d_model=4, d_k=2, d_v=3, num_heads=2, num_kv_heads=1)
    big = sm.resized(s, num_tokens=5, d_k=4, num_heads=4, num_kv_heads=2, d_model=6)
    shapes = shapes_for_heads(5, 5, (4, 2), 4, 3, (6, 6))
    for name in ("query", "w_q", "w_k", "w_v"):
        m = big.matrix(name)
        assert (len(m), len(m[0])) == shapes[name], name
    qkv = with_mode(big, "qkv")
    for name, shape in shapes_for_heads(5, 5, (4, 2), 4, 3).items():
        m = qkv.matrix(name)
        assert (len(m), len(m[0])) == shape, name

"""A variant in the ground truth's trace: RoPE, score change, mask and sinks as steps, equal to
scratch.flex_attention on the same q, k, v; hover texts; refusals. Standard library only."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

import scratch
from scratch.core.options import Options
from scratch.trace.forward import trace_example
from scratch.variants import (
    ALiBi,
    Causal,
    ChunkedLocal,
    Documents,
    LearnedSinks,
    PrefixLM,
    Rotary,
    SlidingWindow,
    Softcap,
    combine,
)

EPS = 2.0**-52


def _matrix(rng: random.Random, rows: int, cols: int) -> list[list[float]]:
    return [[rng.uniform(-2.0, 2.0) for _ in range(cols)] for _ in range(rows)]


def _heads(m: list[list[float]], heads: int) -> list[list[list[float]]]:
    """(n, heads * d) -> (heads, n, d)."""
    d = len(m[0]) // heads
    return [[row[h * d : (h + 1) * d] for row in m] for h in range(heads)]


# name -> (the variant the trace gets, the flex side written out separately:
#          mask_mod, score_mod, sinks, rotary)
def _cases(L: int, S: int, H: int) -> dict:
    shift = S - L
    window, cap = SlidingWindow(2, 0, shift), Softcap(2.0)
    alibi = ALiBi.for_heads(H)
    sinks = [0.5, -1.0][:H]
    rope = Rotary(base=100.0)
    docs = Documents(
        [0] * (L // 2) + [1] * (L - L // 2), [0] * (S - L + L // 2) + [1] * (L - L // 2)
    )
    return {
        "window": (window, window.mask_mod, None, None, None),
        "softcap": (cap, None, cap.score_mod, None, None),
        "window+softcap+sinks": (
            combine(window, cap, LearnedSinks(sinks)), window.mask_mod, cap.score_mod, sinks, None
        ),
        "chunked+alibi": (
            combine(ChunkedLocal(2, shift), alibi), ChunkedLocal(2, shift).mask_mod,
            alibi.score_mod, None, None,
        ),
        "prefix+rope": (combine(PrefixLM(2, shift), rope), PrefixLM(2, shift).mask_mod, None, None,
                        rope),
        "documents+causal+softcap+alibi": (
            combine(docs, Causal(shift), cap, alibi),
            lambda b, h, i, j: docs.mask_mod(b, h, i, j) and j <= i + shift,
            lambda s, b, h, i, j: alibi.score_mod(cap.score_mod(s, b, h, i, j), b, h, i, j),
            None, None,
        ),
        "rope+sinks": (combine(rope, LearnedSinks(sinks)), None, None, sinks, rope),
    }  # fmt: skip


def _flex_view(trace, H: int, Hkv: int, flex, L: int, S: int) -> tuple:
    """flex_attention's (output, lse) for the trace's own q, k, v, the flex side as given."""
    mask_mod, score_mod, sinks, rope = flex
    q, k, v = (_heads(trace[n].tolist(), h) for n, h in (("q", H), ("k", Hkv), ("v", Hkv)))
    if rope is not None:  # the test turns q and k itself: queries sit at i + S - L
        q = [scratch.rotary(m, [i + S - L for i in range(L)], base=rope.base) for m in q]
        k = [scratch.rotary(m, list(range(S)), base=rope.base) for m in k]
    block = None if mask_mod is None else scratch.create_block_mask(mask_mod, 1, H, L, S)
    out, lse = scratch.flex_attention(
        [q], [k], [v], score_mod, block, scale=trace.scale, enable_gqa=H != Hkv,
        return_lse=True, sinks=sinks,
    )  # fmt: skip
    return out[0], lse[0], q, k


def _close(got: float, want: float, tol: float, what: str) -> None:
    assert abs(got - want) <= tol, f"{what}: {got!r} vs {want!r} (tolerance {tol:.3g})"


@pytest.mark.parametrize("shape", [(5, 5, 2, 2), (5, 5, 2, 1), (2, 5, 2, 2)])
@pytest.mark.parametrize("name", list(_cases(5, 5, 2)))
@pytest.mark.parametrize("seed", range(3))
def test_a_variants_trace_equals_flex_attention(name, shape, seed):
    """Output, weights (= exp(score - lse)) and the masked cells of every head, as flex says.

    Tolerance: the trace's weights are exp(x - top) / total, flex's exp(x - lse) with
    lse = top + log(total); each is within (2 |lse| + 4) eps of the exact weight relative to
    itself, so an output entry (a sum of weights times v) is within (2 max|lse| + 8) eps max|v|.
    """
    L, S, H, Hkv = shape
    rng = random.Random(seed)
    d = 4
    x = _matrix(rng, L, 3)
    params = {"w_q": _matrix(rng, 3, H * d), "w_k": _matrix(rng, 3, Hkv * d),
              "w_v": _matrix(rng, 3, Hkv * 2)}  # fmt: skip
    key = None if L == S else _matrix(rng, S, 3)  # L < S: the last L positions (decode)
    variant, *flex = _cases(L, S, H)[name]
    example = scratch.Example(x, key, None, params, num_heads=H, num_kv_heads=Hkv)
    trace = trace_example(example, Options(variant=variant))
    out, lse, q_rot, k_rot = _flex_view(trace, H, Hkv, flex, L, S)
    if flex[3] is not None:  # RoPE: the rotated steps are the test's own turns
        assert trace["q_rotated"].tolist() == [
            sum((q_rot[h][i] for h in range(H)), []) for i in range(L)
        ]
        assert trace["k_rotated"].tolist() == [
            sum((k_rot[h][j] for h in range(Hkv)), []) for j in range(S)
        ]
    else:
        assert "q_rotated" not in trace
    assert ("sink_weights" in trace) == (flex[2] is not None)
    v_top = max(abs(c) for row in trace["v"].tolist() for c in row)
    heads = trace["head_outputs"].tolist()
    masked, weights = trace["masked"].tolist(), trace["weights"].tolist()
    for h in range(H):
        top = max(abs(x) for x in lse[h] if math.isfinite(x))
        tol_w, tol_o = (2 * top + 4) * EPS * 2, (2 * top + 8) * EPS * v_top * 2
        for i in range(L):
            for c, want in enumerate(out[h][i]):
                _close(heads[h][i][c], want, tol_o, f"{name} head_outputs[{h}][{i}][{c}]")
            for j in range(S):
                seen = flex[0] is None or flex[0](0, h, i, j)
                assert (masked[h][i][j] != -math.inf) == seen, f"{name} masked[{h}][{i}][{j}]"
                want = math.exp(masked[h][i][j] - lse[h][i]) if seen else 0.0
                _close(
                    weights[h][i][j],
                    want,
                    tol_w * max(want, 1e-300),
                    f"{name} weights[{h}][{i}][{j}]",
                )
            if flex[2] is not None:
                want = math.exp(flex[2][h] - lse[h][i])
                got = trace["sink_weights"].tolist()[h][i]
                _close(got, want, tol_w * want, f"{name} sink_weights[{h}][{i}]")


# ---------------------------------------------------------------- words


def _one_feature_trace(variant, values=(1.0, 6.2, 2.0, 4.0)) -> object:
    """q = k = v = x, one feature: scores[i][j] = x_i x_j (scale 0.5)."""
    x = [[v] for v in values]
    return trace_example(scratch.Example(x), Options(scale=0.5, variant=variant))


def test_hover_names_the_score_change_with_its_numbers():
    """scores[3][1] = 4 * 6.2 = 24.8, scaled 12.4, softcapped: 30 tanh(12.4 / 30) = 11.74."""
    trace = _one_feature_trace(Softcap(30.0))
    text = scratch.explain(trace, "scaled", (3, 1)).text
    assert text == (
        "scaled[3][1] = score_mod(scores[3][1] * scale): 24.8 * 0.5 = 12.4; "
        "softcap(12.4) = 30 * tanh(12.4 / 30) = 11.74"
    )
    assert f"{trace['scaled'].tolist()[3][1]:.4g}" == "11.74"
    assert trace["scaled"].formula == "scaled = score_mod(scores * scale)"
    assert trace.described()["variant"] == "softcap: 30 * tanh(score / 30)"
    assert "variant" not in trace_example(scratch.Example([[1.0]]), Options()).described()
    assert "softcap: 30 * tanh(score / 30)" in trace["scaled"].note


def test_hover_says_why_the_rule_masks_and_shows_the_sink_column():
    trace = _one_feature_trace(combine(SlidingWindow(1, 0), ALiBi([0.5]), LearnedSinks([0.0])))
    assert scratch.explain(trace, "masked", (3, 1)).text == (
        "masked[3][1] = -inf: masked (window: key 1 outside [2, 3])"
    )
    assert (
        "alibi(12.4) = 12.4 + 0.5 * (1 - 3) = 11.4" in scratch.explain(trace, "scaled", (3, 1)).text
    )
    assert (
        trace["masked"].note == "variant: window (1, 0): key j seen by query i iff i - 1 <= j <= i"
    )
    # row 0 sees key 0 (score 0.5) and the sink (logit 0): weights e^0.5 / (e^0.5 + 1)
    sink = scratch.explain(trace, "sink_weights", (0,))
    assert sink.text.startswith("sink_weights[0] = exp(sink[0] - max) / (sum_j exp(masked[0][j]")
    w0, s0 = trace["weights"].tolist()[0][0], trace["sink_weights"].tolist()[0]
    _close(w0, math.exp(0.5) / (math.exp(0.5) + 1.0), 4 * EPS, "weights[0][0]")
    _close(s0, 1.0 / (math.exp(0.5) + 1.0), 4 * EPS, "sink_weights[0]")
    text = scratch.explain(trace, "weights", (3, 2)).text
    assert "+ exp(sink[0] - max))" in text and "seen (window: key 2 in [2, 3])" in text


def test_rope_is_a_step_with_angle_cos_and_sin():
    trace = trace_example(
        scratch.Example([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), Options(variant=Rotary())
    )
    assert trace.names()[4:7] == ["q_rotated", "k_rotated", "scores"]
    text = scratch.explain(trace, "q_rotated", (2, 0)).text
    assert text.startswith("q_rotated[2][0] (head 0, position 2): q_rot[0] = q[0] cos - q[1] sin")
    assert "angle 2 * 10000^(-0/2) = 2, cos -0.4161, sin 0.9093" in text
    _close(trace["q_rotated"].tolist()[2][0], math.cos(2) - math.sin(2), 2 * EPS, "q_rotated")


# ---------------------------------------------------------------- refusals


def test_bad_variants_are_refused_by_name():
    with pytest.raises(TypeError, match="^variant: expected a scratch.variants object or None"):
        Options(variant="softcap")
    example = scratch.Example([[1.0], [2.0]], num_heads=1)
    with pytest.raises(
        ValueError, match=r"^sinks: expected one logit per query head \(1\), found 2"
    ):
        trace_example(example, Options(variant=LearnedSinks([0.0, 1.0])))
    with pytest.raises(ValueError, match=r"^slopes: expected one slope per query head \(H = 1\)"):
        trace_example(example, Options(variant=ALiBi([0.5, 0.25])))
    with pytest.raises(ValueError, match="^base: expected a finite number > 0"):
        Rotary(base=0.0)
    with pytest.raises(ValueError, match="^dropout_p: a variant's trace has no dropout"):
        trace_example(example, Options(variant=Softcap(1.0), dropout_p=0.5))
    with pytest.raises(ValueError, match="^variant: the backward trace takes no variant yet"):
        trace_example(example, Options(variant=Softcap(1.0)), grad_output=[[1.0], [1.0]])


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_the_backends_trace_a_variant_with_the_ground_truth_s_steps(name):
    """Values: tests/test_backend_variant_traces.py; here the steps and the one refusal."""
    pytest.importorskip("numpy" if name == "numpy" else "torch")
    from scratch import backends

    example = scratch.Example([[1.0], [2.0]])
    options = Options(variant=Softcap(1.0))
    traced = backends.get(name).trace_example(example, options)
    assert traced.names() == trace_example(example, options).names()
    with pytest.raises(ValueError, match="^dropout_p: the .* trace has no dropout"):
        backends.get(name).trace_example(example, Options(variant=Softcap(1.0), dropout_p=0.5))


# ---------------------------------------------------------------- the window's plain data, decode


def test_a_choice_builds_its_variant_for_the_call_s_sizes():
    from scratch.variants import VariantChoice

    def keys(variant, L, S):
        return [[j for j in range(S) if variant.mask_mod(0, 0, i, j)] for i in range(L)]

    window = VariantChoice(mask="window", left=1, right=0)
    assert keys(window.variant(4, 4, 1), 4, 4) == [[0], [0, 1], [1, 2], [2, 3]]
    # decode: one query at the last position of 4 keys (bottom-right), or at 0 (top-left)
    assert keys(window.variant(1, 4, 1), 1, 4) == [[2, 3]]
    assert keys(dataclasses.replace(window, align="top-left").variant(1, 4, 1), 1, 4) == [[0]]
    docs = VariantChoice(mask="documents", cu_seqlens=(0, 2, 5))
    assert keys(docs.variant(5, 5, 1), 5, 5)[1:3] == [[0, 1], [2, 3, 4]]
    assert keys(docs.variant(1, 3, 1, length=5), 1, 3) == [[2]]  # token 2 opens document 1
    full = VariantChoice(softcap=30.0, alibi=True, sinks=(0.5, 0.25), rope="interleaved")
    assert [type(p).__name__ for p in full.variant(3, 3, 2).parts] == [
        "Softcap", "ALiBi", "LearnedSinks", "Rotary"
    ]  # fmt: skip
    assert full.variant(3, 3, 2).parts[1].slopes == (0.0625, 0.00390625)  # the paper's, 2 heads
    # ALiBi's query at its true position: one query after 3 keys sits at 3 (bias 0.5 * (1 - 3))
    decode_alibi = VariantChoice(alibi=True, slopes=(0.5,)).variant(1, 4, 1)
    assert decode_alibi.shift == 3 and decode_alibi.score_mod(0.0, 0, 0, 0, 1) == -1.0
    assert VariantChoice().variant(3, 3, 1) is None
    assert VariantChoice.from_dict(full.to_dict()) == full
    with pytest.raises(ValueError, match=r"^mask: expected one of none, causal"):
        VariantChoice(mask="diagonal")
    with pytest.raises(
        ValueError, match=r"^cu_seqlens: expected a value like \(\), found \[0, 1.5\]"
    ):
        VariantChoice.from_dict({"cu_seqlens": [0, 1.5]})
    with pytest.raises(ValueError, match=r"^alibi: expected a value like False, found 1"):
        VariantChoice.from_dict({"alibi": 1})


def test_each_decode_step_equals_that_row_of_the_full_trace():
    """Incremental equals full, exactly: window + softcap + ALiBi + sinks + RoPE, 2 heads."""
    from scratch.decode.example import decode_example
    from scratch.variants import VariantChoice

    rng = random.Random(7)
    params = {n: _matrix(rng, 3, 4) for n in ("w_q", "w_k", "w_v")}
    example = scratch.Example(_matrix(rng, 5, 3), params=params, num_heads=2)
    choice = VariantChoice(mask="window", left=2, softcap=3.0, alibi=True, sinks=(0.1, -0.3),
                           rope="half")  # fmt: skip
    full = trace_example(example, Options(variant=choice.variant(5, 5, 2)))
    for n in range(1, 6):
        step = trace_example(decode_example(example, n), Options(variant=choice.variant(1, n, 2)))
        assert step.tokens == (f"t{n - 1}",) and step.key_tokens == full.tokens[:n]
        assert step["output"].tolist() == [full["output"].tolist()[n - 1]], n
        for h in range(2):
            assert step["weights"].tolist()[h] == [full["weights"].tolist()[h][n - 1][:n]], (n, h)
    with pytest.raises(ValueError, match=r"^decode: expected a cache of 1 to 5 tokens, found 6"):
        decode_example(example, 6)


def test_a_decode_step_s_trace_equals_scratch_decode_attention():
    """The window's decode step (variants shifted to the query's position) against the decode
    module's convention (unshifted variants, q_idx = S - L + i): the same output, within the
    flex tolerance above. RoPE aside (decode_attention takes q and k as given)."""
    from scratch.decode.example import decode_example
    from scratch.variants import VariantChoice

    rng = random.Random(11)
    params = {n: _matrix(rng, 3, 4) for n in ("w_q", "w_k", "w_v")}
    example = scratch.Example(_matrix(rng, 6, 3), params=params, num_heads=2)
    choice = VariantChoice(mask="window", left=2, softcap=3.0, alibi=True, sinks=(0.4, -0.2))
    unshifted = choice.variant(6, 6, 2)  # shift 0: true positions are the mods' q_idx
    for n in range(1, 7):
        step = trace_example(decode_example(example, n), Options(variant=choice.variant(1, n, 2)))
        q, k, v = (_heads(step[name].tolist(), 2) for name in "qkv")
        out, lse = scratch.decode_attention(
            [q], [k], [v], unshifted.score_mod, unshifted.mask_mod, scale=step.scale,
            return_lse=True, sinks=[0.4, -0.2],
        )  # fmt: skip
        v_top = max(abs(c) for row in step["v"].tolist() for c in row)
        got = step["head_outputs"].tolist()
        for h in range(2):
            tol = (2 * abs(lse[0][h][0]) + 8) * EPS * 2 * v_top
            for c, want in enumerate(out[0][h][0]):
                _close(got[h][0][c], want, tol, f"step {n} head_outputs[{h}][0][{c}]")

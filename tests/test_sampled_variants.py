"""The sampled check of a variant (softcap, ALiBi, learned sinks, RoPE, with a sliding window):
every step of the sampled rows against the ground truth's own variant steps for those rows.

A correct NumPy or torch trace passes every step on every seed; a planted mistake (the softcap
applied twice, ALiBi's sign flipped, RoPE turned the wrong way, the sink left out of the
denominator, the window one key wider) fails at the step where it is, and the steps before it
pass. The threshold is lowered to FROM tokens, so the sampled path runs on L_SAMPLED tokens in
milliseconds (16 of 32 rows sampled), not on thousands.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from gui.state import controller, sampled_check
from gui.state.session import random_session
from scratch.core.options import Options
from scratch.trace.forward import trace_example
from scratch.trace.variant_rows import rows_call, variant_rows
from scratch.variants import ALiBi, Rotary, SlidingWindow, Softcap, VariantChoice
from scratch.variants.arrays import module_of

FROM = 24  # the sampled check's threshold, lowered for speed
L_SAMPLED = FROM + 8
ROWS = sampled_check.SAMPLE_ROWS
V = VariantChoice
VARIANTS = {  # name: (choice, session changes)
    "softcap": (V(softcap=2.0), {}),
    "alibi": (V(alibi=True), {}),
    "sinks": (V(sinks=(0.5, -1.0)), {}),
    "rope": (V(rope="half"), {}),
    "window-all": (
        V(mask="window", left=3, softcap=3.0, alibi=True, sinks=(0.2, 1.0), rope="interleaved"),
        {},
    ),
    "gqa-window-rope-softcap": (V(mask="window", left=2, rope="half", softcap=2.0), {"kv": 1}),
    "mask-nan-softcap": (V(softcap=2.0), {"custom": True, "masked_rows": "nan"}),
}


@pytest.fixture(autouse=True)
def _low_threshold(monkeypatch):
    """Sampling from FROM tokens on (the rule is the same at 256)."""
    monkeypatch.setattr(sampled_check, "SAMPLE_FROM_TOKENS", FROM)


def _session(seed: int, backend: str, name: str):
    """A random L_SAMPLED-token session with variant `name` on `backend` in float32."""
    choice, changes = VARIANTS[name]
    changes = dict(changes)
    s = random_session(
        seed, num_tokens=L_SAMPLED, d_model=8, d_k=4, d_v=4, num_heads=2,
        num_kv_heads=changes.pop("kv", 2),
    )  # fmt: skip
    if changes.pop("custom", False):  # a given mask: random cells, row 0 (always sampled) empty
        rng = random.Random(seed)
        grid = [[i > 0 and rng.random() < 0.7 for _ in range(L_SAMPLED)] for i in range(L_SAMPLED)]
        choice = dataclasses.replace(choice, mask="drawn", drawn=tuple(map(tuple, grid)))
    return dataclasses.replace(s, backend=backend, dtype="float32", variant=choice, **changes)


def _names(name: str) -> list[str]:
    """The sampled check's steps for variant `name`, in trace order (k_rotated: every key)."""
    choice = VARIANTS[name][0]
    rows = [f"{n} ({ROWS} sampled rows)" for n in ("scores", "scaled", "masked", "weights")]
    if choice.rope != "none":
        rows = [f"q_rotated ({ROWS} sampled rows)", "k_rotated", *rows]
    if choice.sinks:
        rows.append(f"sink_weights ({ROWS} sampled rows)")
    return rows + [f"head_outputs ({ROWS} sampled rows)", f"output ({ROWS} sampled rows)"]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_correct_trace_passes_every_variant_step(backend, name, seed):
    """The window's path (the ground truth in the second process): every step checked, all
    within their bounds, on the sampled rows."""
    if backend == "torch":
        pytest.importorskip("torch")
    outcome = controller.run(_session(seed, backend, name))
    assert [c.name for c in outcome.checks] == _names(name)
    assert all(c.ok and 0 <= c.ratio <= 1 for c in outcome.checks), outcome.checks
    assert outcome.sampled.startswith(f"{ROWS} of {L_SAMPLED} query rows checked")


def _on_arrays(plain, wrong):
    """A mod that is `wrong` on index arrays (the backends' derived array form) and `plain` on
    Python numbers (the ground truth's cells): a mistake in the NumPy/torch path only."""
    return lambda self, *args: (wrong if module_of(args[-1]) else plain)(self, *args)


def _softcap_twice(monkeypatch, trace=None):
    plain = Softcap.score_mod
    twice = _on_arrays(plain, lambda self, s, *a: plain(self, plain(self, s, *a), *a))
    monkeypatch.setattr(Softcap, "score_mod", twice)


def _alibi_sign(monkeypatch, trace=None):
    plain = ALiBi.score_mod  # score - slope * (j - i): the bias the other way
    monkeypatch.setattr(
        ALiBi, "score_mod", _on_arrays(plain, lambda self, s, *a: 2 * s - plain(self, s, *a))
    )


def _rope_sign(monkeypatch, trace=None):
    plain = Rotary.turn_array
    monkeypatch.setattr(  # every pair turned by -angle: sin's sign flipped
        Rotary,
        "turn_array",
        lambda self, x, positions, xp: plain(self, x, [-p for p in positions], xp),
    )


def _window_wider(monkeypatch, trace=None):
    plain = SlidingWindow.mask_mod  # one more key on the left: j = i - left - 1 seen too
    wider = _on_arrays(
        plain,
        lambda self, b, h, i, j: plain(self, b, h, i, j) | (j == i + self.shift - self.left - 1),
    )
    monkeypatch.setattr(SlidingWindow, "mask_mod", wider)


def _sink_dropped(monkeypatch, trace):
    """The trace's weights renormalized without the sink: weights / (1 - sink_weights)."""
    weights = trace["weights"].value
    weights[...] = weights / (1 - trace["sink_weights"].value[..., None])


PLANTS = {  # name: (plant, variant, the first step that must fail)
    "softcap-twice": (_softcap_twice, "softcap", "scaled"),
    "alibi-sign": (_alibi_sign, "alibi", "scaled"),
    "rope-sign": (_rope_sign, "rope", "q_rotated"),
    "sink-dropped": (_sink_dropped, "sinks", "weights"),
    "window-all-softcap-twice": (_softcap_twice, "window-all", "scaled"),
    "window-wider": (_window_wider, "window-all", "masked"),
}


@pytest.mark.parametrize("plant", list(PLANTS))
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_planted_mistake_fails_where_it_is(backend, plant, monkeypatch):
    """The steps before the planted one pass, the planted one fails (seeds 0-1)."""
    pytest.importorskip(backend)
    from scratch import backends

    how, name, first_wrong = PLANTS[plant]
    for seed in range(2):
        s = _session(seed, backend, name)
        with monkeypatch.context() as patched:
            if how is not _sink_dropped:
                how(patched)
            example, options = controller.example_and_options(s)
            trace = backends.get(backend).trace_example(example, options, dtype="float32")
        if how is _sink_dropped:
            how(monkeypatch, trace)
        checks = sampled_check.sampled_checks(trace, options, "float32")
        names = [c.name.split(" (")[0] for c in checks]
        wrong = names.index(first_wrong)
        assert all(c.ok for c in checks[:wrong]), checks[:wrong]
        assert not checks[wrong].ok and checks[wrong].ratio > 1, (seed, checks[wrong])


@pytest.mark.parametrize(
    "choice,kv,masked_rows",
    [
        (
            V(mask="window", left=3, softcap=3.0, alibi=True, sinks=(0.2, 1.0), rope="half"),
            2,
            "zero",
        ),
        (V(mask="causal", align="top-left", softcap=2.0, rope="interleaved"), 1, "nan"),
    ],
)
def test_the_sampled_rows_are_the_full_ground_truths_rows_exactly(choice, kv, masked_rows):
    """variant_rows on 16 rows gives those rows of the full ground truth's trace, bit for bit
    (with a given attn_mask whose row 0 is empty, GQA, masked_rows 'nan')."""
    L = L_SAMPLED
    s = random_session(3, num_tokens=L, d_model=8, d_k=4, d_v=4, num_heads=2, num_kv_heads=kv)
    example, _ = controller.example_and_options(s)
    grid = [[i > 0 and (i + j) % 3 != 0 for j in range(L)] for i in range(L)]
    variant = choice.variant(L, L, 2)
    options = Options(grid, variant=variant, masked_rows=masked_rows)
    full = trace_example(example, options)
    rows = sampled_check.checked_rows(L)
    heads = lambda m, n: [[row[h * 4 : h * 4 + 4] for row in m] for h in range(n)]  # noqa: E731
    q, k, v = (full[n].value for n in "qkv")
    q_rows = [[head[i] for i in rows] for head in heads(q, 2)]
    truth = variant_rows(
        q_rows, heads(k, kv), heads(v, kv), rows_call(options, rows, L, L, full.scale)
    )

    def same(a, b) -> bool:
        return a == b or (math.isnan(a) and math.isnan(b))

    for step in ("scores", "scaled", "masked", "weights", "sink_weights", "head_outputs"):
        if step not in full:
            continue
        key = "output" if step == "head_outputs" else step
        for h in range(2):
            want = [full[step].value[h][i] for i in rows]
            got = truth[key][h]
            if step == "sink_weights":
                assert got == want
            else:
                assert all(same(a, b) for r, w in zip(got, want) for a, b in zip(r, w)), (step, h)
    assert any(math.isnan(x) for x in truth["weights"][0][0]) == (masked_rows == "nan")
    if choice.rope != "none":
        assert [row for head in truth["k_rotated"] for row in head] == [
            row[g * 4 : g * 4 + 4] for g in range(kv) for row in full["k_rotated"].value
        ]

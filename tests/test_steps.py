"""The registry of steps (scratch.trace.steps) is the single source of what each step is.

Every step of every backend's trace is a registry entry with the entry's formula and axes; the
steps an entry reads are exactly the ones its explanations point at, come earlier in the trace
and appear in its formula; explain and compare_traces call the entry's functions; the `# step N`
comments of the code use the registry's numbers.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import scratch
import scratch.backends as backends
from scratch.trace import steps
from scratch.trace.step_explain import Explanation
from scratch.trace.steps import STEPS, Call, call_of, spec_for, steps_of

ROOT = Path(__file__).resolve().parent.parent


def _setups() -> dict[str, dict]:
    """Keyword arguments of calls that between them reach every registry entry."""
    rng = np.random.default_rng(3)

    def m(rows: int, cols: int) -> list:
        return rng.normal(size=(rows, cols)).round(3).tolist()

    mask = (rng.random((4, 4)) < 0.6) | np.eye(4, dtype=bool)
    mem = m(3, 4)
    return {
        "plain": {},
        "projections+biases": {
            "w_q": m(4, 4),
            "w_k": m(4, 4),
            "w_v": m(4, 4),
            "b_q": [0.5] * 4,
            "b_k": [0.25] * 4,
            "b_v": [-1.0] * 4,
        },
        "causal": {"w_q": m(4, 4), "w_k": m(4, 4), "w_v": m(4, 2), "is_causal": True},
        "bool mask, heads": {
            "w_q": m(4, 4),
            "w_k": m(4, 4),
            "w_v": m(4, 4),
            "num_heads": 2,
            "attn_mask": mask.tolist(),
        },
        "float mask, w_o, b_o": {
            "w_q": m(4, 4),
            "w_k": m(4, 4),
            "w_v": m(4, 4),
            "w_o": m(4, 3),
            "b_o": [1.0] * 3,
            "num_heads": 2,
            "attn_mask": np.where(mask, 0.5, -np.inf).tolist(),
        },
        "gqa": {"w_q": m(4, 4), "w_k": m(4, 2), "w_v": m(4, 2), "num_heads": 2, "num_kv_heads": 1},
        "cross, one input": {"key": mem, "w_q": m(4, 4), "w_k": m(4, 4), "w_v": m(4, 4)},
        "cross, two inputs": {"key": mem, "value": m(3, 4), "w_o": m(4, 4)},
        "w_o, one head": {"w_o": m(4, 4)},
        "cross, two inputs, projections": {
            "key": mem,
            "value": m(3, 2),
            "w_q": m(4, 4),
            "w_k": m(4, 4),
            "w_v": m(2, 4),
            "b_k": [0.5] * 4,
            "num_heads": 2,
        },
    }


SETUPS = _setups()
X = np.random.default_rng(4).normal(size=(4, 4)).round(3).tolist()


def variant_traces() -> dict[str, scratch.Trace]:
    """The ground truth's forward traces of variants (RoPE, score change, rule, sinks)."""
    from scratch.core.options import Options
    from scratch.trace.forward import trace_example
    from scratch.variants import ALiBi, LearnedSinks, Rotary, SlidingWindow, Softcap, combine

    w = np.random.default_rng(5).normal(size=(3, 4, 4)).round(3).tolist()
    example = scratch.Example(X, params=dict(zip(("w_q", "w_k", "w_v"), w)), num_heads=2)
    variants = {
        "window+softcap+sinks+rope": combine(
            SlidingWindow(1, 0), Softcap(2.0), LearnedSinks([0.0, 1.0]), Rotary()
        ),
        "alibi, causal": ALiBi.for_heads(2),
    }
    return {
        name: trace_example(example, Options(is_causal=name.endswith("causal"), variant=v))
        for name, v in variants.items()
    }


def backward_trace(kwargs: dict, seed: int = 0, **more) -> scratch.Trace:
    """The ground truth's trace of X, forward and backward, for a seeded dO."""
    shape = scratch.trace_attention(X, **kwargs, **more)["output"].shape
    dO = np.random.default_rng(seed).normal(size=shape).round(2).tolist()
    return scratch.trace_attention(X, **kwargs, **more, grad_output=dO)


def _traces():
    """(setup, backend, trace) for every setup and every available backend (its first dtype)."""
    for name, kwargs in SETUPS.items():
        for backend in backends.available():
            b = backends.get(backend)
            yield name, backend, b.trace_attention(X, **kwargs, dtype=b.dtypes[0])


def test_every_registry_entry_is_reached_by_some_setup():
    reached = {
        id(spec) for kwargs in SETUPS.values()
        for spec in steps_of(call_of(backward_trace(kwargs)))
    }  # fmt: skip
    reached |= {id(spec) for t in variant_traces().values() for spec in steps_of(call_of(t))}
    assert [s.name for s in STEPS if id(s) not in reached] == []


def test_every_step_of_every_backend_is_a_registry_entry():
    """Names, order, formulas and axes of each trace are the registry's, for every backend."""
    for setup, backend, trace in _traces():
        call = call_of(trace)
        where = f"{backend}, {setup}"
        assert trace.names() == [s.name for s in steps_of(call)], where
        for step in trace:
            spec = spec_for(call, step.name)
            assert step.formula == spec.formula(call), (step.name, where)
            assert step.axes == spec.axes_for(call), (step.name, where)
            assert step.note, (step.name, where)


def test_reads_are_what_explain_points_at_and_come_earlier():
    """An entry's reads: exactly the steps its explanations cite, earlier in the trace, named
    in its formula."""
    traces = {name: scratch.trace_attention(X, **kwargs) for name, kwargs in SETUPS.items()}
    for setup, trace in {**traces, **variant_traces()}.items():
        call, names = call_of(trace), trace.names()
        for step in trace:
            reads = spec_for(call, step.name).reads(call)
            where = (setup, step.name, reads)
            assert all(names.index(r) < names.index(step.name) for r in reads), where
            assert all(re.search(rf"\b{r}", step.formula) for r in reads), where
            cited = set()
            for index in np.ndindex(*step.shape):
                cited |= {s for s, _, _ in scratch.explain(trace, step.name, index).sources}
            assert cited == set(reads), where


def test_backward_entries_match_the_trace_and_read_what_explain_points_at():
    """The backward steps too: names, order, formulas and axes from the registry; reads come
    earlier, are named in the formula and are exactly the steps the explanations cite."""
    for setup, kwargs in SETUPS.items():
        trace = backward_trace(kwargs)
        call, names = call_of(trace), trace.names()
        assert call.backward and names == [s.name for s in steps_of(call)], setup
        for step in trace:
            spec = spec_for(call, step.name)
            if not spec.backward:
                continue
            reads = spec.reads(call)
            where = (setup, step.name, reads)
            assert step.formula == spec.formula(call) and step.axes == spec.axes_for(call), where
            assert step.note, where
            assert all(names.index(r) < names.index(step.name) for r in reads), where
            assert all(re.search(rf"\b{r}", step.formula) for r in reads), where
            assert all(spec_for(call, r).number < spec.number for r in reads), where
            cited = set()
            for index in np.ndindex(*step.shape):
                cited |= {s for s, _, _ in scratch.explain(trace, step.name, index).sources}
            assert cited == set(reads), where


def test_biases_come_from_the_call_not_the_formula_text():
    with_bias = scratch.trace_attention(X, **SETUPS["projections+biases"])
    assert with_bias.source.biases == ("b_k", "b_q", "b_v")
    said = scratch.explain(with_bias, "q", (0, 0)).text
    assert said.count("(b_q[0])") == 1
    # the bias's value is printed, so the terms add up to the cell (they did not: '+ b_q[0]')
    b_q = SETUPS["projections+biases"]["b_q"][0]
    assert f"+ {b_q:.4g} (b_q[0])" in said or f"+ {b_q:g} (b_q[0])" in said, said
    out = scratch.explain(scratch.trace_attention(X, **SETUPS["float mask, w_o, b_o"]), "output",
                          (0, 0))  # fmt: skip
    assert "(b_o[0]) =" in out.text


def _replaced(monkeypatch, name: str, **changes) -> None:
    """The registry with every entry called `name` changed (restored after the test)."""
    new = tuple(dataclasses.replace(s, **changes) if s.name == name else s for s in STEPS)
    monkeypatch.setattr(steps, "STEPS", new)


def test_explain_calls_the_entry_s_function(monkeypatch):
    trace = scratch.trace_attention(X, **SETUPS["causal"])
    seen = []

    def fake(cell):
        seen.append((cell.step, cell.i, cell.j, cell.reads))
        return Explanation("from the registry")

    _replaced(monkeypatch, "scaled", explain=fake)
    assert scratch.explain(trace, "scaled", (1, 2)).text == "from the registry"
    assert seen == [("scaled", 1, 2, ("scores",))]
    assert scratch.explain(trace, "scores", (1, 2)).text.startswith("scores[1][2] = q[1] . k[2]")


def test_compare_traces_uses_the_entry_s_bound(monkeypatch):
    """An entry whose bound is zero fails its step (a float32 trace differs) and no other."""
    kwargs = SETUPS["bool mask, heads"]
    reference = scratch.trace_attention(X, **kwargs)
    trace = backends.get("numpy").trace_attention(X, **kwargs, dtype="float32")
    checks = scratch.compare_traces(trace, reference)
    assert [c.name for c in checks] == trace.names()
    assert all(c.ok for c in checks)
    calls = []

    def zero(cmp, name, reads, h):
        calls.append((name, reads, h))
        return cmp.ops.ew(lambda w: 0.0 * w, cmp.head(name, h)[1])

    _replaced(monkeypatch, "scores", bound=zero)
    verdicts = {c.name: c.ok for c in scratch.compare_traces(trace, reference)}
    assert calls == [("scores", ("q", "k"), 0), ("scores", ("q", "k"), 1)]
    assert [n for n, ok in verdicts.items() if not ok] == ["scores"]


def _renamed_registry(monkeypatch) -> tuple:
    """STEPS built again from steps.py with every entry that `_input` or `_backward` builds
    given another name ('renamed_' + its name), in a module of its own."""
    source = (ROOT / "scratch/trace/steps.py").read_text()
    renamed, count = re.subn(r'\b(_input|_backward)\((\s*)(f?)"', r'\1(\2\3"renamed_', source)
    module = types.ModuleType("scratch.renamed_steps")
    module.__package__ = "scratch"
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up there
    exec(compile(renamed, "renamed steps.py", "exec"), module.__dict__)
    return module.STEPS, count


def test_an_entry_s_words_do_not_depend_on_its_name(monkeypatch):
    """Renaming the inputs, weights and backward steps in a copy of the registry changes none of
    their words: each entry carries its own reads, formula, note and arrow, none looked up by
    the step's name (grad_w_q's formula is built from the weight it is given, not its name)."""
    renamed, count = _renamed_registry(monkeypatch)
    assert count >= 19, count  # 5 inputs and weights, 14 backward steps
    assert all(s.name.startswith("renamed_") for s in renamed if s.backward or s.number == 0)
    for setup, kwargs in SETUPS.items():
        for dropout in (0.0, 0.25):
            call = dataclasses.replace(call_of(backward_trace(kwargs)), dropout_p=dropout)
            copies = [s for s in renamed if s.present(call)]
            assert len(copies) == len(steps_of(call)), setup
            for spec, copy in zip(steps_of(call), copies):
                where = (setup, spec.name, copy.name)
                assert copy.name in (spec.name, "renamed_" + spec.name), where
                assert copy.formula(call) == spec.formula(call), where
                assert copy.note(call) == spec.note(call), where
                assert copy.reads(call) == spec.reads(call), where
                assert (copy.number, copy.axes_for(call)) == (spec.number, spec.axes_for(call))
                assert (copy.arrow, copy.sentence) == (spec.arrow, spec.sentence), where
                assert (copy.bound, copy.explain) == (spec.bound, spec.explain), where


def test_a_step_with_no_entry_is_named():
    call = Call(num_heads=1)
    with pytest.raises(KeyError, match="no registry entry for step 'concat'"):
        spec_for(call, "concat")


def test_numbers_follow_the_computation():
    """Inputs are step 0; every computed step's number is at least that of each step it reads."""
    traces = [scratch.trace_attention(X, **kwargs) for kwargs in SETUPS.values()]
    for trace in traces + list(variant_traces().values()):
        call = call_of(trace)
        for spec in steps_of(call):
            if spec.number == 0:
                assert spec.reads(call) == (), spec.name
                continue
            for read in spec.reads(call):
                assert spec_for(call, read).number < spec.number, (spec.name, read)


COMMENTED = ("scratch/core/attention.py", "scratch/trace/forward.py", "scratch/trace/steps.py",
             "scratch/core/multihead.py", "scratch/backends/numpy_backend.py",
             "scratch/backends/torch_backend.py")  # fmt: skip


def test_step_comments_use_the_registry_numbers():
    """Each '# step N: name = ...' comment names a step the registry numbers N."""
    numbers = {(s.name, s.number) for s in STEPS}
    found = 0
    for path in COMMENTED:
        text = (ROOT / path).read_text()
        for n, name in re.findall(r"# step (\d+): (\w+) =", text):
            found += 1
            assert (name, int(n)) in numbers, f"{path}: '# step {n}: {name} =' disagrees"
    assert found >= 10


def test_the_window_s_flow_reads_the_registry():
    """The overview's stages and arrows follow the registry's numbers and arrows."""
    from gui.present import view_model

    trace = scratch.trace_attention(X, **SETUPS["float mask, w_o, b_o"])
    stages = view_model.flow_stages(trace.names())
    assert [(s.names, s.arrow) for s in stages] == [
        (("x",), ""),
        (("w_q", "w_k", "w_v"), "with"),
        (("q", "k", "v"), "x @ W"),
        (("scores",), "q @ k^T"),
        (("scaled",), "x scale"),
        (("masked",), "mask"),
        (("weights",), "softmax"),
        (("head_outputs",), "weights @ v"),
        (("concat",), "concat"),
        (("w_o",), "with"),
        (("output",), "@ W_o"),
    ]


def test_a_gqa_score_names_the_kv_head_it_reads():
    """Two query heads share kv head 0: scores[1] reads k_0 (it said k_1, a head that is not)."""
    x = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
    eye = [[1.0, 0.0], [0.0, 1.0]]
    t = scratch.trace_attention(x, w_q=[[1.0, 0, 0.5, 0], [0, 1.0, 0, 0.5]], w_k=eye, w_v=eye,
                                num_heads=2, num_kv_heads=1)  # fmt: skip
    said = scratch.explain(t, "scores", (1, 2, 0)).text
    assert said.startswith("scores[1][2][0] = q_1[2] . k_0[0] = ")

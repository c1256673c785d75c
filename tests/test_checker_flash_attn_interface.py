"""FlashAttention's own interface checked as it is: flash_attn_func on (B, L, H, E) and
flash_attn_varlen_func on packed sequences, correct kernels passing, outsiders' mistakes named.

The kernels (tests/flash_attn_kernels.py) are written as FlashAttention's users write them; the
longer sweep (more seeds) is tests/checker_flash_attn_sweep.py.
"""

import importlib.util

import numpy as np
import pytest

import scratch
from scratch.checker import check_variants, check_variants_backward
from scratch.checker.variant_keywords import style_of
from tests.flash_attn_kernels import make_reference, make_tiled, make_varlen

RUN = {"window-both-sides", "window-tiles", "window-decode", "softcap-causal", "alibi-causal",
       "decode-split-kv-gqa", "alibi-window", "softmax-scale", "batch-decode-gqa"}  # fmt: skip
DOCUMENTS = {"documents", "documents-causal", "documents-window"}
NOT_RUN = {"sinks", "prefix-lm", "chunked-causal", "rope-half", "window-softcap-gqa-sinks"}
SEEDS = range(2)  # the suite's share (torch kernels: seed 0); the sweep runs more


def correct_kernels() -> dict:
    """name -> (correct kernel, array); the torch ones where torch is installed."""
    found = {
        "reference": (make_reference(), "numpy"),
        "tiled": (make_tiled(), "numpy"),
        "tiled-block-7": (make_tiled(block=7), "numpy"),
        "varlen": (make_varlen(make_reference()), "numpy"),
    }
    if importlib.util.find_spec("torch") is not None:
        found["torch"] = (make_reference(xp="torch"), "torch")
        found["torch-varlen"] = (make_varlen(make_reference(xp="torch")), "torch")
    return found


def test_the_interface_is_read_from_the_name_and_the_signature():
    assert style_of(make_reference(), None) == "flash_attn"
    assert style_of(make_varlen(make_reference()), None) == "flash_attn_varlen"

    def attend(q, k, v, softmax_scale=None, causal=False):  # FlashAttention's scale word
        return q

    def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
        return q

    assert style_of(attend, None) == "flash_attn"
    assert style_of(kernel, None) == "flash_attn_varlen"
    assert style_of(attend, "flash") == "flash"  # an explicit style wins


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_correct_kernels_pass_on_every_seed(dtype):
    for seed in SEEDS:  # the kernels inner: each case's truth made once per seed
        for name, (fn, array) in correct_kernels().items():
            if array == "torch" and seed > 0:
                continue
            report = check_variants(fn, array=array, dtype=dtype, seed=seed)
            assert report, f"{name} seed {seed}: false alarm\n{report}"
            passed = {c.name for c in report.cases if c.status == "pass"}
            assert RUN <= passed
            declined = {c.name for c in report.cases if c.status == "unsupported"}
            if "varlen" in name:  # documents run as packed sequences
                assert DOCUMENTS <= passed
            else:
                assert DOCUMENTS <= declined
            assert NOT_RUN <= declined and report.verdict.startswith(f"PASS on {len(passed)} of ")


def test_cases_the_interface_cannot_express_are_declined_and_listed():
    report = check_variants(make_reference(), dtype="float64")
    said = {c.name: c.message for c in report.cases if c.status == "unsupported"}
    assert said["prefix-lm"].startswith("FlashAttention's interface has no keyword for prefix-LM")
    assert "no keyword for learned sinks" in said["sinks"]
    assert "no keyword for chunked local attention" in said["chunked-causal"]
    assert "no keyword for RoPE" in said["rope-half"]
    assert "flash_attn_varlen_func takes them" in said["documents"]
    for word in ("learned sinks", "documents (cu_seqlens)", "prefix-LM", "RoPE"):
        assert word in report.verdict
    assert not report.failed


def test_shapes_and_keywords_reach_the_kernel_as_flash_attention_gives_them():
    seen = {}

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False):  # fmt: skip
        seen[tuple(cu_seqlens_q.tolist()), tuple(cu_seqlens_k.tolist())] = (
            q.shape,
            k.shape,
            max_seqlen_q,
            max_seqlen_k,
            cu_seqlens_q.dtype,
            softmax_scale,
        )
        return make_varlen(make_reference())(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                             max_seqlen_k, softmax_scale=softmax_scale,
                                             causal=causal)  # fmt: skip

    report = check_variants(flash_attn_varlen_func, dtype="float64")
    assert report
    int32 = np.dtype("int32")
    # documents: the case's own; a batch of 2: one sequence each, 10 queries of 14 keys
    assert seen[(0, 6, 13, 20), (0, 6, 13, 20)] == ((20, 2, 16), (20, 2, 16), 7, 7, int32, None)
    assert seen[(0, 10, 20), (0, 14, 28)] == ((20, 4, 16), (28, 2, 16), 10, 14, int32, None)
    assert seen[(0, 16), (0, 16)][-1] == 0.4  # softmax-scale


def test_a_tuple_led_by_the_output_is_read_and_its_softmax_lse_checked():
    tiled = make_tiled(lse="e")  # (out, softmax_lse (B, H, L), None), as FlashAttention returns
    assert check_variants(tiled, dtype="float64")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1)):
        out, lse, _ = tiled(q, k, v, softmax_scale=softmax_scale, causal=causal,
                            window_size=window_size)  # fmt: skip
        return out, np.zeros(lse.shape), None  # a made-up lse: the output alone is right

    report = check_variants(flash_attn_func, dtype="float64")
    assert not report and report.failed[0].message.startswith("lse: max error")
    assert {c.name for c in report.cases if c.status == "pass"} == set()  # every lse is off


def test_scratch_check_takes_flash_attn_func_as_it_is():
    report = scratch.check(make_reference(), dtype="float64")
    assert report and "variant_style=flash_attn" in report.settings
    with pytest.raises(ValueError, match="cases: fn takes FlashAttention's interface"):
        scratch.check(make_reference(), cases="full")
    # a kernel in torch's words is still the plain checker's
    assert "variant_style" not in scratch.check(lambda q, k, v: q).settings


MISTAKES = [
    # (kernel, its maker's bug, the failing cases (all of them), words of the name)
    (
        "reference",
        "top-left",
        {
            "decode-causal",
            "decode-split-kv-gqa",
            "batch-decode-gqa",
            "window-decode",
            "causal-more-queries",
        },  # fmt: skip
        "decode aligned top-left",
    ),
    ("tiled", "top-left", None, "decode aligned top-left"),
    ("reference", "scale-ignored", {"softmax-scale"}, "softmax_scale ignored"),
    (
        "tiled",
        "window-swapped",
        {
            "window-both-sides",
            "window-causal",
            "window-tiles",
            "window-decode",
            "alibi-window",
            "softcap-window-e32",
        },  # fmt: skip
        "window_size read as (right, left)",
    ),
    (
        "varlen",
        "inclusive-end",
        {"documents", "documents-single"},
        "document ends taken as inclusive",
    ),
    ("reference", "bshd-as-bhsd", None, "(batch, seqlen, nheads, headdim) read as (batch, nheads"),
    ("reference", "output-bhsd", None, "output left in (batch, nheads, seqlen, headdim)"),
]


@pytest.mark.parametrize("kernel, bug, failing, name", MISTAKES, ids=[m[1] for m in MISTAKES])
def test_planted_mistakes_are_caught_and_named(kernel, bug, failing, name):
    makers = {
        "reference": lambda: make_reference(bug),
        "tiled": lambda: make_tiled(bug),
        "varlen": lambda: make_varlen(make_reference(), bug),
    }
    for dtype in ("float32", "float64"):
        report = check_variants(makers[kernel](), dtype=dtype, seed=0)
        assert not report, f"{bug} passed\n{report}"
        if failing is not None:
            assert {c.name for c in report.failed} == failing, report
        assert report.diagnosis is not None and report.diagnosis.startswith(name), report
        assert name in str(report)


def test_bshd_read_as_bhsd_is_named_where_it_runs_and_fails_where_it_raises():
    report = check_variants(make_reference("bshd-as-bhsd"), dtype="float64")
    named = {c.name for c in report.failed if c.diagnosis}
    assert {"window-both-sides", "softcap-causal", "softmax-scale"} <= named
    raised = {c.name for c in report.failed if c.raised}
    assert "decode-causal" in raised  # q @ k^T cannot broadcast L = 3 against S = 29
    assert named | raised == {c.name for c in report.failed}


def test_backward_takes_and_returns_flash_attention_layout(monkeypatch):
    torch = pytest.importorskip("torch")
    # three cases (the backward's exact truth is slow): Ev != E, a scale, a batch with GQA
    from scratch.checker import variant_cases as cases

    every = cases.variant_cases
    some = ("window-both-sides", "softmax-scale", "batch-decode-gqa")
    monkeypatch.setattr(cases, "variant_cases", lambda *a: [c for c in every(*a) if c.name in some])
    forward = make_reference(xp="torch")

    def flash_attn_backward(q, k, v, grad_output, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, alibi_slopes=None):  # fmt: skip
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        out = forward(q, k, v, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes)
        return torch.autograd.grad(out, (q, k, v), grad_output)

    report = check_variants_backward(flash_attn_backward, variant_style="flash_attn",
                                     array="torch", dtype="float64")  # fmt: skip
    assert report and len(report.cases) == 3, report

    def transposed(q, k, v, grad_output, softmax_scale=None, causal=False, window_size=(-1, -1),
                   softcap=0.0, alibi_slopes=None):  # fmt: skip
        found = flash_attn_backward(q, k, v, grad_output, softmax_scale, causal, window_size,
                                    softcap, alibi_slopes)  # fmt: skip
        return tuple(g.transpose(1, 2) for g in found)  # (B, H, N, D), not FlashAttention's

    report = check_variants_backward(transposed, variant_style="flash_attn", array="torch",
                                     dtype="float64")  # fmt: skip
    assert not report
    assert "(batch, seqlen, nheads, headdim)" in report.failed[0].message

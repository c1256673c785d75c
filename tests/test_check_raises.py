"""A raise is a failure unless it is NotImplementedError (a refusal), in every checker and the CLI.

The report shows the kernel's own exception and the user's line; the verdict lists exactly the
features no case ran; array='list' with a NumPy kernel names the mismatch (issue 35).
"""

from __future__ import annotations

import inspect
import math

import pytest

import scratch
from scratch.checker import check_variants, check_variants_backward, main
from scratch.checker.raised import describe
from scratch.checker.variant_cases import variant_cases
from tests import raising_kernels as rk

SOURCE = inspect.getsource(rk).splitlines()
FILE = "tests/raising_kernels.py"


def line_of(text: str, after: str) -> str:
    """'tests/raising_kernels.py:N' for the first line holding `text` after the line `after`."""
    start = next(n for n, line in enumerate(SOURCE) if after in line)
    n = next(n for n in range(start, len(SOURCE)) if text in SOURCE[n])
    return f"{FILE}:{n + 1}"


def assert_crashes_shown(report, type_line: str, index_line: str, fn: str) -> None:
    """The report fails and shows both exceptions with the kernel's own lines."""
    text = str(report)
    assert not report, text
    assert report.verdict.startswith("FAIL"), report.verdict
    assert "TypeError: 'NoneType' object is not callable" in text, text
    assert "IndexError: list index out of range" in text, text
    assert f"{line_of(type_line, f'def {fn}(')} in {fn}: {type_line}" in text, text
    assert f"{line_of(index_line, f'def {fn}(')} in {fn}: {index_line}" in text, text
    assert "scratch/checker" not in text  # the checker's own frames are not the user's
    crashed = [c for c in report.cases if c.raised]
    assert crashed and all(c.status == "fail" for c in crashed)


def test_a_crashing_forward_fails():
    report = scratch.check(rk.crash_forward)
    assert_crashes_shown(report, "k = repeat_kv(k)", "scale = SCALES[0]", "crash_forward")
    status = {c.name: c.status for c in report.cases}
    assert [n for n, s in status.items() if s != "pass"] == ["custom-scale", "gqa", "gqa-65"]
    assert report.verdict == "FAIL: 3 of 24 cases fail", report.verdict


def test_a_crashing_backward_fails():
    report = scratch.check_backward(rk.crash_backward)
    assert_crashes_shown(report, "k = repeat_kv(k)", "scale = SCALES[0]", "crash_backward")
    assert "unsupported" not in report.verdict


def test_a_crashing_variant_kernel_fails():
    report = check_variants(rk.crash_variants)
    assert_crashes_shown(report, "q = cap(q)", "sinks = SCALES[0]", "crash_variants")
    failed = {c.name for c in report.failed}
    crashing = {c.name for c in variant_cases("float32") if c.softcap is not None or c.sinks}
    assert failed == crashing and {"softcap", "sinks", "window-softcap-gqa-sinks"} <= failed
    # the masks a flash-style kernel has no keyword for are unsupported, not failed
    unsupported = report.verdict.rsplit("; ", 1)[-1]
    assert unsupported.endswith(" unsupported") and "prefix-LM" in unsupported, report.verdict


def test_a_crashing_variant_backward_fails():
    report = check_variants_backward(rk.crash_variants_backward)
    fn = "crash_variants_backward"
    assert_crashes_shown(report, "q = cap(q)", "sinks = SCALES[0]", fn)


@pytest.mark.parametrize(
    "argv",
    [
        ["tests.raising_kernels:crash_forward"],
        ["--variants", "tests.raising_kernels:crash_variants"],
        ["--backward", "tests.raising_kernels:crash_backward"],
    ],
)
def test_the_cli_exits_1_on_a_crash(argv, capsys):
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "TypeError: 'NoneType' object is not callable" in out
    assert f"{FILE}:" in out and "FAIL" in out


def test_the_cli_exits_0_when_only_refusals_are_left(capsys):
    assert main(["--variants", "--dtype", "float64", "tests.raising_kernels:decode_step"]) == 0
    assert "PASS on 8 of 28 cases" in capsys.readouterr().out


def refuses_scale(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """A correct kernel that declines a custom scale the documented way."""
    if scale is not None:
        raise NotImplementedError("no custom scale")
    return rk.attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_not_implemented_for_one_feature_lists_exactly_that_feature(seed):
    report = scratch.check(refuses_scale, seed=seed)
    assert report, str(report)
    assert report.verdict == "PASS on 23 of 24 cases; scale unsupported", report.verdict
    assert report.unsupported_features == ["scale"]


def strict(q, k, v, **keywords):
    """A correct kernel whose **keywords check refuses all but scale, as Python would."""
    for word in keywords:
        if word != "scale":
            raise TypeError(f"strict() got an unexpected keyword argument '{word}'")
    return rk.attention(q, k, v, **keywords)


def misspelt(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Passes a keyword its helper lacks: a bug, though the TypeError reads the same."""
    return rk.attention(q, k, v, attn_mask, is_causal, scale, enable_gqa, bugs=None)


def test_a_keyword_refused_as_python_refuses_it_declines_the_case():
    report = scratch.check(strict)
    assert report, str(report)
    assert report.verdict == "PASS on 11 of 24 cases; masks, causal, GQA unsupported"
    backend = pytest.importorskip("scratch.backends").get("numpy")
    back = scratch.check_backward(backend.scaled_dot_product_attention_backward)
    assert back and back.verdict == "PASS on 17 of 18 cases; dropout unsupported", str(back)
    bug = scratch.check(misspelt)  # 'bugs' is no keyword the checker passed: a failure
    assert not bug and all(c.status == "fail" for c in bug.cases), str(bug)
    assert "unexpected keyword argument 'bugs'" in bug.cases[0].message


def test_the_decode_kernel_lists_only_the_features_it_never_ran():
    """Window, softcap, sinks, decode and GQA passed: only what no case ran is listed."""
    report = check_variants(rk.decode_step, dtype="float64", seed=3)
    assert report, str(report)
    ran = {f for c in report.cases if c.status == "pass" for f in c.features}
    assert {"window", "softcap", "sinks", "decode", "gqa", "causal"} <= ran
    not_run = ["ALiBi", "documents (cu_seqlens)", "prefix-LM", "chunked local attention", "RoPE"]
    not_run += ["dilated window", "sink tokens + window"]  # registered masks: no flash keyword
    assert report.unsupported_features == not_run
    assert report.verdict == (
        "PASS on 8 of 28 cases; " + ", ".join(not_run) + " unsupported; 3 more cases not run "
        "(window-both-sides, softcap, sinks)"
    ), report.verdict


def test_a_refusal_on_a_case_without_optional_features_is_a_failure():
    def refuses_everything(q, k, v, attn_mask=None, is_causal=False, scale=None):
        raise NotImplementedError("not written yet")

    report = scratch.check(refuses_everything)
    keys_17 = {c.name: c for c in report.cases}["keys-17"]  # a case with no optional feature
    assert not report and keys_17.status == "fail"
    assert "NotImplementedError: not written yet" in keys_17.message
    assert {c.name: c for c in report.cases}["custom-scale"].status == "unsupported"


def test_a_numpy_kernel_on_lists_names_the_mismatch():
    report = scratch.check(rk.numpy_only, array="list")
    assert not report
    assert "did you mean array='numpy'?" in report.diagnosis, str(report)
    assert "AttributeError: 'list' object has no attribute 'shape'" in str(report)
    variants = check_variants(rk.numpy_only_variants, array="list")
    assert not variants and "did you mean array='numpy'?" in variants.diagnosis, str(variants)
    assert "no case passed" not in variants.verdict, variants.verdict
    assert check_variants(rk.numpy_only_variants, array="numpy")  # the same kernel is right


# ---------------------------------------------------------------- torch.compile's wrapped errors


class Unsupported(RuntimeError):
    """Stands for torch._dynamo.exc.Unsupported: the module name is what marks it."""


class ObservedIndexError(Exception):
    """Stands for dynamo's record of an exception the traced code raised."""


class BackendCompilerFailed(RuntimeError):
    """Stands for torch._dynamo.exc.BackendCompilerFailed (inner_exception: the real one)."""


for _cls in (Unsupported, ObservedIndexError, BackendCompilerFailed):
    _cls.__module__ = "torch._dynamo.exc"


def frame(filename: str, lineno: int, name: str, line: str):
    """A traceback.FrameSummary, as dynamo keeps in `real_stack`."""
    import traceback

    return traceback.FrameSummary(filename, lineno, name, line=line)


def test_an_observed_exception_is_unwrapped_to_the_users_exception_and_line():
    observed = ObservedIndexError("raised exception IndexError('list index out of range')")
    outer = Unsupported("Observed exception\n  Explanation: Dynamo found no exception handler")
    outer.__cause__ = observed
    outer.real_stack = [frame("/home/me/kern.py", 12, "kern", "j = ids[n]")]
    found = describe(outer)
    assert found.words == "IndexError: list index out of range", found.words
    assert found.frames == ("/home/me/kern.py:12 in kern: j = ids[n]",)
    assert not found.refusal
    refused = Unsupported("Observed exception")
    refused.__cause__ = ObservedIndexError("raised exception NotImplementedError('no sinks')")
    assert describe(refused).refusal and describe(refused).words.endswith(": no sinks")


def test_a_backend_failure_is_unwrapped_to_its_inner_exception():
    inner = ValueError("bad tile size 7")
    outer = BackendCompilerFailed("backend='inductor' raised:\nValueError: bad tile size 7")
    outer.inner_exception = inner
    outer.__cause__ = inner
    assert describe(outer).words == "ValueError: bad tile size 7"
    plain = Unsupported("Unsupported function call\n  Explanation: Dynamo does not know how to "
                        "trace the function `None`\n  Hint: Avoid calling `None`")  # fmt: skip
    plain.real_stack = [frame("/home/me/kern.py", 5, "kern", "s = hook(s)")]
    words = describe(plain).words
    assert words.startswith("torch._dynamo.exc.Unsupported: Unsupported function call"), words
    assert "Dynamo does not know how to trace the function `None`" in words
    assert describe(plain).frames == ("/home/me/kern.py:5 in kern: s = hook(s)",)


HOOK = None


def compiled_kernel(q, k, v, softcap=0.0, sinks=None, causal=False, window_size=(-1, -1)):
    """Plain attention in torch; calls HOOK (None) under softcap, refuses sinks."""
    import torch

    if sinks is not None:
        raise NotImplementedError("compiled_kernel: no sinks")
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        s = HOOK(s)  # the user's line dynamo cannot trace
    return torch.softmax(s, -1) @ v


def test_a_torch_compile_error_shows_the_users_line():
    torch = pytest.importorskip("torch")
    dynamo = pytest.importorskip("torch._dynamo")

    dynamo.reset()
    fn = torch.compile(compiled_kernel, fullgraph=True, backend="eager", dynamic=True)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(Exception) as caught:
        fn(q, q, q, softcap=2.0)
    found = describe(caught.value)
    assert found.frames and "in compiled_kernel: s = HOOK(s)" in found.frames[-1], found
    assert "tests/test_check_raises.py:" in found.frames[-1]
    with pytest.raises(Exception) as refused:
        fn(q, q, q, sinks=torch.zeros(2))
    assert describe(refused.value).refusal, describe(refused.value)


def test_every_case_of_a_crash_is_shown_once_per_seed():
    """Seeds 0-4: the same three cases fail, each with its own exception."""
    for seed in range(5):
        report = scratch.check(rk.crash_forward, seed=seed)
        kinds = {c.name: c.raised for c in report.failed}
        assert kinds == {"custom-scale": "IndexError", "gqa": "TypeError", "gqa-65": "TypeError"}

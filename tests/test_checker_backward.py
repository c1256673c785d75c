"""The backward checker: correct backward kernels pass, each planted mistake fails and is named.

The kernels live in tests/backward_kernels.py and the catalogues in
tests/checker_backward_catalogue.py; the full false-alarm sweep (seeds 0-199) is
tests/checker_backward_sweep.py, run by hand (its result is in the README).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scratch
from scratch.backward.sdpa import scaled_dot_product_attention_backward
from scratch.checker.backward_diagnosis import MISTAKES
from scratch.checker.cases import backward_cases
from scratch.checker.cli import main
from scratch.checker.report import CheckReport
from tests import backward_kernels as kernels
from tests.checker_backward_catalogue import CORRECT, PLANTED
from tests.checker_backward_sweep import verdict

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

ROOT = Path(__file__).resolve().parents[1]
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


@pytest.mark.parametrize("name", sorted(CORRECT))
@pytest.mark.parametrize("seed", [0, 7])
def test_correct_backward_kernels_pass(name, seed):
    fn, backward, array, dtype = CORRECT[name]
    report = scratch.check_backward(fn, backward=backward, array=array, dtype=dtype, seed=seed)
    assert isinstance(report, CheckReport)
    assert report, str(report)
    assert report.diagnosis is None
    passed = {c.name for c in report.cases if c.status == "pass"}
    assert {"plain", "gqa", "masked-row", "causal-33", "keys-65-late-max"} <= passed, str(report)


def test_kernels_given_the_dropout_mask_pass_the_dropout_case():
    """The mask handed to the kernel is the one the ground truth's rng draws (else it fails)."""
    report = scratch.check_backward(kernels.numpy_backward(), dtype="float64", seed=3)
    dropout = next(c for c in report.cases if c.name == "dropout")
    assert dropout.status == "pass", str(report)
    assert dropout.max_error < 1e-14


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_every_planted_mistake_fails_with_its_name(name):
    fn, backward, array, dtype, words = PLANTED[name]
    report = scratch.check_backward(fn, backward=backward, array=array, dtype=dtype, seed=1)
    assert not report, str(report)
    assert verdict(report, words) == "named", (words, report.diagnosis)


def test_catalogue_covers_the_issue_list():
    """At least 15 planted mistakes, and every mistake the issue names is among them."""
    assert len(PLANTED) >= 15
    diagnoses = " | ".join(w for *_, w in PLANTED.values())
    for words in (
        "the D term left out",
        "D taken as rowsum(dP * P)",
        "dS transposed",
        "scale missing in dQ",
        "scale missing in dK",
        "scale applied twice",
        "GQA gradients not summed",
        "dropout mask not reused",
        "NaN from fully masked rows",
        "dK and dV swapped",
    ):
        assert words in diagnoses, words
    assert all(
        any(m[:20] in w or w in m for m in MISTAKES.values())
        for *_, w in PLANTED.values()
        if "in place" not in w and "count" not in w
    )


def test_float32_intermediates_in_a_float64_backward_fail():
    """The smallest real mistake: a float64 backward that computes in float32 is caught."""
    correct = kernels.numpy_backward()

    def float32_inside(q, k, v, grad_output, **kwargs):
        grads = correct(*(x.astype(np.float32) for x in (q, k, v, grad_output)), **kwargs)
        return tuple(g.astype(np.float64) for g in grads)

    report = scratch.check_backward(float32_inside, dtype="float64", require="")
    assert not report
    assert min(c.ratio for c in report.failed) > 1e3, str(report)


def test_ground_truth_is_the_plain_python_backward():
    """A kernel returning the ground truth itself passes every case exactly."""

    def exact(
        q,
        k,
        v,
        grad_output,
        attn_mask=None,
        is_causal=False,
        scale=None,
        enable_gqa=False,
        dropout_p=0.0,
        dropout_mask=None,
    ):
        if dropout_mask is not None:
            raise NotImplementedError("no dropout")
        got = scaled_dot_product_attention_backward(
            q.tolist(),
            k.tolist(),
            v.tolist(),
            grad_output.tolist(),
            None if attn_mask is None else attn_mask.tolist(),
            0.0,
            is_causal,
            scale,
            enable_gqa=enable_gqa,
        )
        return tuple(np.asarray(g) for g in got)

    report = scratch.check_backward(exact, dtype="float64")
    assert report and report.verdict.endswith("dropout unsupported"), str(report)
    assert all(c.max_error == 0.0 for c in report.cases if c.status == "pass")


@needs_torch
def test_autograd_of_a_forward_without_dropout_mask_marks_dropout_unsupported():
    import torch.nn.functional as F

    report = scratch.check_backward(F.scaled_dot_product_attention, array="torch", seed=2)
    assert report and "dropout unsupported" in report.verdict, str(report)
    required = scratch.check_backward(
        F.scaled_dot_product_attention, array="torch", seed=2, require="dropout"
    )
    assert not required and "dropout required" in str(required)


@needs_torch
def test_autograd_finds_a_forward_mistake_in_the_gradients():
    """A forward with the scale left out has wrong gradients: autograd's check fails."""

    def no_scale(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        return kernels.torch_manual_forward(q, k, v, attn_mask, is_causal, 1.0, enable_gqa)

    report = scratch.check_backward(no_scale, array="torch", dtype="float64")
    assert not report
    assert report.cases[0].ratio > 1e6, str(report)


def test_wrong_results_are_failures_with_messages():
    def two(q, k, v, grad_output, **kwargs):
        return q, k

    def raises(q, k, v, grad_output, **kwargs):
        raise RuntimeError("boom")

    report = scratch.check_backward(two)
    assert not report and "expected (dq, dk, dv)" in report.cases[0].message
    crashed = scratch.check_backward(raises)
    assert crashed.cases[0].status == "fail" and "boom" in crashed.cases[0].message
    assert not crashed


def test_arguments_are_checked():
    fn = kernels.numpy_backward()
    with pytest.raises(ValueError, match="array: expected one of numpy, torch"):
        scratch.check_backward(fn, array="list")
    with pytest.raises(ValueError, match="cases: expected one of standard"):
        scratch.check_backward(fn, cases="large")
    with pytest.raises(TypeError, match="seed: expected an int"):
        scratch.check_backward(fn, seed=1.5)
    with pytest.raises(TypeError, match="backward: expected a callable"):
        scratch.check_backward(None, backward="nope")
    with pytest.raises(TypeError, match="fn: expected a function"):
        scratch.check_backward(None)
    with pytest.raises(ValueError, match="require: expected names"):
        scratch.check_backward(fn, require="everything")
    with pytest.raises(ValueError, match="numpy has no bfloat16"):
        scratch.check_backward(fn, dtype="bfloat16")


def test_cases_tell_the_mistakes_apart():
    """L == S (dS transposed runs), E == Ev (dK/dV swap keeps shapes), GQA, dropout, blocks."""
    cases = backward_cases("float32")
    assert any(c.q[-2] == c.k[-2] and c.q[-1] == c.v[-1] for c in cases)
    assert any(c.gqa for c in cases) and any(c.dropout_p for c in cases)
    assert any(c.mask == "empty-row" for c in cases)
    assert max(c.k[-2] for c in cases) > 64


def test_a_backward_case_is_a_case_with_a_grad_output():
    """One case type: the backward cases are Cases with grad_output, and the one prepare makes
    them (q, k, v, grad_output) while the same shapes without it get the forward's (q, k, v)."""
    from dataclasses import replace

    from scratch.checker.arrays import Arrays
    from scratch.checker.cases import Case
    from scratch.checker.prepare import prepare

    cases = backward_cases("float32")
    assert all(type(c) is Case and c.grad_output for c in cases)
    case = next(c for c in cases if c.dropout_p)
    arrays = Arrays("numpy", None)
    args, kwargs = prepare(case, arrays, "float32", 0, "zero").call_args(arrays)
    assert len(args) == 4 and kwargs["dropout_p"] == case.dropout_p
    assert kwargs["dropout_mask"].shape == case.q[:-1] + (case.k[-2],)
    forward = replace(case, grad_output=False, dropout_p=0.0)
    args, kwargs = prepare(forward, arrays, "float32", 0, "zero").call_args(arrays)
    assert len(args) == 3 and "dropout_mask" not in kwargs


def test_cli_backward(capsys):
    target = "tests.backward_kernels:correct_numpy_backward"
    assert main(["--backward", target, "--seed", "4"]) == 0
    out = capsys.readouterr()
    assert "-> PASS on 18 of 18 cases" in out.out
    assert main(["--backward", "tests.backward_kernels:no_d_numpy_backward"]) == 1
    assert "diagnosis: the D term left out" in capsys.readouterr().out
    assert main(["--autograd", target]) == 2  # autograd needs --array torch
    assert "--autograd: needs --array torch" in capsys.readouterr().err
    assert main(["--backward", target, "--autograd", target, "--array", "torch"]) == 2
    assert main(["--backward", target, "--cases", "large"]) == 2
    assert main(["--backward", "tests.backward_kernels:nope"]) == 2
    assert main([]) == 2 and "expected package.module:function" in capsys.readouterr().err


def test_cli_backward_from_the_terminal():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scratch.check",
            "--backward",
            "tests.backward_kernels:no_d_numpy_backward",
            "--dtype",
            "float64",
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "diagnosis: the D term left out" in done.stdout


def test_nan_rows_pass_under_the_nan_policy_they_are_pointed_to():
    """The diagnosis for NaN rows points to masked_rows='nan'; under it that kernel passes."""
    nan_kernel = kernels.numpy_backward("nan_rows")
    assert not scratch.check_backward(nan_kernel, seed=5)
    report = scratch.check_backward(nan_kernel, seed=5, masked_rows="nan")
    assert report, str(report)
    masked = next(c for c in report.cases if c.name == "masked-row")
    assert masked.status == "pass"
    assert not scratch.check_backward(kernels.numpy_backward(), seed=5, masked_rows="nan")


@needs_torch
def test_rounding_allowance_keeps_a_correct_kernel_on_tiny_gradients():
    """Seed 7, float64, logits of std 1000: true gradients ~1e-80 and a correct torch backward
    lands ~1e-16 away (D = rowsum(dO * O) rounds apart from dP), far above 2x the references;
    it passes on each element's rounding allowance, which the float32 slip above does not."""
    report = scratch.check_backward(
        None, backward=kernels.torch_explicit_backward, array="torch", dtype="float64", seed=7
    )
    large = next(c for c in report.cases if c.name == "large-logits")
    assert large.status == "pass" and large.ratio > 1e6, str(report)
    assert "rounding allowance" in large.message
    assert report, str(report)


@needs_torch
def test_autograd_names_nan_from_a_textbook_masked_fill_forward():
    """masked_fill(-inf) + softmax: a fully masked row's 0/0 reaches only dv through autograd
    (dq and dk stay finite), and the check still names the NaN rows."""
    import torch

    def textbook(q, k, v, attn_mask=None, is_causal=False, scale=None):
        s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if is_causal:
            attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, float("-inf"))
        elif attn_mask is not None:
            s = s + attn_mask
        return torch.softmax(s, dim=-1) @ v

    report = scratch.check_backward(textbook, array="torch", dtype="float64", seed=3)
    masked = next(c for c in report.cases if c.name == "masked-row")
    assert masked.status == "fail"
    assert masked.diagnosis.startswith("NaN from fully masked rows"), str(report)


def test_require_lists_dropout_among_the_backward_features():
    with pytest.raises(ValueError, match=r"require: expected names from .*float64, dropout, found"):
        scratch.check_backward(kernels.numpy_backward(), require="foo")
    with pytest.raises(ValueError, match=r"expected names from .*float64, found 'dropout'"):
        scratch.check(kernels_forward_stub, require="dropout")


def kernels_forward_stub(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Never called: `require` is refused before any case runs."""
    raise AssertionError("called")

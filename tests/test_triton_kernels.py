"""The Triton FlashAttention of tests/triton_kernels.py through scratch.check and check_backward:
interpreted on CPU tensors (TRITON_INTERPRET=1), and compiled on CUDA where torch sees a GPU.

Skipped without the optional triton extra (`make triton`, or pip install -e '.[triton]').
TRITON_INTERPRET must be set before triton is first imported (Triton's own tl.zeros, ... are
made interpreted or compiled then), and set in this process it would stay on for every later
test, a GPU's torch.compile included. So the interpreted checks run once, in a child process
(tests/triton_checks.py, about 25 s of CPU), and each test reads its part of the results.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="the optional triton extra is not installed (make triton)")
torch = pytest.importorskip("torch")

import scratch  # noqa: E402
from scratch.checker.diagnosis import DIAGONAL_SKIPPED, FLOAT32  # noqa: E402
from scratch.checker.interpreter import BFLOAT16  # noqa: E402
from tests.triton_checks import PLANTED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: compiled Triton")
WORDS = {  # planted mistake -> the start of its name
    "unrescaled": "accumulator not rescaled when the running max grows",
    "exp": "exp used where exp2 was meant",
    "no-log2e": "exp2 used without folding log2(e)",
    "diagonal": DIAGONAL_SKIPPED,
}


@pytest.fixture(scope="module")
def cpu() -> dict:
    """tests/triton_checks.py's results, from a child process with TRITON_INTERPRET=1."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "triton_checks.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_this_process_never_turns_the_interpreter_on(cpu):
    assert cpu["notes"]["kernel type"] == "InterpretedFunction"  # in the child
    assert os.environ.get("TRITON_INTERPRET") != "1"


def test_the_forward_passes_on_cpu_and_says_what_it_declines(cpu):
    found = cpu["forward"]
    assert found["ok"], found["text"]
    assert found["verdict"] == "PASS on 18 of 24 cases; masks, float64 unsupported"


def test_the_backward_passes_on_cpu(cpu):
    found = cpu["backward"]
    assert found["ok"], found["text"]
    assert found["verdict"] == "PASS on 13 of 18 cases; masks, dropout, float64 unsupported"


@pytest.mark.parametrize("bug", PLANTED)
def test_a_planted_mistake_fails_and_is_named(cpu, bug):
    found = cpu[bug]
    assert not found["ok"] and found["failed"], found["text"]
    assert (found["diagnosis"] or "").startswith(WORDS[bug]), found["text"]


def test_float64_let_through_is_computed_in_float32_and_named_so(cpu):
    """A Python float sm_scale reaches the kernel as float32 and its accumulators are float32:
    the float64 case fails (millions of times its bound) and is named, not passed."""
    found = cpu["float64"]
    assert list(found["failed"]) == ["float64"], found["text"]
    assert found["failed"]["float64"] > 1e5
    assert found["diagnosis"] == FLOAT32


def test_bfloat16_tl_dot_is_wrong_under_the_interpreter_and_the_report_says_so(cpu):
    """triton 3.9's interpreter multiplies bfloat16's 16-bit patterns in tl.dot: errors ~1e10,
    where an attention output is within max |v| (about 3 here)."""
    assert cpu["bfloat16 error"] > 1e6
    assert cpu["notes"]["kernels bfloat16"] == [BFLOAT16]
    report = scratch.checker.CheckReport("my:kernel", "dtype=bfloat16", notes=[BFLOAT16])
    assert str(report).rstrip().endswith(f"note: {BFLOAT16}")


def test_the_note_is_given_only_for_functions_reaching_interpreted_kernels_in_bfloat16(cpu):
    notes = cpu["notes"]
    assert notes["kernels float16"] == [] and notes["sdpa bfloat16"] == []
    assert cpu["forward"]["notes"] == []  # float32


@functools.cache
def compiled():
    """tests/triton_kernels.py, its kernels compiled (this process never sets TRITON_INTERPRET)."""
    from tests import triton_kernels

    return triton_kernels


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_compiled_kernels_pass_on_cuda(dtype):
    gpu = compiled()
    report = scratch.check(gpu.attention, array="torch", device="cuda", dtype=dtype)
    assert report, str(report)
    backward = scratch.check_backward(
        gpu.attention, backward=gpu.attention_backward, array="torch", device="cuda", dtype=dtype
    )
    assert backward, str(backward)


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("bug", PLANTED)
def test_a_planted_mistake_is_named_on_cuda(bug):
    fn = functools.partial(compiled().attention, bug=bug)
    report = scratch.check(fn, array="torch", device="cuda", seed=1)
    assert not report and (report.diagnosis or "").startswith(WORDS[bug]), str(report)

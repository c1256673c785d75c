"""The interpreted Triton checks of tests/test_triton_kernels.py, run in a child process.

Triton decides once, when it is first imported, whether its own library functions (tl.zeros,
...) run interpreted, so TRITON_INTERPRET=1 must be set before `import triton`; in the test
process it would stay set for every later test (and turn a GPU's compiled Triton, torch.compile
included, into the interpreter). `python tests/triton_checks.py` (with TRITON_INTERPRET=1 and
the repository on PYTHONPATH) prints one JSON object: each check's report in short.
"""

from __future__ import annotations

import functools
import json
import os
import sys

PLANTED = ("unrescaled", "exp", "no-log2e", "diagonal")  # tests/triton_kernels.py's bug=
PLANTED_SEED = 1


def short(report) -> dict:
    """What the tests read from a CheckReport."""
    return {
        "ok": bool(report),
        "verdict": report.verdict,
        "diagnosis": report.diagnosis,
        "notes": report.notes,
        "failed": {c.name: c.ratio for c in report.failed},
        "text": str(report),
    }


def main() -> dict:
    """Every interpreted check, by name."""
    import torch

    import scratch
    from scratch.checker.interpreter import interpreter_notes
    from tests import triton_kernels as tk

    found = {
        "forward": short(scratch.check(tk.attention, array="torch", seed=0)),
        "backward": short(
            scratch.check_backward(tk.attention, backward=tk.attention_backward, array="torch")
        ),
        "float64": short(
            scratch.check(functools.partial(tk.attention, bug="float64"), array="torch", seed=0)
        ),
    }
    for bug in PLANTED:
        fn = functools.partial(tk.attention, bug=bug)
        found[bug] = short(scratch.check(fn, array="torch", seed=PLANTED_SEED))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(20, 16, generator=g) for _ in range(3))
    out = tk.attention(*(t.to(torch.bfloat16) for t in (q, k, v)))
    truth = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    found["bfloat16 error"] = float((out.float() - truth).abs().max())
    sdpa = torch.nn.functional.scaled_dot_product_attention
    found["notes"] = {
        "kernels bfloat16": interpreter_notes(tk.attention, "bfloat16"),
        "kernels float16": interpreter_notes(tk.attention, "float16"),
        "sdpa bfloat16": interpreter_notes(sdpa, "bfloat16"),
        "kernel type": type(tk._forward_kernel).__name__,
    }
    return found


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (Triton reads it when first imported)")
    print(json.dumps(main()))

"""The checker against kernels written the way outside projects write them (tests/outside_kernels).

CORRECT: name -> (fn, array, dtype, masked_rows), must pass. FORWARD: name -> (fn, dtype,
masked_rows, words): a planted mistake and the words its diagnosis must hold (None: no name is
expected; any name is then a misname). BACKWARD: name -> (backward, dtype, words).
`outcome` scores one report: passed / named / unnamed / misnamed. Used by
tests/test_check_outside.py (seeds 0-1 / 0-2) and tests/checker_outside_sweep.py (seeds 0-49).
"""

from __future__ import annotations

import functools
from collections import Counter

from tests import outside_kernels as ok


def kernel(fn, name: str, **fixed):
    """fn with keywords fixed, under a readable name (the report prints it)."""
    part = functools.partial(fn, **fixed)

    def run(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        return part(q, k, v, attn_mask, is_causal, scale, enable_gqa)

    run.__name__ = run.__qualname__ = name
    return run


def backward(bug: str | None, **fixed):
    """The FlashAttention-2 backward with `bug` planted, as check_backward calls it."""
    part = functools.partial(ok.flash2_backward, bug=bug, **fixed)

    def run(q, k, v, grad_output, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
            dropout_p=0.0, dropout_mask=None):  # fmt: skip
        return part(q, k, v, grad_output, attn_mask, is_causal, scale, enable_gqa, dropout_p,
                    dropout_mask)  # fmt: skip

    run.__name__ = run.__qualname__ = f"flash2_backward_{bug}"
    return run


def _correct() -> dict:
    found = {}
    kernels = {
        "flash2 16x16": (kernel(ok.flash2_forward, "flash2"), "zero"),
        "flash2 64x32": (kernel(ok.flash2_forward, "flash2", bq=64, bk=32), "zero"),
        "flash2 two-pass": (kernel(ok.flash2_two_pass, "flash2_two_pass"), "zero"),
        "rabe-staats chunk 16": (kernel(ok.chunked, "chunked"), "zero"),
        "rabe-staats chunk 64": (kernel(ok.chunked, "chunked", chunk=64), "zero"),
        "attention_ref style": (kernel(ok.ref_wrapped, "ref"), "zero"),
        "mha math": (kernel(ok.mha_math, "mha"), "zero"),
        "picogpt": (kernel(ok.picogpt, "picogpt"), "uniform"),  # -1e10 masks: uniform rows
    }
    for name, (fn, policy) in kernels.items():
        # picoGPT's -1e10 mask: -inf in float16 (NaN rows), not absorbed by float64 scores
        dtypes = ("float32",) if name == "picogpt" else ("float16", "float32", "float64")
        for dtype in dtypes:
            found[f"{name} {dtype}"] = (fn, "numpy", dtype, policy)
    return found


CORRECT = _correct()
REFUSES_EV = kernel(ok.flash2_forward, "flash2_refuses_ev", refuse_ev=True)
CORRECT_BACKWARD = {
    f"flash2 backward {dtype}": (backward(None), dtype) for dtype in ("float32", "float64")
}


def _planted(fn, bug: str, words: str | None, dtype="float32", policy="zero") -> tuple:
    """(kernel, dtype, masked_rows, words) for `fn` with `bug` planted."""
    return (kernel(fn, f"{fn.__name__}_{bug}", bug=bug), dtype, policy, words)


def _flash(bug: str, dtype: str, words: str | None, **fixed) -> tuple:
    return (kernel(ok.flash2_forward, f"flash2_{bug}", bug=bug, **fixed), dtype, "zero", words)


FORWARD: dict[str, tuple] = {
    # misnamed before (issue 20)
    "flash2 exp for exp2": _flash("exp-for-exp2", "float32", "exp used where exp2 was meant"),
    "flash2 exp2 without the fold": _flash("exp2-no-fold", "float32", "exp2 used without"),
    "flash2 scale from Ev": _flash("scale-from-ev", "float32", "scale from the value width"),
    "two-pass natural lse in exp2": _planted(
        ok.flash2_two_pass, "lse-ln-in-exp2", "natural-log lse used inside exp2"
    ),
    "flash2 q @ k^T summed in float16": _flash(
        "qk-fp16-sum", "float16", "q @ k^T summed in float16"
    ),
    "ref dropout with a fixed seed": _planted(ok.ref_wrapped, "dropout-fixed-seed", None),
    "flash2 stale running max": _flash("stale-max", "float32", "running max"),
    # unnamed before
    "flash2 neither rescaled": _flash("no-rescale-both", "float32", "nor the denominator"),
    "flash2 rescale inverted in both": _flash("rescale-inverted-both", "float32", "inverted"),
    "rabe-staats no max correction": _planted(
        ok.chunked, "no-max-correction", "nor the denominator"
    ),
    "flash2 causal diagonal tile only": _flash(
        "causal-diag-tile", "float32", "only the diagonal tile"
    ),
    "flash2 denominator + 1": _flash("denominator-plus-1", "float32", "denominator + 1"),
    "flash2 eps float32": _flash("denominator-eps", "float32", "epsilon added to the softmax"),
    "flash2 eps float64": _flash("denominator-eps", "float64", "epsilon added to the softmax"),
    "flash2 last query block dropped": _flash(
        "drop-last-q-block", "float32", "last partial query block dropped"
    ),
    "flash2 float16 accumulator": _flash("acc-fp16", "float16", "accumulator stored in float16"),
    "flash2 output (B, L, H, Ev)": _flash("output-bshd", "float32", "(B, L, H, Ev) layout"),
    "ref output (B, L, H, Ev)": _planted(ok.ref_wrapped, "output-bshd", "(B, L, H, Ev) layout"),
    "mha float mask transposed": _planted(
        ok.mha_math, "float-mask-transposed", "float mask transposed"
    ),
    "flash2 GQA value head map": _flash("gqa-v-map", "float32", "v read from head h % Hkv"),
    "mha mask after softmax": _planted(
        ok.mha_math, "mask-after-softmax", "mask applied after the softmax"
    ),
    "picogpt no max subtraction": _planted(
        ok.picogpt, "no-max", "subtract the row max", "float32", "uniform"
    ),
    "picogpt scale on v": _planted(
        ok.picogpt, "scale-on-v", "scale applied to v", "float32", "uniform"
    ),
    "picogpt triu causal": _planted(
        ok.picogpt, "triu-causal", "causal mask inverted", "float32", "uniform"
    ),
}

BACKWARD: dict[str, tuple] = {
    "block's own softmax": (backward("block-softmax"), "float32", "block's own softmax"),
    "causal mask missing in recompute": (
        backward("mask-missing-in-recompute"),
        "float32",
        "not applied when P is recomputed",
    ),
    "dQ overwritten": (backward("dq-overwritten"), "float32", "dQ overwritten"),
    "dK overwritten": (backward("dk-overwritten"), "float32", "dK overwritten"),
    "dropout 1/(1-p) missing": (backward("dropout-unscaled"), "float32", "1/(1-p) missing"),
    "dS without P": (backward("ds-without-p"), "float32", "dS without P"),
    "dV from P before dropout": (backward("dv-before-dropout"), "float32", "before dropout"),
    "GQA interleaved sum": (backward("gqa-interleaved-sum"), "float32", "interleaved"),
    "lse in log2 units": (backward("lse-log2"), "float32", "log2 units"),
    "lse of unscaled scores": (backward("lse-unscaled"), "float32", "lse from another scale"),
}


def outcome(report, words: str | None) -> str:
    """'passed', 'named' (every name holds the words), 'unnamed' or 'misnamed' (a wrong name)."""
    if report:
        return "passed"
    names = {c.diagnosis for c in report.failed if c.diagnosis}
    if not names:
        return "unnamed"
    if words is not None and all(words in n for n in names):
        return "named"
    return "misnamed"


def print_mistake_rows(rows: dict, names: dict, n: int) -> None:
    """A sweep's row per planted mistake (caught, named, unnamed, misnamed of n seeds) and the
    three commonest wrong names of each."""
    for name, c in rows.items():
        caught = n - c["passed"]
        print(f"{name:<42} {caught:>6} {c['named']:>5} {c['unnamed']:>7} {c['misnamed']:>8}")
        for words, times in names.get(name, Counter()).most_common(3):
            print(f"    misnamed {times}x: {words[:150]}")

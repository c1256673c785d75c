"""A kernel's reported log-sum-exp, checked beside its output (check_variants).

A kernel may return (out, lse): FlashAttention's `softmax_lse` (batch, nheads, seqlen_q), or
(nheads, total_q) packed for flash_attn_varlen_func; FlexAttention's `return_lse` (B, H, L).
Both are natural logs; Triton kernels written after its fused-attention tutorial keep theirs in
base 2 (m log2(e) + log2 l, ready for exp2), so `lse_base=2` checks that convention instead. A row
that sees no key (and has no sink) has lse -inf in FlexAttention and +inf in FlashAttention: either
infinity passes there, a finite number does not. The allowed error is the output's rule applied to
the reference passes' own lse (variant_prepare.lse_allowed).
"""

from __future__ import annotations

import math

import numpy as np

from scratch.checker.reference import max_error
from scratch.checker.variant_layout import VARLEN
from scratch.checker.variant_numpy import scores
from scratch.checker.variant_planted import CORRECT

BASES = {"e": 1.0, "2": 1.0 / math.log(2.0)}  # lse_base -> the factor on a natural-log lse
OTHER_BASE = {
    "e": "lse in base 2 (m log2(e) + log2 l, as an exp2 kernel keeps it) reported where a natural "
    "log is expected: multiply it by ln 2 = 0.693 (or check with lse_base=2 if base 2 is meant)",
    "2": "lse reported as a natural log (m + log l) although lse_base=2 says base 2: multiply it "
    "by log2(e) = 1.443 (or check with lse_base='e')",
}
NO_SINK = (
    "lse without the sink's term: the sink is one more term of the softmax's denominator, so "
    "lse = log(sum_j exp(s_j) + exp(sink)), not the log of the scores' sum alone"
)
NO_MAX = (
    "lse without the row's max: log l reported, l the sum of exp(s_j - m) taken relative to the "
    "max m; lse = m + log l"
)
EMPTY_ROW = (
    "a row that sees no key was given a finite lse: its lse is -inf (FlexAttention) or +inf "
    "(FlashAttention), as log 0"
)


def lse_base(value: object) -> str:
    """'e' or '2' from lse_base ('e', math.e, 2 or '2'); ValueError otherwise."""
    if value in ("e", math.e) and not isinstance(value, bool):
        return "e"
    if value in (2, "2") and not isinstance(value, bool):
        return "2"
    raise ValueError(f"lse_base: expected 'e' (a natural log) or 2 (base 2), found {value!r}")


def lse_shape(style: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The reported lse's shape for an output of `shape` (B, H, L, Ev) in style's layout."""
    B, H, L, _ = shape
    return (H, B * L) if style == VARLEN else (B, H, L)


def read_lse(found: object, arrays, style: str, shape: tuple[int, ...]) -> np.ndarray | str:
    """The reported lse as float64 (B, H, L), or what is wrong with it."""
    try:
        got = np.asarray(arrays.floats(found), dtype=np.float64)
    except (TypeError, ValueError, AttributeError) as exc:
        return f"not an array of numbers: {type(found).__name__} ({exc})"
    want = lse_shape(style, shape)
    if got.shape != want:
        what = "(nheads, total_q)" if style == VARLEN else "(batch, nheads, seqlen_q)"
        return f"shape {got.shape}, expected {want} {what}"
    if style == VARLEN:
        B, H, L, _ = shape
        got = got.reshape(H, B, L).transpose(1, 0, 2)  # (H, B * L) -> (B, H, L)
    return got


def lse_error(got: np.ndarray, truth: np.ndarray) -> float:
    """The largest |got - truth|; a row with no key (truth -inf) must be infinite (0 error)."""
    live = np.isfinite(truth)
    if np.any(np.isfinite(got[~live])) or np.any(np.isnan(got)):
        return math.inf
    return max_error(got, truth, live)


def judge_lse(result, prep, got: np.ndarray, base: str) -> None:
    """Pass the case, or fail it with the lse's error and, when one fits, the mistake's name."""
    truth, allowed = prep.lse * BASES[base], prep.lse_allowed * BASES[base]  # (B, H, L)
    err = lse_error(got, truth)
    if err <= allowed:
        result.status = "pass"
        return
    result.max_error, result.bound = err, allowed
    result.ratio = err / allowed if allowed > 0 else math.inf
    result.diff = None  # the output passed; the heatmap's |output - truth| would mislead
    words = "natural-log" if base == "e" else "base-2"
    result.message = f"lse: max error {err:.3g} > allowed {allowed:.3g} (a {words} lse expected)"
    result.diagnosis = lse_mistake(prep, got, base)


def lse_mistake(prep, got: np.ndarray, base: str) -> str | None:
    """The name of a reported lse's mistake: a finite lse for a row with no key, the other
    base, the sink left out; None when none fits every row."""
    truth, allowed = prep.lse * BASES[base], prep.lse_allowed * BASES[base]
    live = np.isfinite(truth)
    if np.any(np.isfinite(got[~live])) and max_error(got, truth, live) <= allowed:
        return EMPTY_ROW
    other = "2" if base == "e" else "e"
    if lse_error(got, prep.lse * BASES[other]) <= prep.lse_allowed * BASES[other]:
        return OTHER_BASE[base]
    s, _ = scores(prep.case, prep.data, CORRECT, np.float64)  # (1, H, L, S), masked: -inf
    top = s.max(-1)  # (1, H, L): each row's max
    if prep.data.sinks is not None:
        top = np.maximum(top, np.asarray(prep.data.sinks)[None, :, None])
    with np.errstate(invalid="ignore"):  # -inf - -inf: a row with no key stays -inf
        alone = np.where(np.isfinite(prep.lse), prep.lse - top, -np.inf)
    if lse_error(got, alone * BASES[base]) <= allowed:
        return NO_MAX
    if prep.data.sinks is not None:  # log(exp(lse) - exp(sink)): the scores' sum alone
        sink = np.asarray(prep.data.sinks)[None, :, None]  # (1, H, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            alone = prep.lse + np.log1p(-np.exp(sink - prep.lse))  # -inf: no key seen
        if lse_error(got, alone * BASES[base]) <= allowed:
            return NO_SINK
    return None


__all__ = ["lse_base", "judge_lse", "lse_shape", "read_lse"]
